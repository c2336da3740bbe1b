"""The project's own evaluation data, shipped in the wheel, in the shared pairwise schema:

- ``trap.jsonl``, the non-answer trap: easy everyday questions, a helpful answer chosen over a
  refusal, a non-answer, an evasion, a one-word or an off-topic reply;
- ``correctness.jsonl``, the correctness set: 90 easy questions (facts, arithmetic, units, code,
  common sense, 18 each), a right answer chosen over a wrong one written in the same sentence
  frame, the two of the same length within two characters (the right one longer in half of the
  pairs whose lengths differ), so that neither length nor style can tell them apart.
"""

from pathlib import Path

TRAP = Path(__file__).with_name("trap.jsonl")
CORRECTNESS = Path(__file__).with_name("correctness.jsonl")
