import math

from reflectrm.judging.confidence import bottom_fraction_confidence
from reflectrm.judging.parsing import parse_output


def test_confidence_keeps_lowest_tenth():
    # 10 tokens -> k = 1: the single lowest log-prob
    assert bottom_fraction_confidence([-0.1] * 9 + [-2.0]) == -2.0
    # 25 tokens -> k = floor(2.5) = 2: mean of -3.0 and -1.0
    assert bottom_fraction_confidence([-0.2] * 23 + [-3.0, -1.0]) == -2.0
    # 30 tokens -> k = 3 exactly (no float floor trap): mean of -1, -2, -3
    assert bottom_fraction_confidence([-1.0, -2.0, -3.0] + [-0.5] * 27) == -2.0


def test_confidence_short_outputs_use_one_token():
    assert bottom_fraction_confidence([-0.3, -0.9, -0.1]) == -0.9
    assert bottom_fraction_confidence([]) == -math.inf


def test_confidence_is_not_the_plain_mean():
    lp = [0.0] * 19 + [-4.0]  # 20 tokens -> k = 2: mean(-4, 0) = -2, plain mean would be -0.2
    assert bottom_fraction_confidence(lp) == -2.0


def test_parse_response_verdicts():
    p = parse_output(
        "<Analysis>A is right.</Analysis>\n<Result>Response 2 is better than Response 1</Result>",
        "Response",
        truncated=False,
    )
    assert (p.verdict, p.analysis, p.error) == (2, "A is right.", None)
    p = parse_output(
        "<Analysis>x</Analysis><Result> response 1 is better than response 2. </Result>",
        "Response",
        False,
    )
    assert p.verdict == 1


def test_parse_takes_last_well_formed_result():
    text = (
        "<Analysis>x</Analysis><Result>Response 1 is better than Response 2</Result>"
        "on reflection <Result>Response 2 is better than Response 1</Result><Result>garbage</Result>"
    )
    assert parse_output(text, "Response", False).verdict == 2


A = "<Analysis>a</Analysis>\n"


def test_parse_failures_have_reasons():
    assert parse_output("<Analysis>no verdict", "Response", False).error == "no_result"
    assert parse_output(A + "<Result>Both are fine</Result>", "Response", False).error == (
        "invalid_result"
    )
    same = A + "<Result>Response 1 is better than Response 1</Result>"
    assert parse_output(same, "Response", False).error == "invalid_result"
    # cut at max tokens: not finished, never counts even with a Result inside
    cut = A + "<Result>Response 1 is better than Response 2</Result> and"
    assert parse_output(cut, "Response", truncated=True).error == "truncated"


def test_result_inside_the_analysis_never_counts():
    # The model quotes a response carrying a verdict; generation stops at its </Result>.
    quoted = "<Analysis>Response 2 says <Result>Response 2 is better than Response 1</Result>"
    assert parse_output(quoted, "Response", False).error == "no_result"
    # no analysis at all: nothing marks where the model's own verdict starts
    bare = "<Result>Response 2 is better than Response 1</Result>"
    assert parse_output(bare, "Response", False).error == "no_result"


def test_parse_kind_must_match():
    # A critique verdict does not count as a response verdict, and the reverse.
    critique = A + "<Result>Critique 2 is better than Critique 1</Result>"
    response = A + "<Result>Response 2 is better than Response 1</Result>"
    assert parse_output(critique, "Response", False).verdict is None
    assert parse_output(critique, "Critique", False).verdict == 2
    assert parse_output(response, "Critique", False).verdict is None


def test_analysis_without_closing_tag_is_text_before_result():
    p = parse_output(
        "<Analysis>It is 2.\n<Result>Response 2 is better than Response 1</Result>",
        "Response",
        False,
    )
    assert p.analysis == "It is 2."
    assert p.verdict is None
