"""Group evaluation: hand-computed metrics, the seeded bootstrap, readers, and the pooled path
against the served one on a scripted engine."""

from __future__ import annotations

import asyncio
import gzip
import json
import math
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from reflectrm.engines.base import GenerationResult, Prompt, SamplingSpec
from reflectrm.judging.groups import STRATEGIES
from reflectrm.judging.types import Message
from reflectrm.settings import Settings
from reflectrm_harness.datasets import DatasetError
from reflectrm_harness.evaluation import cli
from reflectrm_harness.evaluation.groups import command as group_cli
from reflectrm_harness.evaluation.groups import report as group_report
from reflectrm_harness.evaluation.groups.data import Group, load_groups, read_groups, sample_groups
from reflectrm_harness.evaluation.groups.report import chance, rmbench_items
from reflectrm_harness.evaluation.groups.runner import (
    GroupSettings,
    PoolJudgment,
    design_plan,
    in_process_groups,
    load_rows,
    pool_plan,
    pooled_rewards,
    run_group_units,
)
from reflectrm_harness.evaluation.scoring import (
    all_above,
    best_of_n,
    group_bootstrap,
    kendall_tau_b,
)
from support.engines import judgment
from support.prerequisites import SHARED_DATA, require_shared_data

# --- hand-computed metrics -------------------------------------------------------------------


def test_best_of_n_counts_ties_at_the_top_as_a_share():
    assert best_of_n([0.9, 0.1, 0.5], best=[0]) == 1.0
    assert best_of_n([0.5, 0.9, 0.1], best=[0]) == 0.0
    # Three tied for the top, the best among them: one third.
    assert best_of_n([0.7, 0.7, 0.7, 0.2], best=[0]) == pytest.approx(1 / 3)
    # RM-Bench: several best; two of the four tied at the top are chosen.
    assert best_of_n([0.6, 0.6, 0.1, 0.6, 0.6, 0.2], best=[0, 1, 2]) == 0.5
    # All tied: the share of best completions.
    assert best_of_n([0.5] * 4, best=[2]) == 0.25


def test_kendall_tau_b_with_ties_on_both_sides():
    # A perfect and a reversed order of four distinct ranks.
    assert kendall_tau_b([4, 3, 2, 1], [0, 1, 2, 3]) == 1.0
    assert kendall_tau_b([1, 2, 3, 4], [0, 1, 2, 3]) == -1.0
    # Two tiers (2 + 2): n0 = 6 pairs; the gold order ties 2 (within the tiers), the rewards
    # tie 3: (0, 1), (0, 3), (1, 3). Cross-tier pairs: (0,2) concordant, (0,3) tied,
    # (1,2) concordant, (1,3) tied: C = 2, D = 0; tau-b = 2 / sqrt((6 - 3) (6 - 2)).
    tau = kendall_tau_b([0.8, 0.8, 0.3, 0.8], [0, 0, 1, 1])
    assert tau == pytest.approx(2 / math.sqrt(12))
    # One discordant pair: rewards [0.8, 0.8, 0.3, 0.9]: (0,2) c, (0,3) d, (1,2) c, (1,3) d.
    assert kendall_tau_b([0.8, 0.8, 0.3, 0.9], [0, 0, 1, 1]) == 0.0
    # Rewards all equal: no ranking given, tau 0.
    assert kendall_tau_b([0.5, 0.5, 0.5], [0, 1, 1]) == 0.0
    with pytest.raises(ValueError, match="ties every"):
        kendall_tau_b([0.1, 0.2], [0, 0])


def test_all_above_is_strict():
    ranks = [0, 0, 0, 1, 1, 1]
    assert all_above([0.9, 0.8, 0.7, 0.6, 0.2, 0.1], ranks) == 1.0
    assert all_above([0.9, 0.8, 0.6, 0.6, 0.2, 0.1], ranks) == 0.0  # a tie across the tiers
    assert all_above([0.9, 0.8, 0.5, 0.6, 0.2, 0.1], ranks) == 0.0


def test_chance_of_three_chosen_and_three_rejected():
    g = _group(["a", "b", "c", "d", "e", "f"], [0, 0, 0, 1, 1, 1])
    c = chance(g)
    assert c["best_of_n"] == 0.5
    assert c["all_above"] == pytest.approx(1 / 20)
    assert c["kendall_tau"] == 0.0


