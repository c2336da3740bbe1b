"""Throughput and latency of judgments, side by side in one run: the engine's limit, the service,
and what a team would write without it.

    python -m loadtests.bench                       # limit, service, peer, naive at c = 1, 4, 16
    python -m loadtests.bench --smoke               # a few tiny judgments, to check it works
    python -m loadtests.bench rewards --pairs runs/heldout.jsonl  # loadtests/rewards_bench.py
    python -m loadtests.bench --contenders limit,service,service-prio \\
        --variant service-prio:REFLECTRM_SCHEDULING_POLICY=priority

Every contender (see ``contenders.py``) runs on an engine of its own, all opened with the same
AsyncEngineArgs, and all are up for the whole run. The run goes through the concurrency levels
in order; each level's judgments are split into rounds, and in each round every contender judges
the same request bodies (same pairs, orders, seeds and max_tokens; ``scenarios.request_body``)
with that many judgments in flight, one contender after another, in an order that alternates
between rounds (A B C D, then D C B A) and shifts between levels, so that a change in the
machine's load falls on all of them alike. Judgments never repeat a pair within a run, so no
contender reuses another level's prefix cache; the naive peer salts its prompts so that it does
not reuse the careful peer's on the server they share.

The output folder (default ``runs/bench/<time>/``) keeps ``records.jsonl`` (one line per
judgment), ``summary.json``, ``report.md``, ``chart.png`` and each server's log. The exit code is
0 when every judgment was answered, 1 when any failed, 2 when the run could not be made, 130
when interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil

if __package__ in (None, ""):  # run as a script: make the repo importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loadtests import bench_report
from loadtests.common.ports import free_port
from loadtests.common.process import RunError, launch, launch_service, stop_process, wait_ready
from loadtests.common.process import Service as Proc
from loadtests.contenders import (
    KINDS,
    LIMIT,
    NAIVE,
    PEER,
    SERVICE,
    Contender,
    EngineSettings,
    Limit,
    Peer,
    Service,
    careful_strategy,
    engine_config_line,
    naive_strategy,
    open_async_llm,
    vllm_serve_command,
)
from loadtests.scenarios import REPO, Pairs, load_pairs, request_body
from reflectrm_harness.portable import portable

# Settings every service in the run gets (the environment cannot change them): the judgments
# are the only engine work, and reflections run whenever the method asks for them.
SERVICE_FIXED = {
    "REFLECTRM_SWAP_CHECK_FRACTION": "0",  # no background swapped-order judgments
    "REFLECTRM_MAX_TOKENS_LIMIT": "4096",
}
PY_SPY_RATE = 50  # samples per second
SMOKE = {"concurrency": "1,2", "judgments": "2", "rounds": 1, "max_tokens": 32, "kv_cache_gib": 1.0}


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m loadtests.bench",
        description="Judgments/s and latency of the service beside the engine's limit and a "
        "vllm serve peer, in one interleaved run.",
    )
    p.add_argument(
        "--contenders",
        default="limit,service,peer,naive",
        help="comma-separated, in this order: limit, service, peer, naive, or a --variant name",
    )
    p.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME:KEY=VALUE[,KEY=VALUE]",
        help="a further service started with these REFLECTRM_* settings (repeatable)",
    )
    p.add_argument("--concurrency", default="1,4,16", help="judgments in flight, per level")
    p.add_argument(
        "--judgments",
        default="16,16,32",
        help="judgments per level and contender (one number for every level)",
    )
    p.add_argument("--rounds", type=int, default=2, help="rounds per level (order alternates)")
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--seed", type=int, default=0, help="seeds the pair order and each judgment")
    p.add_argument("--pairs", help="pairs JSONL(.gz) in the shared schema (default RewardBench)")
    p.add_argument("--max-pair-chars", type=int, default=1500)
    p.add_argument("--kv-cache-gib", type=float, default=2.0)
    p.add_argument("--max-model-len", type=int, default=4096)
    p.add_argument("--max-num-seqs", type=int, default=64)
    p.add_argument(
        "--early-exit",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the limit's and the services' early exit",
    )
    p.add_argument("--service-url", help="a running service to measure instead of starting one")
    p.add_argument("--judgment-timeout", type=float, default=900.0, help="seconds per judgment")
    p.add_argument("--ready-timeout", type=float, default=900.0)
    p.add_argument("--out", help="output folder (default runs/bench/<time>/)")
    p.add_argument(
        "--py-spy",
        action="store_true",
        help="profile each service the run starts with py-spy while it is measured "
        "(<name>.pyspy.txt, collapsed stacks, and <name>.pyspy-top.md)",
    )
    p.add_argument(
        "--smoke",
        action="store_true",
        help="c = 1, 2; 2 judgments each; max_tokens 32; 1 GiB KV caches",
    )
    args = p.parse_args(argv)
    if args.smoke:
        for key, value in SMOKE.items():
            setattr(args, key, value)
    try:
        args.levels = [int(x) for x in str(args.concurrency).split(",")]
        counts = [int(x) for x in str(args.judgments).split(",")]
    except ValueError:
        p.error("--concurrency and --judgments take comma-separated integers")
    if len(counts) == 1:
        counts *= len(args.levels)
    if len(counts) != len(args.levels) or min(args.levels + counts) < 1:
        p.error("--judgments needs one positive count, or one per --concurrency level")
    args.counts = counts
    if args.rounds < 1 or args.max_tokens < 16:
        p.error("--rounds must be at least 1 and --max-tokens at least 16")
    args.variants = {}
    for spec in args.variant:
        name, _, settings = spec.partition(":")
        pairs = [kv.split("=", 1) for kv in settings.split(",") if kv]
        if not name or name in KINDS or any(len(kv) != 2 for kv in pairs):
            p.error(f"--variant {spec!r}: NAME:KEY=VALUE[,KEY=VALUE], NAME not one of {KINDS}")
        args.variants[name] = dict(pairs)
    args.names = [n for n in args.contenders.split(",") if n]
    unknown = [n for n in args.names if n not in KINDS and n not in args.variants]
    if unknown or len(set(args.names)) != len(args.names) or not args.names:
        p.error(f"--contenders: unknown or repeated {unknown or args.names}")
    if args.service_url and sum(kind_of(n, args) == SERVICE for n in args.names) > 1:
        p.error("--service-url measures one service: name only one service contender")
    return args


def kind_of(name: str, args: argparse.Namespace) -> str:
    return SERVICE if name in args.variants else name


# --- the plan -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Block:
    concurrency: int
    round: int
    indices: tuple[int, ...]
    order: tuple[str, ...]


def plan(
    levels: Sequence[int], counts: Sequence[int], rounds: int, names: Sequence[str]
) -> list[Block]:
    """Blocks in run order. A level's judgments are split into at most ``rounds`` rounds of at
    least ``concurrency`` judgments each (fewer rounds where that is not possible); request
    indices never repeat. Contender order: shifted by one per level, reversed every other round."""
    blocks = []
    next_index = 0
    for li, (c, n) in enumerate(zip(levels, counts, strict=True)):
        k = max(1, min(rounds, n // c))
        sizes = [n // k + (1 if r < n % k else 0) for r in range(k)]
        shift = li % len(names)
        base = tuple(names[shift:]) + tuple(names[:shift])
        for r, size in enumerate(sizes):
            indices = tuple(range(next_index, next_index + size))
            next_index += size
            blocks.append(Block(c, r, indices, base if r % 2 == 0 else base[::-1]))
    return blocks


# --- running ------------------------------------------------------------------------------------


async def run_block(
    contender: Contender,
    bodies: Mapping[int, Mapping[str, Any]],
    concurrency: int,
    timeout_s: float,
    tag: str,
) -> tuple[list[dict[str, Any]], float]:
    """The bodies judged with ``concurrency`` in flight (closed loop); records and wall time."""
    queue = list(bodies)
    records: list[dict[str, Any]] = []
    t0 = time.monotonic()

    async def worker() -> None:
        while queue:
            index = queue.pop(0)
            started = time.monotonic()
            record: dict[str, Any] = {"index": index, "ok": False, "started_s": started - t0}
            try:
                async with asyncio.timeout(timeout_s):
                    v = await contender.judge(bodies[index], f"{tag}-{index}")
                record.update(
                    ok=True,
                    winner=v.winner,
                    scores=list(v.scores),
                    early_exit=v.early_exit,
                    stages={k: u.as_dict() for k, u in v.stages.items()},
                )
            except TimeoutError:
                record.update(error=f"no verdict within {timeout_s:g} s", stages={})
            except Exception as exc:  # a failed judgment is a result, not the end of the run
                record.update(error=f"{type(exc).__name__}: {exc}"[:300], stages={})
            record["latency_s"] = time.monotonic() - started
            records.append(record)

    await asyncio.gather(*(worker() for _ in range(min(concurrency, len(queue)))))
    return sorted(records, key=lambda r: r["index"]), time.monotonic() - t0


@dataclass
class Engines:
    """What the run started; everything here is stopped at the end."""

    contenders: dict[str, Contender] = field(default_factory=dict)
    processes: list[Any] = field(default_factory=list)  # harness Service records
    clients: list[httpx.AsyncClient] = field(default_factory=list)
    llm: Any = None
    settings: dict[str, Any] = field(default_factory=dict)


def _client(url: str, concurrency: int, timeout_s: float) -> httpx.AsyncClient:
    most = 8 * concurrency + 8  # a peer judgment has up to 8 requests in flight
    limits = httpx.Limits(max_connections=most, max_keepalive_connections=most)
    return httpx.AsyncClient(base_url=url, timeout=timeout_s, limits=limits)


def _start_services(
    args: argparse.Namespace, out: Path, settings: EngineSettings, engines: Engines
) -> list[Proc]:
    """``reflectrm serve`` for each service contender, with the run's engine settings."""
    started = []
    for name in args.names:
        if kind_of(name, args) != SERVICE or args.service_url:
            continue
        env = {
            **settings.service_env(),
            "REFLECTRM_EARLY_EXIT": str(args.early_exit).lower(),
            "REFLECTRM_MAX_CONCURRENT_JUDGMENTS": os.environ.get(
                "REFLECTRM_MAX_CONCURRENT_JUDGMENTS", str(max(64, *args.levels))
            ),
            **SERVICE_FIXED,
            **args.variants.get(name, {}),
        }
        svc = launch_service(out / f"{name}.log", env)
        engines.processes.append(svc)
        engines.settings[name] = env
        started.append(svc)
    return started


