"""tests/helpers/prereq.py: a missing prerequisite skips a test on a developer's machine and
fails it on CI (``CI=true``), with the same reason either way."""

from __future__ import annotations

import pytest

from tests.helpers.prereq import require

WHY = "the Slurm lab needs root (run the tests as root)"


def test_on_ci_a_missing_prerequisite_fails_with_its_reason(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception) as failed:
        require(WHY)
    assert str(failed.value).startswith(WHY)
    assert "CI=true" in str(failed.value)


@pytest.mark.parametrize("ci", [None, "", "false", "0"])
def test_elsewhere_a_missing_prerequisite_skips_with_its_reason(
    monkeypatch: pytest.MonkeyPatch, ci: str | None
) -> None:
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    with pytest.raises(pytest.skip.Exception) as skipped:
        require(WHY)
    assert str(skipped.value) == WHY


@pytest.mark.parametrize("ci", [None, "true"])
@pytest.mark.parametrize("why", [None, ""])
def test_nothing_missing_goes_on(
    monkeypatch: pytest.MonkeyPatch, ci: str | None, why: str | None
) -> None:
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    assert require(why) is None