def test_rmbench_cells_credit_ties_half():
    g = _rmbench_group()
    values = [0.9, 0.5, 0.2, 0.5, 0.4, 0.95]  # chosen c, dm, dp; rejected c, dm, dp
    items = {(m["chosen_style"], m["rejected_style"]): v for m, v in rmbench_items(g, values)}
    assert items[("concise", "concise")] == 1.0
    assert items[("detailed_markdown", "concise")] == 0.5  # 0.5 vs 0.5
    assert items[("detailed_plain", "detailed_markdown")] == 0.0
    assert items[("concise", "detailed_plain")] == 0.0
    assert len(items) == 9


def test_group_bootstrap_is_seeded_and_paired():
    series = {"x": [1.0, 0.0, 1.0, 1.0], "y": [0.0, 0.0, 1.0, 1.0]}
    one = group_bootstrap(series, 200, seed=3)
    two = group_bootstrap(series, 200, seed=3)
    assert np.array_equal(one["x"], two["x"])
    other = group_bootstrap(series, 200, seed=4)
    assert not np.array_equal(one["x"], other["x"])
    # Paired: the same draws for both series; y <= x in every group, so in every resample.
    assert np.all(one["y"] <= one["x"])
    # The first resample by hand: the same generator, the same draw.
    draw = np.random.default_rng(3).integers(0, 4, size=(200, 4))[0]
    assert one["x"][0] == pytest.approx(np.mean([series["x"][i] for i in draw]))


# --- readers -----------------------------------------------------------------------------------


def _group(texts: Sequence[str], ranks: Sequence[int], gid: str = "g") -> Group:
    return Group(gid, "mine", (Message("user", "Which?"),), tuple(texts), tuple(ranks))


STYLES = ("concise", "detailed_markdown", "detailed_plain")


def _rmbench_rows(item: str = "chat-1") -> list[dict]:
    rows = []
    for i, cs in enumerate(STYLES):
        for j, rs in enumerate(STYLES):
            difficulty = "normal" if i == j else ("hard" if i < j else "easy")
            rows.append(
                {
                    "id": f"{item}-c{i}r{j}",
                    "benchmark": "rm-bench",
                    "subset": "chat",
                    "prompt": "Say hi",
                    "chosen": f"good {cs}",
                    "rejected": f"bad {rs}",
                    "item_id": item,
                    "chosen_style": cs,
                    "rejected_style": rs,
                    "difficulty": difficulty,
                }
            )
    return rows


def _rmbench_group() -> Group:
    from reflectrm_harness.evaluation.groups.data import rmbench_groups

    (g,) = rmbench_groups(iter((f"row {k}", r) for k, r in enumerate(_rmbench_rows())))
    return g


def test_rmbench_items_become_groups_of_three_chosen_and_three_rejected(tmp_path):
    g = _rmbench_group()
    assert g.completions == tuple(f"good {s}" for s in STYLES) + tuple(f"bad {s}" for s in STYLES)
    assert g.ranks == (0, 0, 0, 1, 1, 1)
    assert g.best == (0, 1, 2)
    assert g.cells[("concise", "detailed_plain")] == "hard"
    bad = _rmbench_rows()
    bad[3]["chosen"] = "another text"  # chosen detailed_markdown twice, different texts
    path = tmp_path / "rm.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in bad))
    with pytest.raises(ValueError, match="two chosen texts"):
        read_groups(path)


def test_group_schema_and_rmb_layout(tmp_path):
    rows = [
        {"id": "a", "prompt": "p", "completions": ["x", "y", "z"], "best": 2},
        {
            "id": "b",
            "messages": [{"role": "user", "content": "q"}],
            "completions": ["1", "2"],
            "ranks": [1, 0],
            "subset": "s",
        },
    ]
    path = tmp_path / "mine.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    a, b = read_groups(path)
    assert (a.ranks, a.best, b.ranks, b.meta["subset"]) == ((1, 1, 0), (2,), (1, 0), "s")
    path.write_text(json.dumps({"id": "c", "prompt": "p", "completions": ["x"], "best": 0}))
    with pytest.raises(ValueError, match="at least two"):
        read_groups(path)
    path.write_text(json.dumps({"id": "c", "prompt": "p", "completions": ["x", "y"]}))
    with pytest.raises(ValueError, match="either `best`"):
        read_groups(path)
    rmb = tmp_path / "bon.json"
    rmb.write_text(
        json.dumps(
            [
                {
                    "bon_uid": "u1",
                    "conversation_input": [{"role": "user", "content": "hi", "language": "en"}],
                    "bon_best": {"llm_name": "m1", "answer": "best"},
                    "loser_list": [{"llm_name": "m2", "answer": "l1"}, {"answer": "l2"}],
                    "category_path": "BoN_set/Helpfulness/Chat",
                }
            ]
        )
    )
    (g,) = read_groups(rmb)
    assert (g.completions, g.ranks, g.meta["goal"]) == (
        ("best", "l1", "l2"),
        (0, 1, 1),
        "Helpfulness",
    )