def _start_vllm_serve(kwargs: Mapping[str, Any], out: Path, engines: Engines) -> Proc:
    port = free_port()
    command = vllm_serve_command(kwargs, port)
    log = out / "vllm-serve.log"
    proc = launch(command, log)  # stopped in order by the run, not by the terminal's Ctrl-C
    server = Proc(proc=proc, url=f"http://127.0.0.1:{port}", log=log, settings={})
    engines.processes.append(server)
    engines.settings["vllm_serve_command"] = command
    return server


def _contender(
    name: str, args: argparse.Namespace, engines: Engines, settings: EngineSettings, tokenizer: Any
) -> Contender:
    kind = kind_of(name, args)
    by_url = {p.log.stem: p.url for p in engines.processes}
    if kind == LIMIT:
        return Limit(engines.llm, tokenizer, args.early_exit)
    url = (args.service_url or by_url[name]) if kind == SERVICE else by_url["vllm-serve"]
    client = _client(url, max(args.levels), args.judgment_timeout)
    engines.clients.append(client)
    if kind == SERVICE:
        return Service(name, client)
    strategy = careful_strategy() if kind == PEER else naive_strategy()
    salt = "naive" if kind == NAIVE else None  # no reuse of the careful peer's prefix cache
    return Peer(name, kind, client, settings.served_model_name, tokenizer, strategy, salt)


