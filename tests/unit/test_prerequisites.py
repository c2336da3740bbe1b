"""A missing prerequisite (the default model, ../shared/data, a tool) is a skip on a developer's
machine and a failure in CI (tests/conftest.py ``unavailable``, ``require``, ``needs``)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.conftest import in_ci, require, require_shared_data, unavailable


@pytest.mark.parametrize("value", ["true", "1", "yes"])
def test_ci_set_is_ci(monkeypatch: pytest.MonkeyPatch, value: str):
    monkeypatch.setenv("CI", value)
    assert in_ci()


@pytest.mark.parametrize("value", [None, "", "false", "0"])
def test_ci_unset_or_false_is_not_ci(monkeypatch: pytest.MonkeyPatch, value: str | None):
    if value is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", value)
    assert not in_ci()


def outcome(check: Callable[[], object]) -> tuple[str, str]:
    """What ``check`` did: "skip" or "fail" with its message, or "ran". Caught here, so that a
    skip where a failure was due fails this test instead of skipping it."""
    try:
        check()
    except pytest.skip.Exception as exc:
        return "skip", str(exc)
    except pytest.fail.Exception as exc:
        return "fail", str(exc)
    return "ran", ""


def test_missing_is_a_skip_outside_ci(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("CI", raising=False)
    assert outcome(lambda: unavailable("the thing is absent")) == ("skip", "the thing is absent")
    how, why = outcome(lambda: require_shared_data("no-such-folder-here"))
    assert (how, "no-such-folder-here" in why) == ("skip", True)
    assert outcome(lambda: require(True, "present")) == ("ran", "")


def test_missing_is_a_failure_in_ci(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("CI", "true")
    how, why = outcome(lambda: unavailable("the thing is absent"))
    assert (how, why.startswith("the thing is absent")) == ("fail", True)
    how, why = outcome(lambda: require_shared_data("no-such-folder-here"))
    assert (how, "no-such-folder-here" in why) == ("fail", True)
    assert outcome(lambda: require(True, "present")) == ("ran", "")


pytest_plugins = ["pytester"]


def test_a_needs_mark_fails_in_ci_before_any_fixture(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
):
    pytester.makeconftest("from tests.conftest import pytest_runtest_setup  # noqa: F401\n")
    pytester.makeini(
        "[pytest]\nasyncio_default_fixture_loop_scope = function\n"
        "markers =\n    needs: a prerequisite\n"
    )
    pytester.makepyfile(
        """
        import pytest
        from tests.conftest import needs

        STARTED = []

        @pytest.fixture
        def costly():
            STARTED.append(1)
            raise AssertionError("started, though the test could not run")

        @needs(False, "the prerequisite is absent")
        def test_marked(costly):
            pass
        """
    )
    monkeypatch.setenv("CI", "true")
    ci = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    ci.assert_outcomes(errors=1)
    ci.stdout.fnmatch_lines(["*the prerequisite is absent*CI is set*"])
    assert "started, though" not in ci.stdout.str()
    monkeypatch.delenv("CI")
    here = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    here.assert_outcomes(skipped=1)
