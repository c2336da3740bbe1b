"""The project's own evaluation data, shipped in the wheel: ``trap.jsonl``, the non-answer trap
(easy everyday questions, a helpful answer chosen over a refusal, a non-answer, an evasion, a
one-word or an off-topic reply), in the shared pairwise schema."""

from pathlib import Path

TRAP = Path(__file__).with_name("trap.jsonl")
