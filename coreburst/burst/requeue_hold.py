"""Slurm's requeue hold, and when coreburst lifts it so a requeued burst job starts again in
seconds on another pool or node.

**The hold.** When slurmctld requeues a batch job (a node set DOWN under it, ``scontrol
requeue``), ``batch_requeue_fini()`` (src/slurmctld/job_mgr.c) sets the job's begin time to now
+ the credential lifetime + 1 s (``AuthInfo=cred_expire``, 120 s by default: about two minutes
pending, ``Reason=BeginTime``). Up to 25.05 a launch credential, and a slurmd's record of the
credentials it revoked, are keyed by the job id: the hold keeps the job off a node whose slurmd
may still hold the old run (its steps, sockets, the revocation). A node that never ran the job,
or whose slurmd is gone with its instance, has none of that, so coreburst lifts the hold
(``scontrol update jobid=N StartTime=now``) only there:

- a failed launch (coreburst/burst/slurm_side.py): the nodes got no instance, so no slurmd ever
  saw the job; lifted once they are DOWN and powered down and their pool is held, or, after a
  capacity error, still has (type, zone) choices to try. Not after a quota, invalid or throttled
  request that holds nothing: there Slurm's hold is the back-off.
- a failed boot check (coreburst/burst/node_check.py): the node's slurmd never started.
- a spot interruption (coreburst/burst/spot_interruption.py): once the node is powered down (its
  instance and slurmd ended); the node's next instance is another host with a fresh slurmd.

**Slurm 25.11 and later** (26.05: Debian sid) have *expedited requeue*: a job submitted with
``sbatch --requeue=expedite`` (allowed by ``SlurmctldParameters=enable_expedited_requeue``, which
coreburst's slurm-conf include sets on 25.11+) that loses its node is listed ``EXPEDITING``, with
no begin time, first in the queue: nothing to lift. Its launch credential is keyed by the job's
SLUID, new at each requeue. A job submitted without the flag is held as before, and lifted.

**What is read.** One ``squeue --json --states=all`` (every job: 22.05's squeue ignores
``--jobs`` with ``--json``), the read coreburst/burst/admin_comment.py makes; never ``scontrol
show job`` text. Per job: ``job_state`` (22.05: one word; 23.02+: a list of the state and its
flags), ``state_reason``, ``restart_cnt``, ``eligible_time`` and ``cron`` (plain numbers on
22.05, ``{"set", "infinite", "number"}`` from 23.02; coreburst.common.slurmcmd.slurm_number).
What real slurmctlds of 22.05, 24.11 and 26.05 listed for requeued jobs is recorded in
tests/fixtures/slurm/squeue-requeued-*-recorded.json. A job is lifted only when listed
``PENDING`` with no ``COMPLETING`` flag (24.11+ list a job ``PENDING, COMPLETING`` until its
requeue is done, with the old begin time: a lift then would be undone), ``restart_cnt`` >= 1,
not a scrontab job (its begin time is its next cron start), and held: ``Reason=BeginTime``, or
an ``eligible_time`` still ahead (the reason changes only when the scheduler next looks).

    >>> out = ('{"jobs": [{"job_id": 7, "job_state": ["PENDING"], "state_reason": "BeginTime",'
    ...        ' "restart_cnt": 1, "eligible_time": {"set": true, "number": 1796453575}}]}')
    >>> status(parse_jobs(out)["7"], now=1796453510)
    'held'
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from coreburst.burst.admin_comment import READ, job_records
from coreburst.common.slurmcmd import slurm_number

HOLD_REASON = "BeginTime"
# Slurm 25.11+: a job whose expedited requeue is under way (no hold, first in the queue).
EXPEDITING = "EXPEDITING"
# The flag a job carries while its old run is still ending (the requeue not finished).
COMPLETING = "COMPLETING"
RUNS = frozenset({"RUNNING", "CONFIGURING", "SUSPENDED"})
# How often a caller re-reads the jobs while a requeue finishes (a read lists every job).
EVERY_S = 0.5


@dataclass(frozen=True)
class JobView:
    """One job as ``squeue --json`` lists it: what the hold depends on."""

    job: str
    states: frozenset[str]  # the state and its flags: {"PENDING"}, {"PENDING", "EXPEDITING"}
    reason: str
    restarts: int
    eligible: int | None  # epoch seconds; None: no begin time (0, unset)
    cron: bool = False


def _states(v: object) -> frozenset[str]:
    if isinstance(v, str):
        return frozenset({v})
    if isinstance(v, list):
        return frozenset(x for x in v if isinstance(x, str))
    return frozenset()


def parse_jobs(out: str) -> dict[str, JobView]:
    """Job id -> :class:`JobView` from ``squeue --json`` output; output that is not that JSON
    is one :class:`SlurmError` line (a RuntimeError)."""
    found: dict[str, JobView] = {}
    for j in job_records(out):
        jid = slurm_number(j.get("job_id")) if isinstance(j, dict) else None
        if not isinstance(j, dict) or jid is None:
            continue
        eligible = slurm_number(j.get("eligible_time"))
        reason = j.get("state_reason")
        found[str(jid)] = JobView(
            job=str(jid),
            states=_states(j.get("job_state")),
            reason=reason if isinstance(reason, str) else "",
            restarts=slurm_number(j.get("restart_cnt")) or 0,
            eligible=eligible or None,
            cron=bool(j.get("cron")),  # 23.02+: the crontab line; "" or absent otherwise
        )
    return found


def status(view: JobView | None, now: float, restarts_before: int | None = None) -> str:
    """What to do about one job Slurm may have requeued: ``held`` (lift it), ``requeueing``
    (its requeue is not finished: wait), ``expedited`` (25.11+ expedited requeue: no hold),
    ``eligible`` (no hold, or the hold is over), ``started again`` (running with a restart
    count past ``restarts_before``), ``cron``, ``gone`` (not listed) or ``not requeued``
    (ended, or pending for another reason). ``now``: epoch seconds."""
    if view is None:
        return "gone"
    st = view.states
    if EXPEDITING in st:
        return "expedited"
    if st & RUNS:
        # the old run (the count goes up at the requeue, while it is still ending), or a new one
        again = restarts_before is not None and view.restarts > restarts_before
        return "started again" if again and COMPLETING not in st else "requeueing"
    if COMPLETING in st:
        return "requeueing"
    if "PENDING" not in st or view.restarts < 1:
        return "not requeued"
    if restarts_before is not None and view.restarts <= restarts_before:
        return "not requeued"  # pending since before, not by this requeue
    if view.cron:
        return "cron"
    if view.reason == HOLD_REASON:
        return "held"
    return "held" if view.eligible is not None and view.eligible > now else "eligible"


@dataclass
class Settled:
    """What :func:`settle` found for each job."""

    held: dict[str, JobView] = field(default_factory=dict)
    other: dict[str, str] = field(default_factory=dict)  # job -> its status (not held)

    @property
    def waiting(self) -> list[str]:
        """Jobs whose requeue had not finished when the wait ended."""
        return [j for j, s in self.other.items() if s == "requeueing"]

    def by_status(self) -> dict[str, list[str]]:
        """status -> its jobs, for an audit record (``not_requeued``, ``expedited``, ...)."""
        out: dict[str, list[str]] = {}
        for job, st in self.other.items():
            out.setdefault(st.replace(" ", "_"), []).append(job)
        return out


def settle(
    squeue: Callable[..., str],
    jobs: Iterable[str],
    *,
    wait_s: float = 0.0,
    every_s: float = EVERY_S,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    now: Callable[[], float] = time.time,
    restarts_before: Mapping[str, int] | None = None,
) -> Settled:
    """Read every job (``squeue --json --states=all`` through ``squeue``) until none of
    ``jobs`` is still being requeued or ``wait_s`` has passed, and sort them by
    :func:`status`. A read that fails (a RuntimeError, e.g. Slurm not answering) ends the wait:
    the jobs left are ``requeueing`` (Slurm's hold stands; nothing is lifted blind).

        >>> settle(SlurmTools(timeout_s=10).squeue, ["7"], wait_s=5).held  # doctest: +SKIP
        {'7': JobView(job='7', states=frozenset({'PENDING'}), reason='BeginTime', ...)}
    """
    todo = list(dict.fromkeys(jobs))
    result = Settled()
    deadline = clock() + wait_s
    before = restarts_before or {}
    while todo:
        try:
            views = parse_jobs(squeue(*READ))
        except RuntimeError:  # Slurm did not answer: ends the wait, nothing lifted
            break
        left = []
        for job in todo:
            st = status(views.get(job), now(), before.get(job))
            if st == "held":
                result.held[job] = views[job]
            elif st == "requeueing":
                left.append(job)
            else:
                result.other[job] = st
        todo = left
        if not todo or clock() + every_s > deadline:
            break
        sleep(every_s)
    for job in todo:
        result.other[job] = "requeueing"
    return result


def lift(scontrol: Callable[..., str], job: str) -> None:
    """Make a held job eligible now (scontrol(1): ``StartTime`` of a pending job; ``now``)."""
    scontrol("update", f"jobid={job}", "StartTime=now")
