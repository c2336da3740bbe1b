"""The steps that built the qwen05b judge, end to end on a tiny model through ``reflectrm train``:
``pool`` splits the pool by prompt and drops benchmark prompts; ``states`` (the one states pass)
reads every planned item once, shared by two workers, keeping the states the model computes;
``readouts`` fits and scores the position-free readouts on them; ``marker-layer`` fits the verdict
layer and writes the artifact its manifest describes."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer

from reflectrm.checkpoints.artifact import unpack_sparse
from reflectrm.checkpoints.backbones import QWEN_CODER_05B
from reflectrm.checkpoints.files import ARTIFACT_MANIFEST, VERDICT_WEIGHTS, file_sha256
from reflectrm.engines.chat import ChatRenderer
from reflectrm.judging.prompts import get_template, preference_chat
from reflectrm_harness.training.cli import main
from reflectrm_harness.training.judge.pool import PoolConfig, read_pool
from reflectrm_harness.training.judge.states import LEAD, STATES_DIR, load_plan, load_states
from support.tiny_models import QUESTIONS, save_tiny_judge

SOURCES = ("helpsteer2_ratings_pairs", "pandalm_human_testset")


def _write(path: Path, rows: list[dict[str, object]]) -> Path:
    with gzip.open(path, "wt", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    return path


@pytest.fixture(scope="module")
def recipe(tmp_path_factory: pytest.TempPathFactory, smol_tokenizer: object) -> dict[str, Path]:
    """A pool of two sources (36 prompts each, one of them a benchmark's), a benchmark file, a
    2-layer model, and the states pass over them: two workers, then one reading what is left."""
    root = tmp_path_factory.mktemp("recipe")
    files = {"model": save_tiny_judge(root / "model", smol_tokenizer, layers=2)}
    for s, source in enumerate(SOURCES):
        rows = [
            {"id": f"{source}/{i}", "prompt": f"{q} ({s}, {i})", "chosen": a, "rejected": b}
            for i in range(36)
            for q, a, b in [QUESTIONS[i % len(QUESTIONS)]]
        ]
        files[source] = _write(root / f"{source}.jsonl.gz", rows)
    bench = [
        {"id": f"rb/{i}", "prompt": q, "chosen": a, "rejected": b, "section": "Chat"}
        for i, (q, a, b) in enumerate(QUESTIONS)
    ]
    bench.append(
        {"id": "rb/dup", "prompt": "What is 2 + 2? (0, 1)", "chosen": "4", "rejected": "5"}
    )
    files["bench"] = _write(root / "rewardbench.jsonl.gz", bench)
    files["states"] = root / "states"
    model = ["--model", str(files["model"]), "--out", str(files["states"]), "--threads", "1"]
    # worker k/n reads the pairs k mod n of what is left (workers run side by side); a pass run
    # after them reads what they left
    for worker in ("0/2", "1/2", "0/1"):
        assert main(["train", "states", *_data(files), *model, "--worker", worker]) == 0
    return files


def _data(files: dict[str, Path]) -> list[str]:
    out = []
    for source in SOURCES:
        out += ["--data", str(files[source])]
    return [*out, "--benchmark", str(files["bench"])]


def test_the_pool_is_split_by_prompt_and_drops_benchmark_prompts(recipe: dict[str, Path]) -> None:
    pool = read_pool([recipe[s] for s in SOURCES], [recipe["bench"]], PoolConfig())
    first, second = (pool.sources[s] for s in SOURCES)
    assert first["dropped_in_benchmark"] == 1  # "What is 2 + 2? (0, 1)"
    assert second["dropped_in_benchmark"] == 0
    assert second["pairs"] == second["train"] + second["dev"] + second["heldout"]
    assert first["sha256"] == file_sha256(recipe[SOURCES[0]])
    assert {"train", "dev", "heldout"} == set(pool.roles.values())


def test_pool_split_writes_one_role_of_the_pool(recipe: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "heldout.jsonl"
    cap = f"{SOURCES[1]}=2"
    assert main(["train", "pool-split", *_data(recipe), "--cap", cap, "--out", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    pool = read_pool([recipe[s] for s in SOURCES], [recipe["bench"]], PoolConfig())
    assert len(rows) == pool.sources[SOURCES[0]]["heldout"] + 2
    assert all(pool.roles[f"{r['source']}/{r['id']}"] == "heldout" for r in rows)


def test_the_pass_reads_every_planned_item_once(recipe: dict[str, Path]) -> None:
    plan = load_plan(recipe["states"])
    states = load_states(recipe["states"])
    assert sorted(states) == sorted(it.name for it in plan)
    shards = sorted(p.name for p in (recipe["states"] / STATES_DIR).glob("*.pt"))
    assert [s[11:] for s in shards] == ["-w0.pt", "-w1.pt", ".pt"]
    assert {it.role for it in plan} == {"train", "dev", "bench"}
    # A pass run again has nothing left to read.
    before = len(shards)
    args = ["train", "states", *_data(recipe), "--model", str(recipe["model"])]
    assert main([*args, "--out", str(recipe["states"]), "--threads", "1"]) == 0
    assert len(list((recipe["states"] / STATES_DIR).glob("*.pt"))) == before


def test_the_saved_states_are_what_the_model_computes(recipe: dict[str, Path]) -> None:
    plan = {it.name: it for it in load_plan(recipe["states"])}
    states = load_states(recipe["states"])
    tok = AutoTokenizer.from_pretrained(recipe["model"])
    model = AutoModelForCausalLM.from_pretrained(recipe["model"], dtype=torch.bfloat16)
    pool = read_pool([recipe[s] for s in SOURCES], [recipe["bench"]], PoolConfig())
    for name in [n for n, it in plan.items() if it.role == "train"][:2]:
        it, rec = plan[name], states[name]
        assert list(rec["positions"]) == ["end1", "start1", "end2", "start2", "dec"]
        assert rec["top"].shape == rec["mid"].shape == (5 + len(rec["negatives"]), 32)
        pair = pool.pairs[f"{it.source}/{it.pair_id}"]
        r1, r2 = (pair.chosen, pair.rejected) if it.chosen_first else (pair.rejected, pair.chosen)
        chat = preference_chat(get_template("v3"), pair.conversation, r1, r2)
        ids = list(ChatRenderer(tok).render(chat).token_ids)
        ids += tok.encode(LEAD, add_special_tokens=False)
        assert rec["tokens"] == len(ids) == rec["positions"]["dec"] + 1
        with torch.no_grad():
            out = model(input_ids=torch.tensor([ids]), output_hidden_states=True)
        mid = out.hidden_states[1][0].float()  # leaving layer 0, the middle of two
        rows = list(rec["positions"].values()) + list(rec["negatives"])
        assert torch.allclose(rec["mid"], mid[rows], atol=0.1)
        digits = [tok.encode(d, add_special_tokens=False)[0] for d in ("1", "2")]
        own = float(out.logits[0, -1, digits[0]] - out.logits[0, -1, digits[1]])
        assert rec["own_margin"] == pytest.approx(own, abs=0.1)
    cut = next(states[n] for n, it in plan.items() if it.cut)
    assert list(cut["positions"]) == ["end1", "start1"]
    assert "own_margin" not in cut


def test_readouts_fit_and_score_on_the_pass(recipe: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "readouts.json"
    assert main(["train", "readouts", "--states", str(recipe["states"]), "--out", str(out)]) == 0
    report = json.loads(out.read_text())["states"]
    for layer in ("top", "mid"):
        assert report[layer]["train_pairs"] >= 20
        groups = report[layer]["by_penalty"]["0.001"]
        assert {"dev", "bench/rewardbench-chat"} <= set(groups)
        assert groups["dev"]["pairs"] == report[layer]["dev_pairs"] > 0


def test_the_marker_layer_is_fitted_and_shipped(recipe: dict[str, Path], tmp_path: Path) -> None:
    prepared = {"gguf_sha256": QWEN_CODER_05B.gguf_sha256}
    (recipe["model"] / "reflectrm-prepared.json").write_text(json.dumps(prepared))
    out, report = tmp_path / "artifact", tmp_path / "report.json"
    args = ["--states", str(recipe["states"]), "--model", str(recipe["model"]), "--name", "tiny"]
    assert main(["train", "marker-layer", *args, "--out", str(out), "--report", str(report)]) == 0
    manifest = json.loads((out / ARTIFACT_MANIFEST).read_text())
    assert manifest["files"] == {VERDICT_WEIGHTS: file_sha256(out / VERDICT_WEIGHTS)}
    assert manifest["split"]["seed"] == PoolConfig().seed
    fit = json.loads(report.read_text())
    assert fit["chosen"] == manifest["fit"]["chosen"]
    assert fit["chosen"]["kappa"] in (0.5, 1.0, 2.0, 4.0, 8.0)
    assert len(fit["grid"]) == 2 * 5 * 5
    layer = unpack_sparse(load_file(str(out / VERDICT_WEIGHTS)))
    # the added layer sits on top of the model's two; its heads 0 and 2 read the two markers
    q_bias = layer["model.layers.2.self_attn.q_proj.bias"].view(4, 8)
    assert q_bias[[0, 2], 3].abs().min() > 0
    assert q_bias[[1, 3]].abs().max() == 0
    assert float(layer["model.layers.2.self_attn.o_proj.weight"].abs().max()) > 0
