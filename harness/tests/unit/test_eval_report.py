"""The report from hand-made results, re-scoring, and the command end to end on a scripted engine."""

from __future__ import annotations

import contextlib
import json
import logging
import tempfile
from pathlib import Path

import pytest
from test_eval_runner import scripted_engine

from reflectrm_harness.evaluation import cli, common, records
from reflectrm_harness.evaluation.benchmarks import JUDGEBENCH, RMB
from reflectrm_harness.evaluation.pairwise import command, report
from reflectrm_harness.evaluation.records import Record

HELP = {"goal": "Helpfulness", "subset": "Helpfulness/Chat"}
HARM = {"goal": "Harmlessness", "subset": "Harmlessness/S1"}


def rec(benchmark, pair, mode, position, primary, winner, meta, tokens=100, scores=None):
    return Record(
        scores=scores,
        benchmark=benchmark,
        pair_id=pair,
        mode=mode,
        chosen_position=position,
        primary=primary,
        status="verdict" if winner else "no_verdict",
        winner=winner,
        seed=1,
        meta=meta,
        prompt_tokens=1000,
        generated_tokens=tokens,
        engine_requests=1 if mode == "single" else 8,
        latency_ms=2000.0,
        early_exit=None if mode == "single" else True,
        parse_failures=0 if winner else 1,
        outputs=1 if mode == "single" else 8,
    )


def hand_made() -> list[Record]:
    """single always answers "Response 1" (pure position bias); reflect is always right."""
    out = []
    rmb_pairs = [("p0", 1, HELP), ("p1", 2, HELP), ("p2", 1, HARM), ("p3", 2, HARM)]
    for pair, first, meta in rmb_pairs:
        for position, primary in ((first, True), (3 - first, False)):
            out.append(rec(RMB, pair, "single", position, primary, 1, meta))
            out.append(rec(RMB, pair, "reflect", position, primary, position, meta, tokens=900))
    jb = {"subset": "math", "split": "gpt"}
    out += [
        rec(JUDGEBENCH, "j0", "single", 1, True, 1, jb),  # right
        rec(JUDGEBENCH, "j0", "single", 2, False, None, jb),  # no verdict: +1 + 0 -> a hit
        rec(JUDGEBENCH, "j1", "single", 2, True, 1, jb),  # wrong
        rec(JUDGEBENCH, "j1", "single", 1, False, 1, jb),  # right: -1 + 1 -> a miss
    ]
    for pair in ("j0", "j1"):
        for position, primary in ((1, True), (2, False)):
            out.append(rec(JUDGEBENCH, pair, "reflect", position, primary, position, jb))
    return out


def write_results(path, rows) -> None:
    with records.Writer(path) as w:
        w.write({"type": "run", "model": "m", "max_tokens": 64, "num_candidates": 8, "seed": 0})
        for r in rows:
            w.write(r.to_json())