@contextlib.asynccontextmanager
async def started(
    args: argparse.Namespace, out: Path, settings: EngineSettings
) -> AsyncIterator[Engines]:
    """Every contender's engine, started together and ready; all stopped on the way out."""
    engines = Engines()
    kinds = {kind_of(n, args) for n in args.names}
    kwargs = settings.engine_kwargs()
    engines.settings["engine_kwargs"] = {k: str(v) for k, v in kwargs.items()}
    try:
        pending = [(s.log.stem, s, "/ready") for s in _start_services(args, out, settings, engines)]
        if PEER in kinds or NAIVE in kinds:
            pending.append(("vllm serve", _start_vllm_serve(kwargs, out, engines), "/health"))
        if LIMIT in kinds:
            print("starting the limit's AsyncLLM in this process ...", flush=True)
            engines.llm = await open_async_llm(kwargs)
        for label, proc, path in pending:
            waited = await asyncio.to_thread(wait_ready, proc.url, args.ready_timeout, proc, path)
            print(f"{label} ready at {proc.url} ({waited:.0f} s more)", flush=True)
        tokenizer = None
        if engines.llm is not None:
            tokenizer = engines.llm.get_tokenizer()
        elif PEER in kinds or NAIVE in kinds:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(settings.model)
        for name in args.names:
            engines.contenders[name] = _contender(name, args, engines, settings, tokenizer)
        yield engines
    finally:
        await _stop(engines)


async def _stop(engines: Engines) -> None:
    for client in engines.clients:
        await client.aclose()
    for proc in engines.processes:
        print(f"stopping {proc.log.stem} ...", flush=True)
        await asyncio.to_thread(stop_process, proc.proc)
    if engines.llm is not None:
        engines.llm.shutdown()
    for proc in engines.processes:
        line = engine_config_line(proc.log)
        if line:
            engines.settings.setdefault("engine_config_lines", {})[proc.log.stem] = line


