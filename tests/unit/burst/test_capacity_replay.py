"""Issue 33 item 1: 24 hours of capacity answers (shortage, partial fills, lone
UnfulfillableCapacity pointers, Unsupported for one type in one zone, an outage, recovery)
through the real resume program on a fake clock. EC2 and Slurm are the replay's stand-ins
(coreburst/sandbox/capacity_replay.py: made up, in the shapes of EC2's CreateFleet page,
https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_CreateFleet.html, and error-code
page, https://docs.aws.amazon.com/AWSEC2/latest/APIReference/errors-overview.html)."""

from __future__ import annotations

from pathlib import Path

from coreburst.sandbox.capacity_replay import replay


def test_a_day_of_capacity_answers_holds_nothing_for_an_operator(tmp_path: Path) -> None:
    report = replay(tmp_path)
    assert report.operator_holds == 0
    # The answers did bite: pools were backed off and held for a while, by each kind of answer.
    assert report.timed_holds and report.backoffs["UnfulfillableCapacity"] > 0
    assert report.backoffs["InsufficientInstanceCapacity"] > 0
    assert report.alerts == []  # every answer is a known capacity answer
    # Every job ran, each within one backoff (plus one power-save poll) of capacity returning.
    assert all(j.start is not None for j in report.jobs)
    assert report.after_return and report.worst_after_return_s <= report.bound_s == 660
    text = "\n".join(report.lines())
    assert "operator holds (no end):        0" in text and "meets <=" in text