def test_report_numbers_from_hand_made_results(tmp_path):
    path = tmp_path / "results.jsonl"
    write_results(path, hand_made())
    built = report.build(records.load(path), path, resamples=200, seed=0)
    acc, cons, agree = built["accuracy"], built["consistency"], built["agreement"]
    assert acc["single"]["benchmarks"][RMB]["value"] == 50.0
    assert acc["single"]["benchmarks"][RMB]["details"] == {
        "Harmlessness": 50.0,
        "Helpfulness": 50.0,
    }
    assert acc["reflect"]["benchmarks"][RMB]["value"] == 100.0
    assert acc["single"]["benchmarks"][JUDGEBENCH]["value"] == 50.0  # the two-order rule
    # The paper's accuracy average leaves JudgeBench out; consistency averages every benchmark.
    assert acc["single"]["average"]["over"] == [RMB]
    assert acc["reflect"]["average"]["delta_vs_single"]["value"] == 50.0
    assert cons["single"]["benchmarks"][RMB]["value"] == 0.0
    assert cons["single"]["benchmarks"][JUDGEBENCH]["value"] == 0.0
    assert cons["reflect"]["average"]["value"] == 100.0
    assert cons["reflect"]["average"]["delta_vs_single"]["value"] == 100.0
    assert agree["single"]["benchmarks"][RMB]["value"] == 0.0
    # j1: slot 1 won both times, a different response each time; j0 has one no verdict.
    assert agree["single"]["benchmarks"][JUDGEBENCH]["value"] == 0.0
    # Resampling 4 pairs can draw only pairs the single judgment got right: a Δ of 0.
    low, high = acc["reflect"]["benchmarks"][RMB]["delta_vs_single"]["ci95_paired"]
    assert 0 <= low < 50 < high <= 100
    cost = built["cost"]
    assert cost["single"]["judgments"] == 12
    assert cost["single"]["latency_s"] == 2.0
    assert cost["single"]["no_verdict_rate"] == pytest.approx(100 / 12, abs=0.01)
    assert cost["single"]["first_position_rate"] == 100.0  # 11 verdicts, all "Response 1"
    assert cost["reflect"]["first_position_rate"] == 50.0
    assert cost["single"]["parse_failure_rate"] == pytest.approx(100 / 12, abs=0.01)
    assert cost["reflect"]["generated_tokens"] == pytest.approx((8 * 900 + 4 * 100) / 12, abs=0.01)
    assert built["pairs"] == {
        RMB: {"judged": 4, "both_orders": 4},
        JUDGEBENCH: {"judged": 2, "both_orders": 2},
    }


def generic_records() -> list[Record]:
    """A dataset of one's own ("mine"), single mode, with scores (hand-computed below)."""
    a, b = {"subset": "A", "group_id": "G1"}, {"subset": "B"}
    rows = [  # pair, chosen position of the primary order, winners and scores of both orders
        ("g1", 1, a, (1, (1.0, 0.0)), (1, (1.0, 0.0))),
        ("g2", 2, a, (2, (0.25, 0.75)), (1, (0.75, 0.25))),
        ("g3", 1, b, (1, (0.625, 0.375)), (1, (0.875, 0.125))),
        ("g4", 2, {"subset": "B", "group_id": "G2"}, (1, (0.75, 0.25)), (None, (0.5, 0.5))),
    ]
    out = []
    for pair, first, meta, (w1, s1), (w2, s2) in rows:
        out.append(rec("mine", pair, "single", first, True, w1, meta, 10, s1))
        out.append(rec("mine", pair, "single", 3 - first, False, w2, meta, 20, s2))
    return out


def test_a_generic_dataset_with_groups_and_swap_rows(tmp_path):
    path = tmp_path / "results.jsonl"
    write_results(path, generic_records())
    built = report.build(records.load(path), path, resamples=200, seed=0)
    assert built["benchmarks"] == []
    assert built["datasets"] == ["mine"]
    assert list(built["modes"]) == ["single", "single+swap"]
    plain = built["accuracy"]["single"]["benchmarks"]["mine"]
    # Seeded order: g1, g2, g3 right, g4 wrong. Subsets A (g1, g2) and B (g3, g4).
    assert (plain["value"], plain["n"], plain["details"]) == (75.0, 4, {"A": 100.0, "B": 50.0})
    # Groups: G1 = {g1, g2} both right, G2 = {g4} wrong; g3 has no group.
    assert plain["groups"]["value"] == 50.0
    assert plain["groups"]["n"] == 2
    assert built["consistency"]["single"]["benchmarks"]["mine"]["value"] == 25.0  # only g2
    assert built["consistency"]["single"]["benchmarks"]["mine"]["groups"]["value"] == 0.0
    assert built["agreement"]["single"]["benchmarks"]["mine"]["value"] == 25.0
    # Swap: g1 averages to (0.5, 0.5): a tie, no verdict. g2 (0.25, 0.75): chosen (2) wins.
    # g3 (0.375, 0.625): the rejected response (2) wins. g4 with a no-verdict order counted as
    # (0.5, 0.5): (0.625, 0.375), the rejected response (1) wins.
    swap = built["accuracy"]["single+swap"]["benchmarks"]["mine"]
    assert (swap["value"], swap["details"]) == (25.0, {"A": 50.0, "B": 0.0})
    assert swap["delta_vs_single"]["value"] == -50.0
    assert built["consistency"]["single+swap"]["benchmarks"]["mine"]["value"] == 25.0
    assert built["agreement"]["single+swap"]["benchmarks"]["mine"]["value"] == 75.0
    position = built["position"]
    assert position["single"]["mine"] == {
        "judgments": 8,
        "first_position_rate": round(100 * 6 / 7, 2),
        "no_verdict_rate": 12.5,
    }
    assert position["single+swap"]["mine"] == {
        "judgments": 8,
        "first_position_rate": 50.0,
        "no_verdict_rate": 25.0,
    }
    cost = built["cost"]["single+swap"]
    assert (cost["judgments"], cost["generated_tokens"], cost["engine_requests"]) == (4, 30, 2)
    md = report.markdown(built)
    assert "Table 1" not in md
    assert "**mine** (4 pairs, 4 in both orders;" in md
    assert "| Single judgment (greedy), swap-debiased | 25.0 [" in md
    assert "| A (2) | 100.0 |\n" in md
    assert "Swap: " in md
    assert "Groups: " in md


