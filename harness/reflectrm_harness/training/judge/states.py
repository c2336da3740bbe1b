"""The states pass of the judge recipe: a frozen backbone reads judging prompts, once.

Every later step of the recipe (the position-free readouts that compare backbones, the verdict
layer's fit, its scale) works on what this pass keeps, so the pass is the one long run, and it is
resumable. ``run_pass`` is the one pass of the recipe (this backbone pass, ``read_states``, and
the verdict layer's, ``verdict_layer.extract_states``, are its callers): states are written in
shards (``NNNNN-COUNT.pt``: the items' names, their states, the seconds spent) every
``checkpoint_every_s`` and at any stop, and a resumed pass computes only what is missing.

An item is one pair in one order, rendered exactly as the engine renders it (the same chat
template, judged texts tokenized as plain text), followed by the decision-first lead the output
format forces (``<Analysis>Response ``): the next token is the verdict's digit. For each item the
residual stream leaving the top decoder layer (what an added layer on top reads) and leaving a
middle layer is kept at:

- ``end1`` / ``end2``: the token closing ``[End of Response k]``. In the template's layout (v3: the
  responses come before the task) ``end1`` has read only the system turn, the
  conversation and the first response: over the two orders it is a position-free encoding of
  each response, which is what the backbone comparison reads;
- ``dec``: the last token, where the verdict's digit is predicted, with the model's own margin
  between the two digits there;
- ``start1`` / ``start2`` (the tokens closing ``[Response k]``) and ``negatives_per_item``
  random positions: what a marker probe must tell from a marker.

A ``cut`` item (benchmark samples, read for the readout only) stops after ``end1``.
The two orders of a pair share their prefix up to the first response: it is computed once.
"""

from __future__ import annotations

import copy
import hashlib
import json
import random
import sys
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypeVar

from reflectrm.engines.chat import ChatRenderer
from reflectrm.judging.prompts import get_template, preference_chat
from reflectrm_harness.datasets import Pair, pair_from_row, read_rows
from reflectrm_harness.training.judge.model import save_atomically

T = TypeVar("T")

STATES_DIR = "states"
PLAN = "plan.json"
LEAD = "<Analysis>Response "


@dataclass(frozen=True)
class Item:
    """One pair in one order: ``chosen_first`` says which order; ``role`` is train, dev or the
    benchmark group it samples."""

    pair_id: str
    source: str
    role: str
    chosen_first: bool
    cut: bool
    subset: str = ""
    chosen_longer: bool | None = None  # None: equal lengths

    @property
    def name(self) -> str:
        return f"{self.source}/{self.pair_id}/{'c1' if self.chosen_first else 'c2'}"


@dataclass(frozen=True)
class StatesConfig:
    template_version: str = "v3"
    max_prompt_tokens: int = 1024
    negatives_per_item: int = 16
    mid_layer_fraction: float = 2 / 3
    checkpoint_every_s: float = 120.0
    threads: int = 0
    seed: int = 0


# --- what to read -----------------------------------------------------------------------------


def read_file_pairs(path: Path) -> list[tuple[Pair, dict[str, Any]]]:
    """Every pair of a shared-schema file with its raw row (subset, section, difficulty...)."""
    out = []
    for where, row in read_rows(path):
        out.append((pair_from_row(row, where=where), row))
    return out


def chosen_longer(pair: Pair) -> bool | None:
    a, b = len(pair.chosen), len(pair.rejected)
    return None if a == b else a > b


def interleave(buckets: Sequence[Sequence[T]]) -> list[T]:
    """Round robin over buckets, so that a pass stopped anywhere holds a balanced sample."""
    out: list[T] = []
    longest = max((len(b) for b in buckets), default=0)
    for k in range(longest):
        for b in buckets:
            if k < len(b):
                out.append(b[k])
    return out


def both_orders(pair: Pair, source: str, role: str, cut: bool, subset: str = "") -> list[Item]:
    longer = chosen_longer(pair)
    return [Item(pair.id, source, role, first, cut, subset, longer) for first in (True, False)]


# --- the pass ---------------------------------------------------------------------------------


