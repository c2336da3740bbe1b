"""The ``reflectrm`` command: serve, judge, prepare-model; eval and train come from the harness."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from reflectrm.checkpoints.judges import DEFAULT_MODEL, SHIPPED
from reflectrm.interrupts import run_command
from reflectrm.judging.types import MODES
from reflectrm.settings import Settings, get_settings


def _configure_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper()),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


def cmd_serve(args: argparse.Namespace) -> int:
    from reflectrm.api.auth import KeyConfigError
    from reflectrm.server import serve

    overrides: dict[str, Any] = {}
    if args.host:
        overrides["host"] = args.host
    if args.port:
        overrides["port"] = args.port
    if args.model:
        overrides["model"] = args.model
    settings = get_settings(**overrides)
    if settings.engine == "vllm":
        from reflectrm.engines.vllm_engine import device_problem

        problem = device_problem(settings.engine_config())
        if problem:
            print(f"reflectrm serve: {problem}", file=sys.stderr)
            return 2
    try:
        return serve(settings, args.log_level)
    except KeyConfigError as exc:
        print(f"reflectrm serve: {exc}", file=sys.stderr)
        return 2


def cmd_prepare_model(args: argparse.Namespace) -> int:
    from reflectrm.checkpoints.resolve import BASE_MODEL, prepare_model
    from reflectrm.checkpoints.validate import CheckpointError, validate_checkpoint
    from reflectrm.engines.vllm_engine import served_dtype

    settings = get_settings(model=args.name)
    cache = Path(args.cache_dir) if args.cache_dir else settings.cache_dir
    dtype = args.dtype or served_dtype(settings.engine_config())

    def say(message: str) -> None:
        print(message, file=sys.stderr)

    try:
        if args.name in (DEFAULT_MODEL, BASE_MODEL):
            # float32 too: what tokenizers, training and the merge read
            prepare_model(args.name, cache, "float32", say)
        path = prepare_model(args.name, cache, dtype, say)
        if path is None:
            names = [DEFAULT_MODEL, BASE_MODEL, *(n for n in SHIPPED if n != DEFAULT_MODEL)]
            print(
                f"reflectrm prepare-model: {args.name!r} is not built here (a checkpoint folder "
                f"or a hub id is served as it is); names: {', '.join(names)}, or an artifact "
                "folder",
                file=sys.stderr,
            )
            return 2
        validate_checkpoint(path, settings.template_version)
    except CheckpointError as exc:
        print(f"reflectrm prepare-model: {exc}", file=sys.stderr)
        return 2
    print(path)
    return 0


def _judge_body(args: argparse.Namespace) -> dict[str, Any]:
    body: dict[str, Any] = {}
    if args.messages:
        body["messages"] = json.loads(Path(args.messages).read_text())
    else:
        body["prompt"] = args.prompt
    body["responses"] = [args.response1, args.response2]
    for key in ("mode", "debias", "seed", "max_tokens", "num_candidates"):
        if getattr(args, key) is not None:
            body[key] = getattr(args, key)
    body["check_swap"] = args.check_swap
    body["return_trace"] = args.trace
    return body


async def _judge_in_process(body: dict[str, Any], settings: Settings) -> tuple[int, Any]:
    import httpx

    from reflectrm.app import create_app
    from reflectrm.engines import open_engine

    async with open_engine(settings.engine_config()) as engine:
        # In process nothing listens on a port: no API keys (the service's may be in the env).
        local = settings.model_copy(update={"api_keys": None, "api_key_file": None})
        app = create_app(local, engine=engine)
        transport = httpx.ASGITransport(app=app)  # which does not run the app's lifespan:
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(transport=transport, base_url="http://cli") as client,
        ):
            r = await client.post("/v1/judge", json=body, timeout=None)
            return r.status_code, r.json()


def cmd_judge(args: argparse.Namespace) -> int:
    body = _judge_body(args)
    if args.url:
        import httpx

        r = httpx.post(args.url.rstrip("/") + "/v1/judge", json=body, timeout=None)
        status, payload = r.status_code, r.json()
    else:
        settings = get_settings(model=args.model or None)
        status, payload = asyncio.run(_judge_in_process(body, settings))
    print(json.dumps(payload, indent=2))
    return 0 if status == 200 else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="reflectrm",
        description="Pairwise judging with a generative reward model (ReflectRM). Settings come "
        "from REFLECTRM_* environment variables (every one in docs/settings.md).",
    )
    parser.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING (default INFO)")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("serve", help="serve POST /v1/judge on HOST:PORT")
    p.add_argument("--host", help="bind address (default REFLECTRM_HOST or 127.0.0.1)")
    p.add_argument("--port", type=int, help="port (default REFLECTRM_PORT or 8000)")
    p.add_argument(
        "--model",
        help=f"a shipped judge ({', '.join(SHIPPED)}; {DEFAULT_MODEL!r} is the default), 'base' "
        "(SmolLM2-135M-Instruct untrained), a checkpoint folder, or a hub id",
    )
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser(
        "prepare-model",
        help="build a model setting's checkpoint into the cache before serving it: the shipped "
        f"judge NAME ({', '.join(SHIPPED)}), the base model (base), or an artifact folder; each "
        "file once, every hash checked; print its path. Set-up runs it for the default",
    )
    p.add_argument(
        "name",
        nargs="?",
        default=DEFAULT_MODEL,
        metavar="NAME",
        help=f"{DEFAULT_MODEL} (the default judge; the default), base, "
        f"{', '.join(n for n in SHIPPED if n != DEFAULT_MODEL)}, or an artifact folder",
    )
    p.add_argument(
        "--dtype",
        help="the weights' dtype (default: the one the engine serves in, REFLECTRM_DTYPE)",
    )
    p.add_argument("--cache-dir", help="default REFLECTRM_CACHE_DIR or ~/.cache/reflectrm")
    p.set_defaults(func=cmd_prepare_model)

    p = sub.add_parser("judge", help="one judgment from the command line, JSON out")
    conv = p.add_mutually_exclusive_group(required=True)
    conv.add_argument("--prompt", help="the user query")
    conv.add_argument("--messages", help="a JSON file with the conversation [{role, content}]")
    p.add_argument("--response1", required=True)
    p.add_argument("--response2", required=True)
    p.add_argument(
        "--mode", choices=MODES, help="default: the served judge's (the default judge: margin)"
    )
    p.add_argument(
        "--debias", choices=("none", "swap"), help="default: the served judge's (default: swap)"
    )
    p.add_argument("--seed", type=int)
    p.add_argument("--max-tokens", type=int)
    p.add_argument("--num-candidates", type=int)
    p.add_argument("--check-swap", action="store_true", help="also judge the swapped order")
    p.add_argument("--trace", action="store_true", help="include every candidate and reflection")
    p.add_argument("--url", help="judge through a running service instead of an own engine")
    p.add_argument(
        "--model",
        help=f"a shipped judge ({', '.join(SHIPPED)}; {DEFAULT_MODEL!r} is the default), 'base' "
        "(SmolLM2-135M-Instruct untrained), a checkpoint folder, or a hub id",
    )
    p.set_defaults(func=cmd_judge)

    _add_jobs(sub)
    return parser


# The commands another distribution adds (the harness: eval, train), found by this entry-point
# group, so that the serving package never imports them.
COMMANDS_GROUP = "reflectrm.commands"
HARNESS_COMMANDS = {
    "eval": "benchmark accuracy and positional consistency (needs the harness)",
    "train": "train a judge (needs the harness)",
}
HARNESS_INSTALL = "pip install -e harness (from the repository; `make setup` installs it)"


def _add_jobs(sub: Any) -> None:
    """Each installed command of the group registers its own sub-command; eval and train, when
    the harness is not installed, say in one line what to install."""
    found = set()
    for entry in entry_points(group=COMMANDS_GROUP):
        entry.load()(sub)
        found.add(entry.name)
    for name, help_text in HARNESS_COMMANDS.items():
        if name not in found:
            p = sub.add_parser(name, help=help_text, add_help=False)
            p.set_defaults(func=_harness_missing(name), takes_any=True)


def _harness_missing(name: str) -> Any:
    def run(args: argparse.Namespace) -> int:
        print(
            f"reflectrm {name} needs the harness (reflectrm-harness): {HARNESS_INSTALL}",
            file=sys.stderr,
        )
        return 2

    return run


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown and not getattr(args, "takes_any", False):
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    _configure_logging(args.log_level)
    if args.func is cmd_serve:
        return cmd_serve(args)  # drains on SIGTERM itself (reflectrm.server)
    return run_command(lambda: int(args.func(args)))


if __name__ == "__main__":
    raise SystemExit(main())