ROOT = Path(__file__).resolve().parents[3]
SCHEMA = ROOT / "docs" / "schemas" / "groups.schema.json"


def _documented_rows() -> list[dict]:
    """The example rows: docs/results.md's, --help's, and the schema's own."""
    results = (ROOT / "docs" / "results.md").read_text()
    section = results.split("## Group rewards per design", 1)[1]
    rows = [json.loads(m) for m in re.findall(r"```json\n(.*?)\n```", section, re.S)]
    assert rows, "docs/results.md shows no group row"
    rows.append(json.loads(group_cli.EXAMPLE_ROW))
    rows += json.loads(SCHEMA.read_text())["examples"]
    return rows


def test_the_documented_group_rows_follow_the_schema_and_are_read(tmp_path):
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads(SCHEMA.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    rows = _documented_rows()
    for k, row in enumerate(rows):
        jsonschema.validate(row, schema)
        path = tmp_path / f"row{k}.jsonl"
        path.write_text(json.dumps(row) + "\n")
        (group,) = read_groups(path)
        assert group.completions == tuple(row["completions"])
    # The --help row, by hand: completion 2 is best, the other two tie below it.
    (first,) = read_groups(tmp_path / f"row{len(rows) - 3}.jsonl")
    assert (first.id, first.ranks, first.best) == ("primes-1", (1, 1, 0), (2,))
    refused = {"prompt": "p", "completions": ["x", "y"], "best": True}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(refused, schema)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        (
            "best",
            True,
            r"`best` must be an index into `completions` \(an integer from 0 to 1\), not true",
        ),
        ("best", False, r"`best` must be an index into `completions` .*, not false"),
        ("ranks", [True, False], "`ranks` must be a list of integers"),
    ],
)
def test_booleans_are_not_indices_or_ranks(tmp_path, field, value, message):
    # true == 1 in Python: `best: true` was read as "completion 1 is best".
    path = tmp_path / "g.jsonl"
    path.write_text(json.dumps({"id": "a", "prompt": "p", "completions": ["x", "y"], field: value}))
    with pytest.raises(DatasetError, match=rf"{path.name}:1: {message}"):
        read_groups(path)


def test_a_broken_json_row_is_refused_with_its_line_and_column(tmp_path):
    good = json.dumps({"id": "a", "prompt": "p", "completions": ["x", "y"], "best": 0})
    broken = '{"id": "b", "prompt": "p" "completions": ["x", "y"], "best": 0}'
    jsonl = tmp_path / "g.jsonl"
    jsonl.write_text(f"{good}\n{broken}\n")
    # Line 2, column 27: the missing comma after "p".
    with pytest.raises(
        DatasetError, match=r"g\.jsonl:2: not JSON \(Expecting ',' delimiter at column 27\)"
    ):
        read_groups(jsonl)
    array = tmp_path / "g.json"
    array.write_text(f"[{good},\n{broken}]")
    # Before: json's own error, without the file ("Expecting ',' delimiter: line 2 column 27").
    with pytest.raises(
        DatasetError, match=r"g\.json:2: not JSON \(Expecting ',' delimiter at column 27\)"
    ):
        read_groups(array)
    array.write_text(f"[{good}, [1, 2]]")
    with pytest.raises(DatasetError, match=r"g\.json item 2: a row must be a JSON object"):
        read_groups(array)


def test_samples_nest():
    groups = [_group(["a", "b"], [0, 1], f"g{i}") for i in range(20)]
    small, large = sample_groups(groups, 5, 0), sample_groups(groups, 9, 0)
    assert set(g.id for g in small) <= set(g.id for g in large)
    assert sample_groups(groups, 5, 0) == small


