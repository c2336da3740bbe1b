"""The judging modes' table (judging/modes.py) is what the judge, the limits and the specs act
on: one row per serving mode, and each row's facts as the method defines them."""

from __future__ import annotations

from reflectrm.judging.modes import SPECS, mode_spec
from reflectrm.judging.types import MODES


def test_one_row_per_serving_mode():
    assert tuple(SPECS) == MODES


def test_the_rows_say_what_each_mode_is():
    rows = {m: (s.one_candidate, s.greedy, s.reads_digit, s.reflects) for m, s in SPECS.items()}
    assert rows == {
        "reflect": (False, False, False, True),
        "single": (True, True, False, False),
        "vote": (False, False, False, False),
        "margin": (True, True, True, False),
    }
    assert mode_spec("reflect").candidates(8) == 8
    assert mode_spec("margin").candidates(8) == 1