def find_after(ids: Sequence[int], pattern: Sequence[int], *, last: bool = False) -> int | None:
    """The index of the token just after ``pattern`` (first or last match), or None."""
    n = len(pattern)
    hits = [i + n for i in range(len(ids) - n) if list(ids[i : i + n]) == list(pattern)]
    if not hits:
        return None
    return hits[-1] if last else hits[0]


class Reader:
    """A frozen causal LM that keeps the residual stream leaving two layers."""

    def __init__(self, model_path: str, config: StatesConfig) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if config.threads:
            torch.set_num_threads(config.threads)
        self.torch = torch
        self.config = config
        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.bfloat16)
        self.model.eval()
        self.renderer = ChatRenderer(self.tokenizer)
        self.template = get_template(config.template_version)
        layers = self.model.model.layers
        self.top = len(layers) - 1
        self.mid = round(config.mid_layer_fraction * len(layers)) - 1
        self._captured: dict[int, Any] = {}
        for index in (self.mid, self.top):
            layers[index].register_forward_hook(self._hook(index))
        enc = self.tokenizer
        self.lead_ids = enc.encode(LEAD, add_special_tokens=False)
        self.digit_ids = [enc.encode(d, add_special_tokens=False)[0] for d in ("1", "2")]
        self.end_pattern = [
            enc.encode(f"[End of Response {k}", add_special_tokens=False) for k in (1, 2)
        ]
        self.start_pattern = [
            enc.encode(f"[Response {k}", add_special_tokens=False) for k in (1, 2)
        ]
        self.fingerprint = hashlib.sha256(
            json.dumps([model_path.rstrip("/").split("/")[-1], self.top, self.mid]).encode()
        ).hexdigest()[:12]

    def _hook(self, index: int) -> Any:
        def keep(_module: Any, _inputs: Any, output: Any) -> None:
            hidden = output[0] if isinstance(output, tuple) else output
            self._captured[index] = hidden[0].detach().float()

        return keep

    def token_ids(self, pair: Pair, chosen_first: bool) -> list[int]:
        r1, r2 = (pair.chosen, pair.rejected) if chosen_first else (pair.rejected, pair.chosen)
        chat = preference_chat(self.template, pair.conversation, r1, r2)
        return list(self.renderer.render(chat).token_ids) + list(self.lead_ids)

    def positions(self, ids: Sequence[int], cut: bool) -> dict[str, int] | None:
        # The template's markers: a judged text cannot spell them (neutralize), and the last
        # match is the template's own in case a text spells the unbracketed words.
        pos: dict[str, int] = {}
        for k in (1, 2):
            end = find_after(ids, self.end_pattern[k - 1], last=True)
            start = find_after(ids, self.start_pattern[k - 1])
            if end is None or start is None:
                return None
            pos[f"end{k}"], pos[f"start{k}"] = end, start
        if cut:
            return {"end1": pos["end1"], "start1": pos["start1"]}
        pos["dec"] = len(ids) - 1
        return pos

    def read(self, pair: Pair, items: Sequence[Item], rng: random.Random) -> dict[str, Any]:  # noqa: C901
        """The states of one pair's items (one or both orders), sharing their common prefix."""
        torch = self.torch
        seqs = [self.token_ids(pair, it.chosen_first) for it in items]
        plans = [self.positions(s, it.cut) for s, it in zip(seqs, items, strict=True)]
        ends: list[int | None] = []
        for s, it, p in zip(seqs, items, plans, strict=True):
            if p is None:
                ends.append(None)
                continue
            ends.append(p["end1"] + 1 if it.cut else len(s))
        common = 0
        e0, e1 = [*ends, None, None][:2]
        if len(seqs) == 2 and e0 is not None and e1 is not None:
            a, b = seqs
            while common < min(e0, e1) - 1 and a[common] == b[common]:
                common += 1
        out: dict[str, Any] = {}
        with torch.inference_mode():
            prefix_cache = None
            prefix_states: dict[int, Any] = {}
            if common:
                res = self.model.model(input_ids=torch.tensor([seqs[0][:common]]), use_cache=True)
                prefix_cache = res.past_key_values
                prefix_states = dict(self._captured)
            for s, it, p, end in zip(seqs, items, plans, ends, strict=True):
                if p is None or end is None:
                    out[it.name] = {"skipped": "markers not found"}
                    continue
                if end > self.config.max_prompt_tokens:
                    out[it.name] = {"skipped": "too long", "tokens": end}
                    continue
                cache = copy.deepcopy(prefix_cache) if prefix_cache is not None else None
                start = common if cache is not None else 0
                res = self.model.model(
                    input_ids=torch.tensor([s[start:end]]), past_key_values=cache, use_cache=False
                )
                states = {}
                for layer in (self.mid, self.top):
                    seg = self._captured[layer]
                    if start:
                        seg = torch.cat([prefix_states[layer], seg], dim=0)
                    states[layer] = seg
                named = dict(p)
                taken = set(named.values())
                pool = [i for i in range(8, end) if i not in taken]
                negatives = sorted(rng.sample(pool, min(self.config.negatives_per_item, len(pool))))
                record: dict[str, Any] = {"tokens": end, "positions": named, "negatives": negatives}
                index = list(named.values()) + negatives
                for layer, key in ((self.top, "top"), (self.mid, "mid")):
                    record[key] = states[layer][index].to(torch.float32).clone()
                if not it.cut:
                    h = self.model.model.norm(states[self.top][p["dec"]].to(torch.bfloat16))
                    logits = self.model.lm_head(h).float()
                    record["own_margin"] = float(
                        logits[self.digit_ids[0]] - logits[self.digit_ids[1]]
                    )
                out[it.name] = record
        return out