def test_markdown_has_the_papers_tables(tmp_path):
    path = tmp_path / "results.jsonl"
    write_results(path, hand_made())
    built = report.build(records.load(path), path, resamples=100, seed=0)
    md = report.markdown(built)
    assert "Accuracy (layout of the paper's Table 1)" in md
    assert "Positional consistency" in md
    assert "Table 5" in md
    assert "Cost per judgment" in md
    assert "| Single judgment (greedy) | 50.0 | 50.0 | – | 50.0 |" in md
    assert "| ReflectRM | 100.0 | 100.0 | +50.0 [+" in md


def test_only_pairs_with_both_orders_count_for_consistency(tmp_path):
    rows = [r for r in hand_made() if not (r.pair_id == "p0" and not r.primary)]
    path = tmp_path / "results.jsonl"
    write_results(path, rows)
    built = report.build(records.load(path), path, resamples=50, seed=0)
    assert built["consistency"]["reflect"]["benchmarks"][RMB]["n"] == 3
    assert built["accuracy"]["reflect"]["benchmarks"][RMB]["n"] == 4


def test_score_only_reproduces_the_report(tmp_path, capsys):
    write_results(tmp_path / cli.RESULTS_NAME, hand_made())
    args = ["--score-only", "--out-dir", str(tmp_path), "--bootstrap", "100"]
    assert cli.main(args) == 0
    first = (tmp_path / "report.json").read_text()
    assert (tmp_path / "report.png").stat().st_size > 10_000
    assert cli.main(args) == 0
    assert (tmp_path / "report.json").read_text() == first
    assert "Accuracy (layout" in capsys.readouterr().out


# --- the command, in-process, with a scripted engine ----------------------------------------


@pytest.fixture
def fake_engine(monkeypatch):
    starts = []

    @contextlib.asynccontextmanager
    async def engine(config):
        starts.append(config.model)
        yield scripted_engine()

    monkeypatch.setattr(common, "open_engine", engine)
    monkeypatch.setattr(common, "resolve", lambda config: config)
    monkeypatch.setattr(
        command,
        "engine_fingerprint",
        lambda settings, engine: {
            "backend": "in-process",
            "model": "scripted",
            "model_path": str(Path.home() / ".cache" / "reflectrm" / "models" / "scripted"),
            "template_version": "v1",
        },
    )
    return starts


