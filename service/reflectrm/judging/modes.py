"""The judging modes as one table: what each one asks of the engine and of a request.

Every part of the service that treats modes differently (the judge, the limits, the specs, the
HTTP schemas) reads a mode's row here instead of testing its name. A new mode is one row here
and its method in ``Judge``. Imports nothing but the mode names, so any layer may import it.
"""

from __future__ import annotations

from dataclasses import dataclass

from reflectrm.judging.types import MODES, Mode


@dataclass(frozen=True)
class ModeSpec:
    """One judging mode."""

    name: Mode
    # One output per judgment, whatever num_candidates asks (single, margin).
    one_candidate: bool
    # Greedy: no temperature, no seed (single; margin reads one token's log-probs).
    greedy: bool
    # The judging prompt runs up to the verdict digit and one token is read (margin): no
    # analysis, no output format, no max_tokens; the scores are always the verdict
    # probabilities. Needs a tokenizer that writes each verdict digit as one token
    # (``Judge.unavailable`` says why a model cannot).
    reads_digit: bool
    # Stage 2: each other candidate's analysis against the anchor's, then a vote (reflect).
    reflects: bool

    def candidates(self, asked: int) -> int:
        """Stage-1 outputs of one judgment when ``asked`` were asked for."""
        return 1 if self.one_candidate else asked


_TABLE = (
    ModeSpec("reflect", one_candidate=False, greedy=False, reads_digit=False, reflects=True),
    ModeSpec("single", one_candidate=True, greedy=True, reads_digit=False, reflects=False),
    ModeSpec("vote", one_candidate=False, greedy=False, reads_digit=False, reflects=False),
    ModeSpec("margin", one_candidate=True, greedy=True, reads_digit=True, reflects=False),
)
SPECS: dict[str, ModeSpec] = {m.name: m for m in _TABLE}
assert tuple(SPECS) == MODES, "every mode has one row, in the order of judging.types.MODES"


def mode_spec(mode: str) -> ModeSpec:
    """The row of ``mode`` (a name the schemas admitted)."""
    return SPECS[mode]
