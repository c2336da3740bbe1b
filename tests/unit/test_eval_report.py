"""The report from hand-made results, re-scoring, and the command end to end on a scripted engine."""

from __future__ import annotations

import contextlib
import json

import pytest
from reflectrm.evaluation import cli, records, report
from reflectrm.evaluation.benchmarks import JUDGEBENCH, RMB
from reflectrm.evaluation.records import Record

from tests.unit.test_eval_runner import scripted_engine

HELP = {"goal": "Helpfulness", "subset": "Helpfulness/Chat"}
HARM = {"goal": "Harmlessness", "subset": "Harmlessness/S1"}


def rec(benchmark, pair, mode, position, primary, winner, meta, tokens=100):
    return Record(
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
    assert cost["single"]["judgments"] == 12 and cost["single"]["latency_s"] == 2.0
    assert cost["single"]["no_verdict_rate"] == pytest.approx(100 / 12, abs=0.01)
    assert cost["single"]["first_position_rate"] == 100.0  # 11 verdicts, all "Response 1"
    assert cost["reflect"]["first_position_rate"] == 50.0
    assert cost["single"]["parse_failure_rate"] == pytest.approx(100 / 12, abs=0.01)
    assert cost["reflect"]["generated_tokens"] == pytest.approx((8 * 900 + 4 * 100) / 12, abs=0.01)
    assert built["pairs"] == {
        RMB: {"judged": 4, "both_orders": 4},
        JUDGEBENCH: {"judged": 2, "both_orders": 2},
    }


def test_markdown_has_the_papers_tables(tmp_path):
    path = tmp_path / "results.jsonl"
    write_results(path, hand_made())
    built = report.build(records.load(path), path, resamples=100, seed=0)
    md = report.markdown(built)
    assert "Accuracy (layout of the paper's Table 1)" in md
    assert "Positional consistency" in md and "Table 5" in md and "Cost per judgment" in md
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
    async def engine(settings):
        starts.append(settings.model)
        yield scripted_engine()

    monkeypatch.setattr("reflectrm.app.default_engine", engine)
    monkeypatch.setattr(
        cli,
        "_engine_fingerprint",
        lambda settings: {"backend": "in-process", "model": "scripted", "template_version": "v1"},
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
    assert loaded.runs[0]["model"] == "scripted" and loaded.runs[1]["judged"] == 12
    assert loaded.runs[0]["argv"] == base
    assert (out / "report.md").is_file() and (out / "report.png").is_file()
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
    ablation = ["--dataset", data, "--mode", "anchor_only", "--url", "http://x", "--out-dir"]
    assert cli.main([*ablation, str(tmp_path)]) == 2
    assert "need an own engine" in capsys.readouterr().err
    assert cli.main(["--dataset", data, "--limit", "x=3", "--out-dir", str(tmp_path)]) == 2
    assert cli.main(["--dataset", data, "--limit", "0", "--out-dir", str(tmp_path)]) == 2


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

    monkeypatch.setattr(cli, "judge_all", interrupted)
    assert cli.main(["--out-dir", str(tmp_path)]) == 130
    assert "rerun the same command to resume" in capsys.readouterr().err
