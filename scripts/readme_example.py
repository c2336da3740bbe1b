"""The README's sample judgment: its request, and the reply the default judge gives to it.

``shown(reply)`` is the part of a reply the README shows and calls stable: the fields
tests/e2e/test_readme_example.py compares (no request id, latency, token counts that depend on the
prefix cache, or analysis), scores to two decimals. Run as a script it judges the request with the
default judge in process (a real vLLM engine, the settings `make serve` uses) and writes that part
into the README between its markers. The test sends the request in both orders: the same response
wins, and the scores mirror each other within ``MIRROR_TOLERANCE``.

    .venv/bin/python -m scripts.readme_example
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

README = Path(__file__).resolve().parents[1] / "README.md"
# The README's request, with the endpoint's defaults (no mode, debias, seed or max_tokens).
REQUEST: dict[str, Any] = {
    "prompt": "What is the capital of France?",
    "responses": ["The capital of France is Paris.", "The capital of France is Berlin."],
}
SHOWN = ("winner", "scores", "scoring", "outcome", "mode", "debias", "consistent")
# Two orders of one pair are two verdict prefills in bf16, whose log-probs move by float noise
# with the batch and the prefix cache: the scores mirror each other to this much.
MIRROR_TOLERANCE = 0.01
BLOCK = re.compile(
    r"(<!-- readme-example: start -->\n```json\n)(.*?)(\n```\n<!-- readme-example: end -->)", re.S
)


def shown(reply: dict[str, Any]) -> dict[str, Any]:
    """The stable fields of a reply, scores to 2 decimals, in the README's order."""
    out = {k: reply[k] for k in SHOWN if k in reply}
    if isinstance(out.get("scores"), list):
        out["scores"] = [round(float(s), 2) for s in out["scores"]]
    return out


def render(reply: dict[str, Any]) -> str:
    return json.dumps(shown(reply), indent=2, ensure_ascii=False)


def swapped(request: dict[str, Any]) -> dict[str, Any]:
    """The same request with its two responses in the other order."""
    return {**request, "responses": list(reversed(request["responses"]))}


def readme_reply(text: str | None = None) -> dict[str, Any]:
    """The reply the README shows."""
    match = BLOCK.search(README.read_text() if text is None else text)
    if match is None:
        raise ValueError("README.md has no readme-example block")
    return dict(json.loads(match.group(2)))


def write(reply: dict[str, Any]) -> None:
    text = README.read_text()
    if BLOCK.search(text) is None:
        raise ValueError("README.md has no readme-example block")
    README.write_text(BLOCK.sub(lambda m: m.group(1) + render(reply) + m.group(3), text))


async def judge_in_process() -> dict[str, Any]:
    """The default judge's reply to REQUEST, as `reflectrm judge` gets it (its own engine)."""
    from reflectrm.cli import _judge_in_process
    from reflectrm.settings import get_settings

    status, reply = await _judge_in_process(REQUEST, get_settings())
    if status != 200:
        raise RuntimeError(f"the default judge answered {status}: {reply}")
    return dict(reply)


if __name__ == "__main__":
    answer = asyncio.run(judge_in_process())
    write(answer)
    print(render(answer))