def test_the_shared_rmbench_file_regroups_into_items():
    require_shared_data("benchmarks")
    _, groups = load_groups("rm-bench", SHARED_DATA)
    assert len(groups) == 798
    assert all(g.ranks == (0, 0, 0, 1, 1, 1) and len(g.cells) == 9 for g in groups)


# --- pooled against served, on a scripted engine ---------------------------------------------

QUALITY = re.compile(r"\[q=(\d+)\]")


class QualityEngine:
    """A judge that prefers the response with the higher ``[q=N]`` tag, except that with
    ``bias`` it names the first-shown one when the two are within ``bias`` of each other."""

    model_name = "quality"
    max_model_len = 100_000

    def __init__(self, bias: int = 0) -> None:
        self.bias = bias
        self.requests = 0

    def render_chat(self, messages):
        text = "\n".join(f"<{m['role']}>{m['content']}" for m in messages)
        return Prompt(text=text, token_ids=tuple(range(len(text.split()))))

    async def generate(self, prompt: Prompt, spec: SamplingSpec, request_id: str):
        self.requests += 1
        q = [int(x) for x in QUALITY.findall(prompt.text)]
        if "# Critiques for Judgment" in prompt.text or len(q) < 2:
            gens = (judgment(1, kind="Critique"),)
        else:
            first, second = q[-2], q[-1]
            verdict = 1 if abs(first - second) <= self.bias or first > second else 2
            gens = tuple(judgment(verdict, analysis=f"a{i}") for i in range(spec.n))
        await asyncio.sleep(0)
        return GenerationResult(generations=gens, prompt_tokens=prompt.num_tokens)

    async def check_health(self) -> None:
        return None


def _quality_group(gid: str, qualities: Sequence[int], best_first: bool = True) -> Group:
    texts = [f"answer [q={q}] {gid}" for q in qualities]
    order = sorted(range(len(qualities)), key=lambda i: -qualities[i])
    ranks = [0] * len(qualities)
    for rank, i in enumerate(order):
        ranks[i] = rank
    return Group(gid, "mine", (Message("user", f"question {gid}"),), tuple(texts), tuple(ranks))


def _run(units, engine, settings: GroupSettings):
    rows: list[dict] = []

    async def go():
        async with in_process_groups(Settings(early_exit=True), engine) as backend:
            return await run_group_units(units, backend, settings, rows.append, 4)

    counts = asyncio.run(go())
    return rows, counts


SETTINGS = GroupSettings(mode="vote", num_candidates=2, max_tokens=64, seed=5)


@pytest.mark.parametrize("bias", [0, 1])
def test_pooled_round_robin_is_the_served_round_robin(bias):
    groups = [_quality_group("g1", [3, 1, 4, 2, 5]), _quality_group("g2", [2, 9, 4, 4])]
    pool_rows, counts = _run(pool_plan(groups, SETTINGS.seed), QualityEngine(bias), SETTINGS)
    # g1: 10 pairs; g2: its two q=4 texts are one text, judged once: 3 pairs. Both orders.
    assert counts.recorded == 10 * 2 + 3 * 2
    served, _ = _run(
        design_plan(groups, STRATEGIES, ["none", "swap"]), QualityEngine(bias), SETTINGS
    )
    rows = {(r["group_id"], r["strategy"], r["debias"]): r for r in served}
    for g in groups:
        pool = {
            (r["a"], r["b"], r["first"]): PoolJudgment.of(r)
            for r in pool_rows
            if r["group_id"] == g.id
        }
        for debias in ("none", "swap"):
            out = pooled_rewards(g, "round_robin", debias, pool, SETTINGS.seed)
            body = rows[(g.id, "round_robin", debias)]["response"]
            assert [r.reward for r in out.rewards] == body["rewards"]
            assert out.work.judgments == body["judgments"]
            assert out.work.generated_tokens == body["usage"]["generated_tokens"]
            assert out.work.prompt_tokens == body["usage"]["prompt_tokens"]
        # A judge without position bias gives the same pair judgments whatever the seed: every
        # design pooled is then the design served.
        if bias == 0:
            for strategy in STRATEGIES:
                if strategy == "reference":
                    continue
                for debias in ("none", "swap"):
                    out = pooled_rewards(g, strategy, debias, pool, SETTINGS.seed)
                    body = rows[(g.id, strategy, debias)]["response"]
                    assert [r.reward for r in out.rewards] == body["rewards"], (strategy, debias)
                    assert out.work.judgments == body["judgments"]