def _cpu_s(proc: psutil.Process) -> float:
    try:
        t = proc.cpu_times()
        return float(t.user + t.system)
    except psutil.Error:  # gone meanwhile
        return 0.0


class CpuMeter:
    """CPU seconds (user + system) of each server: its own process ("api") and the processes
    under it ("engine"); the benchmark's own process is the limit's server and every other
    contender's client."""

    def __init__(self, servers: Mapping[str, int]) -> None:
        self.servers = dict(servers)

    def snapshot(self) -> dict[str, dict[str, float]]:
        me = psutil.Process()
        started = {pid for pid in self.servers.values() if pid != me.pid}
        out = {}
        for name, pid in self.servers.items():
            try:
                root = psutil.Process(pid)
                below = root.children(recursive=True)
            except psutil.Error:
                continue
            if pid == me.pid:  # the limit's engine: this process's children but the servers
                skip = set(started)
                for child in below:
                    if child.pid in started:
                        skip |= {c.pid for c in child.children(recursive=True)}
                below = [c for c in below if c.pid not in skip]
            out[name] = {"api": _cpu_s(root), "engine": sum(_cpu_s(c) for c in below)}
        out["client"] = {"api": _cpu_s(me), "engine": 0.0}
        return out

    def spent(
        self,
        name: str,
        before: Mapping[str, Mapping[str, float]],
        after: Mapping[str, Mapping[str, float]],
    ) -> dict[str, float] | None:
        """CPU seconds of ``name``'s server and of its client between two snapshots."""
        if name not in before or name not in after:
            return None
        own = self.servers[name] == os.getpid()
        client = 0.0 if own else after["client"]["api"] - before["client"]["api"]
        return {
            "server_api_s": after[name]["api"] - before[name]["api"],
            "server_engine_s": after[name]["engine"] - before[name]["engine"],
            "client_s": client,
        }


def bodies_for(
    indices: Sequence[int], pairs: Pairs, args: argparse.Namespace
) -> dict[int, dict[str, Any]]:
    return {i: request_body(i, pairs, ("reflect",), args.max_tokens, args.seed) for i in indices}


def _start_py_spy(
    args: argparse.Namespace, engines: Engines, out: Path
) -> list[tuple[subprocess.Popen[bytes], Path]]:
    spies = []
    for proc in engines.processes:
        name = proc.log.stem
        if name == "vllm-serve":
            continue
        raw = out / f"{name}.pyspy.txt"
        command = [
            str(Path(sys.executable).with_name("py-spy")),
            "record",
            "--pid",
            str(proc.proc.pid),
            "--format",
            "raw",
            "--nolineno",
            "--threads",
            "--rate",
            str(PY_SPY_RATE),
            "--nonblocking",
            "--output",
            str(raw),
        ]
        log = (out / f"{name}.pyspy.log").open("wb")
        spies.append((subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT), raw))
    return spies


def _stop_py_spy(spy: subprocess.Popen[bytes], raw: Path) -> None:
    """SIGINT makes py-spy write its samples; then a summary beside them."""
    spy.send_signal(signal.SIGINT)
    try:
        spy.wait(60)
    except subprocess.TimeoutExpired:
        spy.kill()
        spy.wait()
    if raw.is_file():
        top = bench_report.pyspy_top(raw.read_text(), PY_SPY_RATE)
        raw.with_suffix("").with_suffix(".pyspy-top.md").write_text(top)


def _server_pids(args: argparse.Namespace, engines: Engines) -> dict[str, int]:
    pids = {p.log.stem: p.proc.pid for p in engines.processes}
    out = {}
    for name in args.names:
        kind = kind_of(name, args)
        if kind == LIMIT:
            out[name] = os.getpid()
        elif kind == SERVICE and name in pids:
            out[name] = pids[name]
        elif kind in (PEER, NAIVE):
            out[name] = pids["vllm-serve"]
    return out