def dataset(tmp_path, n=3):
    path = tmp_path / f"rmb-{n}.jsonl"
    rows = [
        {
            "id": f"r{i}",
            "benchmark": "rmb",
            "prompt": f"q{i}",
            "chosen": "c",
            "rejected": "r",
            **HELP,
        }
        for i in range(n)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_eval_command_runs_resumes_and_refuses_mixed_settings(tmp_path, fake_engine, capsys):
    out = tmp_path / "out"
    three, four = str(dataset(tmp_path, 3)), str(dataset(tmp_path, 4))
    base = ["--dataset", three, "--mode", "single", "--mode", "reflect"]
    base += ["--max-tokens", "64", "--out-dir", str(out), "--no-progress", "--bootstrap", "50"]
    assert cli.main(base) == 0
    loaded = records.load(out / cli.RESULTS_NAME)
    assert len(loaded.records) == 3 * 2 * 2
    assert [r["type"] for r in loaded.runs] == ["run", "run_end"]
    assert loaded.runs[0]["model"] == "scripted"
    assert loaded.runs[1]["judged"] == 12
    # The header names no path of this machine: the temporary folder is <tmp>, home is ~.
    here = [a.replace(tempfile.gettempdir(), "<tmp>", 1) for a in base]
    assert here != base
    assert loaded.runs[0]["argv"] == here
    assert loaded.runs[0]["datasets"]["rmb"]["source"] == here[1]
    assert loaded.runs[0]["model_path"] == "~/.cache/reflectrm/models/scripted"
    assert (out / "report.md").is_file()
    assert (out / "report.png").is_file()
    # A second run finds everything done: no engine is started, the report is rewritten.
    assert cli.main(base) == 0
    assert len(fake_engine) == 1
    assert "12 already in" in capsys.readouterr().err
    # More pairs resume on top of the same file.
    more = [four if a == three else a for a in base]
    assert cli.main(more) == 0
    assert len(records.load(out / cli.RESULTS_NAME).records) == 16
    # Other judging settings would mix incomparable judgments: refused.
    assert cli.main([*base, "--max-tokens", "48"]) == 2  # the last value wins
    assert "other judging settings" in capsys.readouterr().err


def test_eval_command_usage_errors(tmp_path, capsys):
    data = str(dataset(tmp_path))
    down = ["--dataset", data, "--mode", "anchor_only", "--url", "http://127.0.0.1:9", "--out-dir"]
    assert cli.main([*down, str(tmp_path)]) == 2
    assert "cannot reach http://127.0.0.1:9" in capsys.readouterr().err
    assert cli.main(["--dataset", data, "--limit", "x=3", "--out-dir", str(tmp_path)]) == 2
    assert "--limit names x, which is not among the datasets run (rmb)" in capsys.readouterr().err
    assert cli.main(["--dataset", data, "--limit", "0", "--out-dir", str(tmp_path)]) == 2


def test_a_file_lacking_a_metric_field_fails_before_judging(tmp_path, fake_engine, capsys):
    path = tmp_path / "pairs.jsonl"
    rows = [{"id": f"r{i}", "prompt": "q", "chosen": "c", "rejected": "r"} for i in range(3)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = ["--out-dir", str(tmp_path / "out"), "--no-progress", "--bootstrap", "20"]
    assert cli.main(["--dataset", f"rmb={path}", *out]) == 2
    assert f"{path}:1: missing fields `subset` and `goal`" in capsys.readouterr().err
    assert fake_engine == []
    assert not (tmp_path / "out" / cli.RESULTS_NAME).exists()
    # Labelled as a dataset of one's own, the same file is judged and scored generically.
    assert cli.main(["--dataset", f"mine={path}", "--mode", "single", *out]) == 0
    assert fake_engine == ["default"]
    report_md = (tmp_path / "out" / "report.md").read_text()
    assert "**mine** (3 pairs, 3 in both orders;" in report_md
    assert "swap-debiased" in report_md


def test_library_logs_are_quiet_unless_verbose():
    root, httpx_log = logging.getLogger(), logging.getLogger("httpx")
    saved = (
        root.level,
        logging.getLogger("reflectrm").level,
        logging.getLogger("reflectrm_harness").level,
    )
    try:
        root.setLevel(logging.INFO)
        common.quiet_libraries(verbose=True)
        assert httpx_log.isEnabledFor(logging.INFO)
        common.quiet_libraries(verbose=False)
        assert not httpx_log.isEnabledFor(logging.INFO)  # no line per request over --url
        assert httpx_log.isEnabledFor(logging.WARNING)
        assert logging.getLogger("reflectrm_harness.evaluation.cli").isEnabledFor(logging.INFO)
        assert logging.getLogger("reflectrm.judging.judge").isEnabledFor(logging.INFO)
    finally:
        root.setLevel(saved[0])
        logging.getLogger("reflectrm").setLevel(saved[1])
        logging.getLogger("reflectrm_harness").setLevel(saved[2])


def test_help_explains_every_option(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    text = capsys.readouterr().out
    parser = cli.configure(__import__("argparse").ArgumentParser())
    for action in parser._actions:
        for flag in action.option_strings:
            assert flag in text
        assert action.help, action.option_strings


def test_an_interrupted_run_says_how_to_resume(tmp_path, monkeypatch, capsys):
    def interrupted(args, path):
        raise KeyboardInterrupt

    monkeypatch.setattr(command, "judge_all", interrupted)
    assert cli.main(["--out-dir", str(tmp_path)]) == 130
    assert "rerun the same command to resume" in capsys.readouterr().err


def test_length_balanced_accuracy_beside_plain_accuracy(tmp_path):
    """p0 and p1 have the longer chosen response, p2 and p3 the shorter; single always says
    Response 1, reflect is always right, vote always picks the longer response."""
    rows = []
    lengths = {"p0": (10, 5), "p1": (12, 4), "p2": (5, 10), "p3": (3, 9)}
    for pair, meta in (("p0", HELP), ("p1", HELP), ("p2", HARM), ("p3", HARM)):
        longer = lengths[pair][0] > lengths[pair][1]
        for position, primary in ((1, True), (2, False)):
            longer_wins = position if longer else 3 - position
            for mode, winner in (("single", 1), ("reflect", position), ("vote", longer_wins)):
                r = rec(RMB, pair, mode, position, primary, winner, meta)
                rows.append(Record.from_json({**r.to_json(), "lengths": list(lengths[pair])}))
    path = tmp_path / "results.jsonl"
    write_results(path, rows)
    loaded = records.load(path)
    assert loaded.records[0].lengths == (10, 5)
    built = report.build(loaded, path, resamples=200, seed=0)
    single, reflect, vote = (built["length"][m][RMB] for m in ("single", "reflect", "vote"))
    assert single["pairs"] == 4
    assert single["accuracy"] == 50.0  # right in one order of each pair
    assert single["value"] == 50.0
    assert single["slot1_share"] == 100.0
    assert single["both_right"] == 0.0
    assert reflect["value"] == 100.0
    assert reflect["ci95"] == [100.0, 100.0]
    assert reflect["slot1_share"] == 50.0
    assert reflect["both_right"] == 100.0
    assert vote["better_longer"] == {"pairs": 2, "accuracy": 100.0}
    assert vote["better_shorter"] == {"pairs": 2, "accuracy": 0.0}
    assert vote["value"] == 50.0  # the length rule: exactly one half
    assert vote["ci95"] == [50.0, 50.0]
    assert vote["equal_length"] == 0
    # Per subset: each has one stratum only, so no length-balanced accuracy of its own.
    assert vote["subsets"]["Helpfulness/Chat"]["accuracy"] == 100.0
    assert vote["subsets"]["Helpfulness/Chat"]["value"] is None
    assert "length" in built["scoring"]
    text = report.markdown(built)
    assert "**Length-balanced accuracy**" in text
    assert "100.0 (2) | 0.0 (2) |" in text
    # single, vote, reflect: no length-balanced accuracy in a one-stratum subset, its accuracy
    assert "| Helpfulness/Chat (2) | – / 50.0 | – / 100.0 | – / 100.0 |" in text


def test_no_length_section_without_recorded_lengths(tmp_path):
    path = tmp_path / "results.jsonl"
    write_results(path, hand_made())
    built = report.build(records.load(path), path, resamples=50, seed=0)
    assert "length" not in built
    assert "length" not in built["scoring"]