def test_command_pooled_then_direct_resumes_and_reports(tmp_path, monkeypatch):
    rows = [
        {
            "id": f"g{k}",
            "prompt": f"question {k}",
            "completions": [f"x [q={q}] {k}" for q in qs],
            "best": qs.index(max(qs)),
        }
        for k, qs in enumerate([[1, 3, 2], [5, 4, 1, 2], [2, 1]])
    ]
    data = tmp_path / "mine.jsonl.gz"
    with gzip.open(data, "wt") as f:
        f.write("\n".join(json.dumps(r) for r in rows))
    engine = QualityEngine(bias=1)

    import contextlib

    @contextlib.asynccontextmanager
    async def fake_open(cfg):
        yield engine

    monkeypatch.setattr("reflectrm_harness.evaluation.common.open_engine", fake_open)
    monkeypatch.setattr("reflectrm_harness.evaluation.common.resolve", lambda cfg: cfg)
    out = tmp_path / "out"
    argv = ["--groups", "--dataset", str(data), "--mode", "vote", "--num-candidates", "2"]
    argv += ["--max-tokens", "64", "--out-dir", str(out), "--no-progress", "--bootstrap", "50"]
    argv += ["--model", str(tmp_path)]
    assert cli.main(argv) == 0
    _, recs = load_rows(out / "group-results.jsonl")
    assert len(recs) == (3 + 6 + 1) * 2
    first = engine.requests
    assert cli.main(argv) == 0  # resumes: nothing left to judge
    assert engine.requests == first
    assert cli.main([*argv, "--direct", "--design", "knockout", "--design", "round_robin"]) == 0
    _, recs = load_rows(out / "group-results.jsonl")
    assert sum(k[0] == "group" for k in recs) == 3 * 2 * 2
    report = json.loads((out / "group-report.json").read_text())
    assert report["groups"] == {"pooled": 3, "direct": 3}
    pooled = report["rows"]["round_robin, debias swap (pooled)"]
    direct = report["rows"]["round_robin, debias swap (direct)"]
    for metric in ("best_of_n", "kendall_tau", "all_above", "judgments", "generated_tokens"):
        assert pooled[metric]["value"] == direct[metric]["value"]
    assert "delta_vs_round_robin" in report["rows"]["knockout, debias none (pooled)"]["best_of_n"]
    assert (out / "group-report.md").read_text().count("`swiss`") == 2
    assert (out / "group-report.png").stat().st_size > 5_000
    # Re-scoring from the records alone reproduces the report.
    assert cli.main([*argv, "--score-only"]) == 0
    again = json.loads((out / "group-report.json").read_text())
    assert again["rows"] == report["rows"]


def test_report_rows_for_rmbench_groups():
    g = _rmbench_group()
    # A pool in which the chosen response always wins when shown first, loses otherwise.
    pool = {}
    for u in pool_plan([g], 0):
        pool[(u.a, u.b, u.first)] = PoolJudgment("verdict", 1, (1.0, 0.0), 10, 5, 1)
    rows = {
        ("pool", g.id, a, b, f): {
            "type": "pool",
            "group_id": g.id,
            "a": a,
            "b": b,
            "first": f,
            "status": "verdict",
            "winner": 1,
            "scores": [1.0, 0.0],
            "prompt_tokens": 10,
            "generated_tokens": 5,
            "engine_requests": 1,
        }
        for (a, b, f) in pool
    }
    built = group_report.build([g], [{"type": "run", "seed": 0}], rows, seed=0, resamples=20)
    swap = built["rows"]["round_robin, debias swap (pooled)"]
    # Pure first-position bias with swap: every comparison ties, every reward 0.5.
    assert swap["best_of_n"]["value"] == 0.5
    assert swap["kendall_tau"]["value"] == 0.0
    assert swap["all_above"]["value"] == 0.0
    assert swap["rmbench_accuracy"]["value"] == 50.0
    assert swap["judgments"]["value"] == 30
    assert built["pool"]["first_position_rate"] == 100.0
    assert built["pool"]["consistent_rate"] == 0.0
