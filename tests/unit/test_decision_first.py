"""Template v3: the analysis begins with its decision and the enforced format ties that lead to
the verdict, so the first digit the judge writes is its verdict."""

from __future__ import annotations

import re

from reflectrm.judging.prompts import (
    CRITIQUE_VERDICTS,
    RESPONSE_VERDICTS,
    get_template,
    output_regex,
    shortest_output,
)

REGEX = output_regex(RESPONSE_VERDICTS, 60, decision_first=True)


def test_the_lead_names_the_verdict():
    ok = "<Analysis>Response 2 is better because it gives the time.</Analysis>\n<Result>Response 2 is better than Response 1</Result>"
    assert re.fullmatch(REGEX, ok)


def test_a_verdict_that_contradicts_the_lead_or_a_bare_lead_is_not_admitted():
    bare = "<Analysis>Response 2 is better than Response 1</Analysis>\n<Result>Response 2 is better than Response 1</Result>"
    assert not re.fullmatch(REGEX, bare)
    bad = "<Analysis>Response 2 is better because it gives the time.</Analysis>\n<Result>Response 1 is better than Response 2</Result>"
    assert not re.fullmatch(REGEX, bad)
    no_lead = "<Analysis>It gives the time.</Analysis>\n<Result>Response 2 is better than Response 1</Result>"
    assert not re.fullmatch(REGEX, no_lead)


def test_the_bound_counts_the_lead():
    lead = "Response 1 is better because"
    fits = f"<Analysis>{lead}{'x' * (60 - len(lead))}</Analysis>\n<Result>{RESPONSE_VERDICTS[0]}</Result>"
    over = f"<Analysis>{lead}{'x' * (61 - len(lead))}</Analysis>\n<Result>{RESPONSE_VERDICTS[0]}</Result>"
    assert re.fullmatch(REGEX, fits)
    assert not re.fullmatch(REGEX, over)


def test_the_shortest_output_is_the_decision_alone_and_admitted():
    for verdicts in (RESPONSE_VERDICTS, CRITIQUE_VERDICTS):
        regex = output_regex(verdicts, 60, decision_first=True)
        for v in verdicts:
            assert re.fullmatch(regex, shortest_output(v, decision_first=True))


def test_v3_shares_its_prefix_between_the_tasks_and_asks_for_the_decision_first():
    v1, v3 = get_template("v1"), get_template("v3")
    shared = v3.preference.split("# Task")[0]
    assert shared.startswith("# Context\n{context}")
    assert shared.endswith("[End of Response 2]\n\n")
    assert v3.reflection.startswith(shared)
    assert v3.decision_first
    assert not v1.decision_first
    assert 'begin it with "Response 1 is better"' in v3.preference
