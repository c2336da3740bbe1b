"""The summary of a GPU check (loadtests/gpu_check.py) from the files its steps leave in OUT:
steps.jsonl, environment.json, readme-response.json, eval/report.json and bench/summary.json.
``collect`` reads them, ``summarize`` builds the record (OUT/gpu-check.json) and ``markdown`` the
page (OUT/gpu-check.md); docs/gpu-check.md describes both. Standard library only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

EVAL_MODE = "single"
BENCH_SERVICE, BENCH_LIMIT = "service", "limit"


def _load(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def collect(out: Path) -> dict[str, Any]:
    steps_file = out / "steps.jsonl"
    lines = steps_file.read_text().splitlines() if steps_file.is_file() else []
    return summarize(
        steps=[json.loads(line) for line in lines if line.strip()],
        environment=_load(out / "environment.json"),
        readme=_load(out / "readme-response.json"),
        eval_report=_load(out / "eval" / "report.json"),
        bench=_load(out / "bench" / "summary.json"),
    )


def _eval_rows(report: Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
    """Per dataset: accuracy (% of verdicts for the better response), length-balanced accuracy,
    both orders right, Response 1's share, judgments, errors and mean latency."""
    if not report:
        return {}
    accuracy = report.get("accuracy", {}).get(EVAL_MODE, {}).get("benchmarks", {})
    length = report.get("length", {}).get(EVAL_MODE, {})
    cost = report.get("cost", {}).get(EVAL_MODE, {})
    rows = {}
    for name in report.get("datasets", []):
        acc = accuracy.get(name, {})
        bal = length.get(name, {})
        rows[name] = {
            "pairs": acc.get("n"),
            "accuracy": acc.get("value"),
            "accuracy_ci95": acc.get("ci95"),
            "length_balanced": bal.get("value"),
            "length_balanced_ci95": bal.get("ci95"),
            "both_orders_right": bal.get("both_right"),
            "response1_share": bal.get("slot1_share"),
        }
    return {
        "datasets": rows,
        "judgments": cost.get("judgments"),
        "errors": cost.get("errors"),
        "no_verdict_rate": cost.get("no_verdict_rate"),
        "mean_latency_s": cost.get("latency_s"),
    }


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _bench_rows(bench: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """Per concurrency: judgments/s, generated tokens/s and latency of the service and the raw
    engine (the limit), and the service's judgments/s over the engine's."""
    if not bench:
        return []
    points = bench.get("points", {})
    rows = []
    for level in bench.get("levels", []):
        row: dict[str, Any] = {"concurrency": level}
        for name in (BENCH_SERVICE, BENCH_LIMIT):
            p = points.get(name, {}).get(str(level))
            if p is None:
                continue
            row[name] = {
                "judgments": p["judgments"],
                "failed": p["failed"],
                "judgments_per_s": p["judgments_per_s"],
                "generated_tokens_per_s": p["generated_tokens_per_s"],
                "p50_ms": p["latency_ms"]["p50"],
                "p95_ms": p["latency_ms"]["p95"],
            }
        row["service_over_engine"] = _ratio(
            row.get(BENCH_SERVICE, {}).get("judgments_per_s"),
            row.get(BENCH_LIMIT, {}).get("judgments_per_s"),
        )
        rows.append(row)
    return rows


def _check(name: str, ok: bool, detail: str) -> dict[str, Any]:
    return {"check": name, "ok": bool(ok), "detail": detail}


def summarize(
    steps: Sequence[Mapping[str, Any]],
    environment: Mapping[str, Any] | None,
    readme: Mapping[str, Any] | None,
    eval_report: Mapping[str, Any] | None,
    bench: Mapping[str, Any] | None,
) -> dict[str, Any]:
    start = next((s for s in steps if s.get("step") == "start"), {})
    budget = start.get("budget_s")
    end = next((s for s in steps if s.get("step") == "end"), None)
    ran = [dict(s) for s in steps if s.get("step") not in ("start", "end")]
    by_name = {s["step"]: s for s in ran}
    # The run's wall time (set-up, steps, stopping the service) where it ended; else the steps'.
    total = float(end["wall_s"]) if end else sum(float(s.get("seconds") or 0) for s in ran)
    evaluation = _eval_rows(eval_report)
    bench_rows = _bench_rows(bench)

    checks = []
    env = environment or {}
    gpus = list(env.get("gpus") or [])
    checks.append(
        _check(
            "vLLM's GPU build, on a CUDA device",
            env.get("vllm") is not None and env.get("vllm_device") == "cuda" and bool(gpus),
            f"vllm {env.get('vllm')}, torch {env.get('torch')} (CUDA {env.get('torch_cuda')}), "
            f"vLLM's device {env.get('vllm_device')!r}, GPUs: {', '.join(gpus) or 'none'}",
        )
    )
    serve = by_name.get("serve", {})
    checks.append(
        _check(
            "the service ready",
            serve.get("status") == "ok",
            f"{serve.get('seconds')} s after start" if serve else "not started",
        )
    )
    answered = by_name.get("readme-request", {}).get("http_status") == 200
    verdict = (readme or {}).get("outcome")
    checks.append(
        _check(
            "the README's request answered",
            answered and (readme or {}).get("winner") in (1, 2),
            f"{verdict}, winner {(readme or {}).get('winner')}, "
            f"{(readme or {}).get('latency_ms')} ms"
            if readme
            else "no answer",
        )
    )
    datasets = evaluation.get("datasets", {})
    checks.append(
        _check(
            "trap and held-out sample judged through the service, no errors",
            {"trap", "heldout"} <= set(datasets) and evaluation.get("errors") == 0,
            f"{evaluation.get('judgments')} judgments, {evaluation.get('errors')} errors"
            if evaluation
            else "no evaluation report",
        )
    )
    levels = [r["concurrency"] for r in bench_rows]
    failed = sum(
        r.get(n, {}).get("failed", 0) for r in bench_rows for n in (BENCH_SERVICE, BENCH_LIMIT)
    )
    complete = all(BENCH_SERVICE in r and BENCH_LIMIT in r for r in bench_rows)
    checks.append(
        _check(
            "benchmark: service and raw engine at every level, every judgment answered",
            bool(bench_rows) and complete and failed == 0,
            f"levels {levels}, {failed} failed" if bench_rows else "no benchmark summary",
        )
    )
    checks.append(
        _check(
            "within the budget",
            budget is not None
            and total <= float(budget)
            and all(s.get("status") not in ("timed out", "skipped") for s in ran),
            f"{total:.0f} s of {budget} s",
        )
    )
    return {
        "passed": all(c["ok"] for c in checks),
        "checks": checks,
        "budget_s": budget,
        "total_s": round(total, 1),
        "steps": ran,
        "environment": environment,
        "readme": {
            key: (readme or {}).get(key)
            for key in ("outcome", "winner", "scores", "votes", "latency_ms", "model", "usage")
        }
        if readme
        else None,
        "eval": evaluation or None,
        "bench": bench_rows,
    }


def _num(value: Any, digits: int = 1) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _ci(pair: Any) -> str:
    if not pair or None in pair:
        return ""
    return f" [{_num(pair[0])}, {_num(pair[1])}]"


def markdown(summary: Mapping[str, Any]) -> str:
    lines = [
        "# GPU check: " + ("passed" if summary["passed"] else "FAILED"),
        "",
        "| check | ok | detail |",
        "|---|---|---|",
    ]
    for c in summary["checks"]:
        lines.append(f"| {c['check']} | {'yes' if c['ok'] else '**no**'} | {c['detail']} |")
    lines += ["", f"## Steps ({_num(summary['total_s'], 0)} s of {summary['budget_s']} s)", ""]
    lines += ["| step | status | seconds | command |", "|---|---|---:|---|"]
    for s in summary["steps"]:
        command = f"`{s['command']}`" if s.get("command") else ""
        status = s.get("status", "")
        if s.get("reason"):
            status += f" ({str(s['reason']).splitlines()[0][:120]})"
        lines.append(f"| {s['step']} | {status} | {_num(s.get('seconds'))} | {command} |")
    readme = summary.get("readme")
    if readme:
        lines += [
            "",
            "## The README's request",
            "",
            f"{readme['outcome']}, winner {readme['winner']}, scores {readme['scores']}, "
            f"in {_num(readme['latency_ms'], 0)} ms ({readme['model']}).",
        ]
    evaluation = summary.get("eval")
    if evaluation:
        lines += [
            "",
            "## Trap and held-out sample through the service (single, both orders)",
            "",
            "| dataset | pairs | accuracy, % of verdicts | length-balanced [95% CI] "
            "| right in both orders | Response 1 |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for name, row in evaluation["datasets"].items():
            lines.append(
                f"| {name} | {_num(row['pairs'])} | {_num(row['accuracy'])} "
                f"| {_num(row['length_balanced'])}{_ci(row['length_balanced_ci95'])} "
                f"| {_num(row['both_orders_right'])}% | {_num(row['response1_share'])}% |"
            )
        lines += [
            "",
            f"{evaluation['judgments']} judgments, {evaluation['errors']} errors, "
            f"mean latency {_num(evaluation['mean_latency_s'], 2)} s.",
        ]
    if summary.get("bench"):
        lines += [
            "",
            "## Benchmark: the service against the raw engine (reflect mode, interleaved)",
            "",
            "| concurrency | service judgments/s | engine judgments/s | service / engine "
            "| service p50 / p95 ms | engine p50 / p95 ms | service generated tokens/s |",
            "|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for row in summary["bench"]:
            s, e = row.get(BENCH_SERVICE, {}), row.get(BENCH_LIMIT, {})
            lines.append(
                f"| {row['concurrency']} | {_num(s.get('judgments_per_s'), 2)} "
                f"| {_num(e.get('judgments_per_s'), 2)} | {_num(row['service_over_engine'], 2)} "
                f"| {_num(s.get('p50_ms'), 0)} / {_num(s.get('p95_ms'), 0)} "
                f"| {_num(e.get('p50_ms'), 0)} / {_num(e.get('p95_ms'), 0)} "
                f"| {_num(s.get('generated_tokens_per_s'), 0)} |"
            )
    return "\n".join(lines)