async def _measured_block(
    contender: Contender,
    bodies: Mapping[int, Mapping[str, Any]],
    block: Block,
    bi: int,
    args: argparse.Namespace,
    meter: CpuMeter,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """One contender's share of a block: its records, and the block's row (wall time, CPU)."""
    name = contender.name
    before = meter.snapshot()
    recs, wall = await run_block(
        contender, bodies, block.concurrency, args.judgment_timeout, f"{name}-b{bi}"
    )
    cpu = meter.spent(name, before, meter.snapshot())
    for r in recs:
        r.update(contender=name, kind=contender.kind, block=bi, concurrency=block.concurrency)
    load = os.getloadavg()[0]
    ok = sum(r["ok"] for r in recs)
    print(
        f"c={block.concurrency:<3} round {block.round} {name:<14} {ok}/{len(recs)} "
        f"in {wall:6.1f} s = {ok / wall:.3f} judgments/s (load {load:.1f})",
        flush=True,
    )
    row = {
        "contender": name,
        "concurrency": block.concurrency,
        "round": block.round,
        "block": bi,
        "judgments": len(recs),
        "wall_s": wall,
        "load_avg_1m": load,
        "cpu_s": cpu,
    }
    return recs, row


async def measure(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    from reflectrm.engines import EngineConfig, resolve

    pairs = load_pairs(args.pairs, args.max_pair_chars, args.seed)
    blocks = plan(args.levels, args.counts, args.rounds, args.names)
    total = sum(len(b.indices) for b in blocks)
    if total + 1 > len(pairs.rows):
        raise RunError(
            f"{total + 1} judgments need as many pairs; {pairs.source} has {len(pairs.rows)}"
        )
    model = await asyncio.to_thread(resolve, EngineConfig())
    settings = EngineSettings(
        model=model.model,
        served_model_name=Path(model.model).name,
        kv_cache_gib=args.kv_cache_gib,
        max_model_len=args.max_model_len,
        max_num_seqs=args.max_num_seqs,
    )
    records: list[dict[str, Any]] = []
    block_rows: list[dict[str, Any]] = []
    run_started = time.monotonic()
    async with started(args, out, settings) as engines:
        # One judgment each before measuring (the first request after start is slow), on a
        # pair no measured judgment uses.
        warm = bodies_for([total], pairs, args)
        for name, contender in engines.contenders.items():
            recs, wall = await run_block(contender, warm, 1, args.judgment_timeout, f"{name}-warm")
            status = "ok" if recs[0]["ok"] else recs[0].get("error")
            print(f"warm-up {name}: {wall:.1f} s, {status}", flush=True)
        meter = CpuMeter(_server_pids(args, engines))
        spies = _start_py_spy(args, engines, out) if args.py_spy else []
        with (out / "records.jsonl").open("w") as sink:
            for bi, block in enumerate(blocks):
                bodies = bodies_for(block.indices, pairs, args)
                for name in block.order:
                    recs, row = await _measured_block(
                        engines.contenders[name], bodies, block, bi, args, meter
                    )
                    for r in recs:
                        sink.write(json.dumps(r) + "\n")
                    sink.flush()
                    records += recs
                    block_rows.append(row)
        for spy, raw in spies:
            await asyncio.to_thread(_stop_py_spy, spy, raw)
        run_settings = engines.settings
    contenders = [{"name": n, "kind": kind_of(n, args)} for n in args.names]
    summary = bench_report.summarize(records, block_rows, contenders)
    return {
        "run": {
            "command": [sys.executable, "-m", "loadtests.bench", *(args.argv or [])],
            "contenders": contenders,
            "levels": args.levels,
            "judgments_per_level": args.counts,
            "rounds": args.rounds,
            "max_tokens": args.max_tokens,
            "seed": args.seed,
            "pairs": pairs.source,
            "early_exit": args.early_exit,
            "settings": run_settings,
            "wall_s": time.monotonic() - run_started,
            "cpus": os.cpu_count(),
        },
        "blocks": block_rows,
        **summary,
    }


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    given = list(sys.argv[1:] if argv is None else argv)
    if given[:1] == ["rewards"]:  # the reward scenario (loadtests/rewards_bench.py)
        from loadtests import rewards_bench

        return rewards_bench.main(given[1:])
    args = parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    out = Path(args.out) if args.out else REPO / "runs" / "bench" / time.strftime("%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        result = asyncio.run(measure(args, out))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except (RunError, FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    result = portable(result, REPO)  # paths relative to the repository, not this machine's
    (out / "summary.json").write_text(json.dumps(result, indent=2) + "\n")
    report = bench_report.markdown(result, result["run"]["contenders"])
    (out / "report.md").write_text(report + "\n")
    title = (
        f"max_tokens {args.max_tokens}, {result['run']['pairs'].split('/')[-1]}, "
        f"{os.cpu_count()} CPUs; judgments per level {args.counts}"
    )
    bench_report.chart(result, result["run"]["contenders"], out / "chart.png", title)
    print(report)
    print(f"output: {out}")
    failed = sum(p["failed"] for ps in result["points"].values() for p in ps.values())
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
