"""Slurm's requeue hold and when coreburst lifts it (coreburst/burst/requeue_hold.py), decided on
what real slurmctlds of 22.05, 24.11 and 26.05 listed (``squeue --json --states=all``) for jobs
they had just requeued: tests/fixtures/slurm/squeue-requeued-<release>-<step>-recorded.json
(README.md there; tests/helpers/record_requeued_jobs.py made them in the lab, whose
``cred_expire=70`` makes the hold 71 s). The resume program's side (SlurmSide.fail_nodes) runs
against a stand-in Slurm that answers with those recordings. The same runs against real
slurmctlds in tests/integration/burst/test_requeue_restart.py.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any, cast

import pytest

from coreburst.burst import requeue_hold
from coreburst.burst.claims import Claims
from coreburst.burst.config import BurstStack
from coreburst.burst.merge import parse_conf
from coreburst.burst.slurm_side import SlurmSide
from coreburst.burst.slurmconf import node_set_of, render_slurm_include
from coreburst.common.slurmcmd import SlurmError, slurm_number
from tests.helpers.slurm_fakes import RELEASES, requeued_job, requeued_squeue, squeue_json

AHEAD = 4102444800  # 2100-01-01: a recorded hold moved past any test's now


def _job(release: str, step: str, like: int) -> dict[str, Any]:
    (j,) = [j for j in requeued_squeue(release, step)["jobs"] if j["job_id"] == like]
    return j


def _status(release: str, step: str, like: int, at: str = "submit_time", after: int = 1) -> str:
    """The job's status at the recording's moment: ``after`` s past its ``at`` time (a
    requeue resets submit_time; a lift sets eligible_time to its moment)."""
    doc = json.dumps(requeued_squeue(release, step))
    moment = slurm_number(_job(release, step, like)[at])
    assert moment is not None
    return requeue_hold.status(requeue_hold.parse_jobs(doc).get(str(like)), moment + after)


@pytest.mark.parametrize("release", RELEASES)
def test_each_release_lists_the_hold_as_recorded(release: str) -> None:
    # scontrol requeue: 22.05 has requeued (held, Reason=BeginTime) when it returns; 24.11+
    # still list the job PENDING, COMPLETING with its old begin time: not finished
    first = _status(release, "requeued", 1)
    assert first == ("held" if release == "22.05" else "requeueing")
    assert _status(release, "later", 1) == "held"  # two seconds on: BeginTime
    assert _status(release, "lifted", 1, at="eligible_time") == "eligible"  # StartTime=now
    # its node set DOWN: reason None, the begin time 71 s ahead (held); on 26.05 the job was
    # submitted with --requeue=expedite: EXPEDITING, no begin time
    down = _status(release, "node-down", 2)
    assert down == ("expedited" if release == "26.05" else "held")
    if release != "26.05":
        assert _job(release, "node-down", 2)["state_reason"] == "None"
        # the hold ends by itself 71 s after the requeue (the lab's cred_expire=70, + 1 s)
        assert _status(release, "node-down", 2, after=72) == "eligible"


def test_a_job_not_requeued_by_this_failure_is_left_alone() -> None:
    running = requeued_job("24.11", "requeued", 2, 5)  # RUNNING, restart 0
    doc = requeue_hold.parse_jobs(squeue_json(running, release="24.11"))
    assert requeue_hold.status(doc["5"], 0) == "requeueing"  # the old run may still end
    again = requeued_job("24.11", "requeued", 2, 5, restart_cnt=2)
    doc = requeue_hold.parse_jobs(squeue_json(again, release="24.11"))
    assert requeue_hold.status(doc["5"], 0, restarts_before=1) == "started again"
    # pending with the count it had before: pending for another reason, not this requeue
    held = requeued_job("22.05", "node-down", 2, 6, eligible_time=AHEAD)
    doc = requeue_hold.parse_jobs(squeue_json(held))
    assert requeue_hold.status(doc["6"], 0, restarts_before=1) == "not requeued"
    assert requeue_hold.status(doc["6"], 0, restarts_before=0) == "held"
    assert requeue_hold.status(None, 0) == "gone"
    cron = requeued_job("24.11", "later", 1, 7, cron="*/5 * * * *")
    doc = requeue_hold.parse_jobs(squeue_json(cron, release="24.11"))
    assert requeue_hold.status(doc["7"], 0) == "cron"  # its begin time is its next start


def test_settle_waits_for_the_requeue_to_finish_then_finds_the_hold() -> None:
    """24.11 as recorded: PENDING, COMPLETING at first, then held."""
    answers = [json.dumps(requeued_squeue("24.11", s)) for s in ("requeued", "later")]
    sleeps: list[float] = []
    t = [0.0]

    def sleep(s: float) -> None:
        sleeps.append(s)
        t[0] += s

    moment = slurm_number(_job("24.11", "later", 1)["submit_time"])
    assert moment is not None
    found = requeue_hold.settle(
        lambda *a: answers.pop(0) if len(answers) > 1 else answers[0], ["1"], wait_s=5,
        sleep=sleep, clock=lambda: t[0], now=lambda: moment + 2,
    )  # fmt: skip
    assert list(found.held) == ["1"] and found.held["1"].reason == "BeginTime"
    assert sleeps == [requeue_hold.EVERY_S] and found.other == {}


def test_settle_lifts_nothing_blind_when_slurm_does_not_answer() -> None:
    def fails(*args: str) -> str:
        raise SlurmError("squeue --json --states=all timed out after 30s")

    def no_wait(s: float) -> None:
        pytest.fail(f"waited {s} s for a Slurm that does not answer")

    found = requeue_hold.settle(fails, ["1", "2"], wait_s=5, sleep=no_wait)
    assert found.held == {} and found.waiting == ["1", "2"]
    with pytest.raises(SlurmError, match="not JSON"):
        requeue_hold.parse_jobs("slurm_load_jobs error: Unable to contact slurm controller")


# -- the resume program's failed launch --------------------------------------------------------
class Slurm:
    """Records scontrol and squeue; ``squeue --json`` answers ``listed`` (a recording)."""

    def __init__(self, listed: str) -> None:
        self.listed = listed
        self.calls: list[tuple[str, ...]] = []

    def scontrol(self, *args: str) -> str:
        self.calls.append(("scontrol", *args))
        return ""

    def squeue(self, *args: str) -> str:
        self.calls.append(("squeue", *args))
        return self.listed

    def lifts(self) -> list[str]:
        return [c[2].removeprefix("jobid=") for c in self.calls if c[3:] == ("StartTime=now",)]


class NoClaims:
    def rows(self) -> list[tuple[str, str, str, str | None]]:
        return []

    def backed_off(self, pool: str) -> dict[tuple[str, str], tuple[str, float]]:
        return {}

    def clock(self) -> float:
        return 0.0


def _side(stack: BurstStack, slurm: Slurm, choices_left: bool = False) -> tuple[SlurmSide, list]:
    events: list[dict[str, Any]] = []
    side = SlurmSide(
        stack, slurm, lambda e, **f: events.append({"event": e, **f}),
        now=lambda: datetime(2026, 12, 5, tzinfo=UTC), nodes_of=node_set_of(stack),
        claims=lambda: cast(Claims, NoClaims()), release=lambda *a, **k: None,
        choices=lambda ns: ([("p5.48xlarge", "us-east-2b")] if choices_left else [], {}),
    )  # fmt: skip
    return side, events


def _held(release: str, job: str) -> str:
    """``job`` as ``release`` listed job 2 right after its node went DOWN (26.05: expedited),
    its hold moved ahead of now."""
    fields = {} if release == "26.05" else {"eligible_time": AHEAD}
    return squeue_json(requeued_job(release, "node-down", 2, job, **fields), release=release)


@pytest.mark.parametrize("release", RELEASES)
def test_a_capacity_failure_lifts_the_hold_of_its_job(stack: BurstStack, release: str) -> None:
    slurm = Slurm(_held(release, "41"))
    side, events = _side(stack, slurm)
    side.fail_nodes({"od-1": "InsufficientInstanceCapacity"}, [("41", ["od-1"])])
    (hold,) = [e for e in events if e["event"] == "resume.requeue_hold"]
    if release == "26.05":  # --requeue=expedite: Slurm set no hold
        assert slurm.lifts() == [] and hold["lifted"] == [] and hold["expedited"] == ["41"]
    else:
        assert slurm.lifts() == ["41"] and hold["lifted"] == ["41"]
    # after the node is DOWN and powered down and the pool held
    sc = [c[1:] for c in slurm.calls if c[0] == "scontrol"]
    down = sc.index(("update", "nodename=od-1", "state=power_down_force"))
    (held,) = [i for i, c in enumerate(sc) if c[:2] == ("create", "reservation")]
    assert down < held
    if release != "26.05":
        assert held < sc.index(("update", "jobid=41", "StartTime=now"))


def test_a_capacity_error_with_choices_left_lifts_without_a_pool_hold(stack: BurstStack) -> None:
    slurm = Slurm(_held("22.05", "41"))
    side, events = _side(stack, slurm, choices_left=True)
    side.fail_nodes({"od-1": "InsufficientInstanceCapacity"}, [("41", ["od-1"])])
    assert not [e for e in events if e["event"] == "resume.pool_held"]
    assert slurm.lifts() == ["41"]  # the next resume tries the pool's next (type, zone)


@pytest.mark.parametrize(
    "failed",
    [
        {"od-1": "RequestLimitExceeded"},
        {"od-1": "InsufficientInstanceCapacity", "sp-1": "RequestLimitExceeded"},
    ],
)
def test_where_nothing_is_held_slurms_hold_is_the_back_off(
    stack: BurstStack, failed: dict[str, str]
) -> None:
    """A throttled CreateFleet holds no pool (the same pool would be asked again at once): its
    job keeps Slurm's hold, also when another of its nodes' pools was held."""
    slurm = Slurm(_held("22.05", "41"))
    side, events = _side(stack, slurm)
    side.fail_nodes(failed, [("41", list(failed))])
    assert slurm.lifts() == []
    assert not [e for e in events if e["event"] == "resume.requeue_hold"]


@pytest.mark.parametrize(
    ("release", "wanted"),
    [((22, 5), False), ((24, 11), False), ((25, 11), True), ((26, 5), True), (None, False)],
)
def test_the_include_allows_expedited_requeue_from_25_11(
    stack: BurstStack, release: tuple[int, int] | None, wanted: bool
) -> None:
    text = render_slurm_include(stack, slurm_release=release)
    (params,) = [ln for ln in text.splitlines() if ln.startswith("SlurmctldParameters=")]
    assert ("enable_expedited_requeue" in params.split("=", 1)[1].split(",")) is wanted


def test_22_05_gets_a_prolog_slurmctld_unless_the_site_has_one(stack: BurstStack) -> None:
    text = render_slurm_include(stack, slurm_release=(22, 5))
    assert "\nPrologSlurmctld=/bin/true\n" in text
    assert "PrologSlurmctld=" not in render_slurm_include(stack, slurm_release=(23, 2))
    site = parse_conf("PrologSlurmctld=/etc/slurm/prolog.sh\n")
    text = render_slurm_include(stack, slurm_release=(22, 5), site=site)
    assert "\nPrologSlurmctld=" not in text
    assert "the site's own makes Slurm 22.05 rebuild" in text