# --- the one pass: shards of saved states, resumable -----------------------------------------


def run_pass(
    folder: Path,
    units: Sequence[Sequence[T]],
    name: Callable[[T], str],
    start: Callable[[], Callable[[list[T]], dict[str, Any]]],
    settings: dict[str, Any],
    *,
    checkpoint_every_s: float,
    resume: bool = True,
    worker: tuple[int, int] = (0, 1),
    say: Callable[[str], None] = print,
    progress_bar: bool = True,
) -> dict[str, Any]:
    """Reads every unit's items not saved yet in ``folder`` (each named by ``name``), with the
    reader ``start()`` gives (made only if there is something to read; a unit's items are read
    together: the two orders of a pair); a shard of what was read every ``checkpoint_every_s``
    and at any stop. ``worker`` (k, n): this process reads the units k mod n of what is left,
    so that n processes share a pass. A folder of other ``settings`` is refused, and one holding
    states without ``resume``. Returns the items saved, planned, and the seconds spent reading."""
    from tqdm import tqdm

    folder.mkdir(parents=True, exist_ok=True)
    saved, seconds_before = _saved(folder)
    if saved and not resume:
        raise ValueError(f"{folder} holds states: pass --resume to continue")
    _check_settings(folder, settings)
    planned = sum(len(u) for u in units)
    left = [todo for todo in ([it for it in u if name(it) not in saved] for u in units) if todo]
    have = planned - sum(len(u) for u in left)
    k, n = worker
    todo = left[k::n]
    if have:
        say(f"states: {have} of {planned} items saved; {sum(map(len, todo))} to go")
    if not todo:
        return {"items": planned, "planned": planned, "seconds": seconds_before}
    read = start()
    bar = tqdm(total=planned, initial=have, unit="item", file=sys.stderr, disable=not progress_bar)
    pending: dict[str, Any] = {}
    seconds = 0.0  # of the pending states
    done = 0
    last_save = time.monotonic()
    try:
        for unit in todo:
            t0 = time.monotonic()
            pending.update(read(unit))
            seconds += time.monotonic() - t0
            bar.update(len(unit))
            if time.monotonic() - last_save >= checkpoint_every_s:
                _write_shard(folder, pending, seconds, k if n > 1 else None)
                done, seconds_before = done + len(pending), seconds_before + seconds
                pending, seconds, last_save = {}, 0.0, time.monotonic()
    finally:
        if pending:
            _write_shard(folder, pending, seconds, k if n > 1 else None)
            done, seconds_before = done + len(pending), seconds_before + seconds
        bar.close()
    return {"items": have + done, "planned": planned, "seconds": seconds_before}


