"""Clients that wait between requests on kept-alive connections, as a client honouring
Retry-After does: how many requests get no answer, by the wait.

The app runs in-process with an engine that never answers, behind uvicorn with the keep-alive
`reflectrm serve` has (uvicorn's default, ``timeout_keep_alive``); one judgment holds the only
slot and the queue holds none, so every request is refused at once (429). Each of ``--clients``
clients sends ``--rounds`` requests on one pooled connection, waiting ``wait`` seconds after
each answer. No engine, no model: seconds of CPU.

    PYTHONPATH=service .venv/bin/python loadtests/keepalive.py --waits 4 5 5.05 6 --out runs/ka.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import threading
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import uvicorn

if __package__ in (None, ""):  # run as a script: make the repo importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loadtests.common.ports import free_port
from reflectrm.app import create_app
from reflectrm.engines.base import ChatMessage, GenerationResult, Prompt, SamplingSpec, plain_text
from reflectrm.settings import Settings

BODY = {"prompt": "x", "responses": ["a", "b"]}


class NeverAnswers:
    """An engine whose generations never finish."""

    model_name = "never"
    max_model_len = 100_000

    def render_chat(self, messages: Sequence[ChatMessage]) -> Prompt:
        text = " ".join(plain_text(m["content"]) for m in messages)
        return Prompt(text=text, token_ids=tuple(range(len(text.split()))))

    async def generate(
        self, prompt: Prompt, spec: SamplingSpec, request_id: str
    ) -> GenerationResult:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async def check_health(self) -> None:
        return None


async def clients(url: str, n: int, wait: float, rounds: int) -> Counter[str]:
    seen: Counter[str] = Counter()
    limits = httpx.Limits(max_connections=n + 4)
    async with httpx.AsyncClient(base_url=url, timeout=30, limits=limits) as client:

        async def one() -> None:
            for _ in range(rounds):
                try:
                    r = await client.post("/v1/judge", json=BODY)
                    seen[str(r.status_code)] += 1
                except httpx.HTTPError as exc:
                    seen[f"no answer: {type(exc).__name__}"] += 1
                await asyncio.sleep(wait)

        await asyncio.gather(*[one() for _ in range(n)])
    return seen


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--waits", type=float, nargs="+", default=[4.0, 5.0, 5.05, 6.0])
    parser.add_argument("--repeat", type=int, default=1, help="runs of the whole list of waits")
    parser.add_argument("--clients", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    settings = Settings(swap_check_fraction=0.0, max_concurrent_judgments=1, max_queued_judgments=0)
    app = create_app(settings, engine=NeverAnswers())
    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)
    server = uvicorn.Server(config)
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    url = f"http://127.0.0.1:{port}"
    holder = threading.Thread(
        target=lambda: httpx.post(f"{url}/v1/judge", json=BODY, timeout=None), daemon=True
    )
    holder.start()
    time.sleep(1.0)  # the holder has the slot

    runs: list[dict[str, Any]] = []
    totals: dict[float, Counter[str]] = {}
    for _ in range(args.repeat):
        for wait in args.waits:
            seen = asyncio.run(clients(url, args.clients, wait, args.rounds))
            runs.append({"wait_s": wait, "answers": dict(sorted(seen.items()))})
            totals.setdefault(wait, Counter()).update(seen)
            print(f"wait {wait} s: {dict(sorted(seen.items()))}", flush=True)
    server.should_exit = True
    report = {
        "timeout_keep_alive_s": config.timeout_keep_alive,
        "clients": args.clients,
        "requests_per_client": args.rounds,
        "runs": runs,
        "by_wait": {str(w): dict(sorted(c.items())) for w, c in sorted(totals.items())},
    }
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