def load_records(
    folder: Path, names: Collection[str] | None = None
) -> tuple[dict[str, Any], float]:
    """The saved states (all, or those ``names``) by name, and the pass's seconds over every
    saved state."""
    import torch

    found: dict[str, Any] = {}
    seconds = 0.0
    for path in _shard_paths(folder):
        shard = torch.load(path, weights_only=False)
        seconds += float(shard["seconds"])
        for key, state in zip(shard["keys"], shard["states"], strict=True):
            if names is None or key in names:
                found[key] = state
    return found, seconds


def _check_settings(folder: Path, settings: dict[str, Any]) -> None:
    """Refuse a states folder written with other settings (``states.json``); mark a new one."""
    marker = folder / "states.json"
    if not marker.is_file():
        marker.write_text(json.dumps(settings) + "\n")
        return
    if json.loads(marker.read_text()) != json.loads(json.dumps(settings)):
        raise ValueError(
            f"{folder} holds states of other settings ({', '.join(settings)}): "
            "use another --out or the same settings"
        )


def _write_shard(folder: Path, states: dict[str, Any], seconds: float, worker: int | None) -> None:
    """One shard: its items' names, their states and the pass's seconds spent on them (a
    worker's shards carry its number, so that workers of one pass never write the same file)."""
    number = max((int(p.stem.split("-")[0]) for p in _shard_paths(folder)), default=-1) + 1
    tail = "" if worker is None else f"-w{worker}"
    shard = {"keys": list(states), "states": list(states.values()), "seconds": seconds}
    save_atomically(shard, folder / f"{number:05d}-{len(states):05d}{tail}.pt")


def _shard_paths(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.pt"))


def _saved(folder: Path) -> tuple[set[str], float]:
    """The names of every saved state and the pass's seconds spent on them (each shard read
    once, its tensors mapped, not loaded)."""
    import torch

    keys: set[str] = set()
    seconds = 0.0
    for path in _shard_paths(folder):
        shard = torch.load(path, weights_only=False, mmap=True)
        keys.update(shard["keys"])
        seconds += float(shard["seconds"])
    return keys, seconds


# --- the backbone states pass (``reflectrm train states``) ----------------------------------


def read_states(
    plan: Sequence[Item],
    pairs: dict[str, Pair],
    model_path: str,
    out_dir: Path,
    config: StatesConfig,
    *,
    worker: tuple[int, int] = (0, 1),
    progress_bar: bool = True,
) -> dict[str, Any]:
    """Reads every planned item not yet saved in ``out_dir/states``, a pair's two orders
    together (sharing their prefix); ``worker`` as in ``run_pass``."""
    units: dict[tuple[str, str], list[Item]] = {}
    for it in plan:
        units.setdefault((it.source, it.pair_id), []).append(it)
    rng = random.Random(config.seed + worker[0])

    def start() -> Callable[[list[Item]], dict[str, Any]]:
        reader = Reader(model_path, config)
        return lambda items: reader.read(pairs[f"{items[0].source}/{items[0].pair_id}"], items, rng)

    settings = {
        "model": model_path.rstrip("/").split("/")[-1],
        **{k: v for k, v in asdict(config).items() if k not in ("checkpoint_every_s", "threads")},
    }
    return run_pass(
        out_dir / STATES_DIR,
        list(units.values()),
        lambda it: it.name,
        start,
        settings,
        checkpoint_every_s=config.checkpoint_every_s,
        worker=worker,
        progress_bar=progress_bar,
    )


def load_states(out_dir: Path) -> dict[str, dict[str, Any]]:
    """Every item a states pass saved: its tokens, ``positions``, ``negatives`` and (unless
    skipped) the ``top`` and ``mid`` states at them (rows: the positions, then the negatives)."""
    return dict(load_records(out_dir / STATES_DIR)[0])


def load_plan(out_dir: Path) -> list[Item]:
    return [Item(**d) for d in json.loads((out_dir / PLAN).read_text())["items"]]


def save_plan(out_dir: Path, items: Iterable[Item], info: dict[str, Any]) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    body = {"info": info, "items": [asdict(it) for it in items]}
    (out_dir / PLAN).write_text(json.dumps(body, indent=1))
