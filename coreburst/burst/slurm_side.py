"""The Slurm side of the power programs: what they read of the jobs they act for, and what
they tell Slurm about the jobs and nodes.

* **Jobs**: one ``squeue --json --states=all`` a run gives each job's owner (the instances'
  coreburst-job/-user/-account tags), time limit (the spend gate's hours) and AdminComment;
  coreburst's notes on a job (why it waits, what it costs) replace only its own note of that
  kind (coreburst/burst/admin_comment.py, which says why the read is JSON).
* **Nodes**: a node that got no instance is set DOWN with the EC2 error code (its jobs requeue
  now) and powered down; a pool out of capacity, over a quota or with an invalid request is
  held in a MAINT reservation (``coreburst-backoff-...``, ``coreburst-protect-...``), and the
  jobs the failure requeued start again now rather than after Slurm's requeue hold
  (coreburst/burst/requeue_hold.py); a resume refused for a stale reconciler heartbeat, or a
  node back from ResumeTimeout, is said so.

Each call is ``scontrol`` (or that one ``squeue``) through the injected ``slurm``; a failure
is one line (``guardrails.adapters.slurm.SlurmError``, a RuntimeError).

    >>> side = SlurmSide(stack, Scontrol(), audit, now=now, nodes_of=node_set_of(stack),
    ...                  claims=lambda: claims, choices=launcher.choices,
    ...                  release=release)  # doctest: +SKIP
    >>> side.fail_nodes({"od-1": "InsufficientInstanceCapacity"})  # doctest: +SKIP
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

from coreburst.burst import admin_comment, requeue_hold
from coreburst.burst.claims import Claims
from coreburst.burst.config import BurstStack
from coreburst.burst.cost import slurm_hours
from coreburst.burst.ec2errors import classify
from coreburst.burst.hostlist import compress
from coreburst.burst.launch import TAG_VALUE_BAD
from coreburst.burst.slurmconf import NodeSet
from coreburst.common.catalog import CatalogError, load_catalog
from coreburst.common.names import (
    ACCOUNT_TAG_KEY,
    BACKOFF_PREFIX,
    JOB_TAG_KEY,
    PROTECT_PREFIX,
    USER_TAG_KEY,
)
from coreburst.common.pricing import instance_rate

if TYPE_CHECKING:
    from coreburst.burst.launch import ResumeResult

# The power programs' one logger (its name is the log file's, set up by coreburst/burst/cli.py).
log = logging.getLogger("coreburst.burst.power")

FAIL_REASON = "Failure when resuming nodes"
# The reason on nodes resume refused because the reconciler (guardrails burst-reconcile) has
# not written its heartbeat lately (coreburst:burst.reconcilerHeartbeat).
HEARTBEAT_REASON = "coreburst: reconciler heartbeat stale"

Choices = tuple[list[tuple[str, str]], dict[tuple[str, str], str]]
# How long a failed resume waits for slurmctld to finish requeueing its jobs before it lifts
# their requeue hold (22.05 has requeued them when ``state=down`` returns; 24.11+ list a job
# ``PENDING, COMPLETING`` for a moment).
REQUEUE_WAIT_S = 5.0


class Slurm(Protocol):
    def scontrol(self, *args: str) -> str: ...

    def squeue(self, *args: str) -> str: ...


class SlurmSide:
    """Slurm for one run of a power program. ``claims`` opens the run's claims on first use;
    ``choices`` gives a pool's (type, zone) launch choices not backed off (and those that
    are); ``release`` drops nodes' claims and spend commitments."""

    def __init__(
        self,
        stack: BurstStack,
        slurm: Slurm,
        audit: Callable[..., None],
        *,
        now: Callable[[], datetime],
        nodes_of: dict[str, NodeSet],
        claims: Callable[[], Claims],
        choices: Callable[[NodeSet], Choices],
        release: Callable[..., None],
    ) -> None:
        self.stack = stack
        self.slurm = slurm
        self.audit = audit
        self.now = now
        self.nodes_of = nodes_of
        self._claims = claims
        self.choices = choices
        self.release = release
        # The resume file's jobs (job -> nodes) and, read once a resume has launched
        # something, node -> the job, user and account it is launched for (OWNER_TAG_KEYS).
        self._jobs: list[tuple[str, list[str]]] = []
        self._owner_tags: dict[str, dict[str, str]] | None = None
        self._hours: dict[str, float] = {}  # job -> time limit in hours, read once per run
        # every job Slurm lists (admin_comment.read_jobs), read once per run (None: not yet;
        # {} and _jobs_read False: the read failed) and the AdminComment of each job read
        # (None: unreadable), kept current as this run writes notes
        self._all_jobs: dict[str, admin_comment.Job] | None = None
        self._jobs_read = False
        self._comments: dict[str, str | None] = {}
        # error code -> EC2's message with it (the launcher's, shared by coreburst/burst/power.py)
        self.messages: dict[str, str] = {}

    @property
    def claims(self) -> Claims:
        return self._claims()

    def start_resume(self, jobs: list[tuple[str, list[str]]]) -> None:
        """A resume's jobs: their owners and time limits are read afresh."""
        self._jobs, self._owner_tags, self._hours = jobs, None, {}

    # -- jobs -----------------------------------------------------------------------------
    def run_owner_tags(self) -> dict[str, dict[str, str]]:
        """:meth:`owner_tags` of every node of the resume's jobs, read once a resume."""
        if self._owner_tags is None:
            self._owner_tags = self.owner_tags([n for _, jn in self._jobs for n in jn], self._jobs)
        return self._owner_tags

    def owner_tags(
        self, names: list[str], jobs: list[tuple[str, list[str]]]
    ) -> dict[str, dict[str, str]]:
        """node -> {coreburst-job, coreburst-user, coreburst-account} for the first job of the
        resume file that wants it; user and account from the run's one read of every job
        (:meth:`all_jobs`: one call whatever their number). A job Slurm no longer shows keeps
        its id only; unreadable output leaves the tags out, never the launch."""
        wanted = set(names)
        first: dict[str, str] = {}
        for job, job_nodes in jobs:
            for n in job_nodes:
                if n in wanted:
                    first.setdefault(n, job)
        if not first:
            return {}
        who: dict[str, tuple[str, str]] = {}
        listed = self.all_jobs()
        read = self._jobs_read
        if not read:
            log.warning("job owners unknown: instances get their job id only")
        ids = set(first.values())
        for job in ids & listed.keys():
            j = listed[job]
            who[job] = (j.user, j.account)
            self._hours.setdefault(job, self._minutes_hours(j.minutes))
        if read:  # a job missing from the whole list is one Slurm no longer knows
            for job in ids:
                self._hours.setdefault(job, self._limit_hours(None))

        def clean(v: str) -> str:
            return TAG_VALUE_BAD.sub("_", v)[:256]

        tags: dict[str, dict[str, str]] = {}
        for n, job in first.items():
            user, account = who.get(job, ("", ""))
            t = {JOB_TAG_KEY: clean(job)}
            if user:
                t[USER_TAG_KEY] = clean(user)
            if account:
                t[ACCOUNT_TAG_KEY] = clean(account)
            tags[n] = t
        return tags

    def all_jobs(self) -> dict[str, admin_comment.Job]:
        """Every job Slurm lists (``squeue --json --states=all``, admin_comment.read_jobs),
        read once per run: the owners, time limits and AdminComments of the jobs this run
        acts for; {} when Slurm could not say."""
        if self._all_jobs is None:
            try:
                self._all_jobs = admin_comment.read_jobs(self.slurm.squeue)
                self._jobs_read = True
                for job, comment in admin_comment.comments(self._all_jobs).items():
                    self._comments.setdefault(job, comment)
            except RuntimeError as exc:  # guardrails.adapters.slurm.SlurmError: one line
                log.warning("cannot read the jobs (squeue --json): %s", exc)
                self._all_jobs = {}
        return self._all_jobs

    def note_jobs(self, jobs: Iterable[str], kind: str, text: str) -> None:
        """Say on each job why it waits (``scontrol show job`` shows ``AdminComment=``; only
        an administrator can set it, so a user cannot overwrite it): ``text`` replaces the
        job's previous coreburst note of ``kind`` and the rest is kept (a site's own text,
        coreburst's other notes; coreburst.burst.admin_comment). Each job's AdminComment
        comes from the run's one read of every job (:meth:`all_jobs`), made now if not yet.
        A job whose comment cannot be read is not noted (its text is never overwritten
        blind); one Slurm does not list is noted from empty (the update then fails if Slurm
        does not know it)."""
        wanted = list(dict.fromkeys(jobs))
        if not wanted:
            return
        if any(j not in self._comments for j in wanted):
            self.all_jobs()
        for job in wanted:
            value = admin_comment.merged_for(self._comments, self._jobs_read, job, kind, text)
            if value is None:
                log.warning("job %s: AdminComment unreadable or full; not noted: %s", job, text)
                continue
            try:
                self.slurm.scontrol("update", f"jobid={job}", f"AdminComment={value}")
            except RuntimeError as exc:  # guardrails.adapters.slurm.SlurmError: one line
                log.warning("cannot note job %s: %s", job, exc)
                continue
            self._comments[job] = value

    def job_hours(self, job_id: str) -> float:
        """The job's time limit in hours (``scontrol -o show job N``: ``TimeLimit=`` is one
        token, read safely from the text; the job's comments are not, so they come from
        :meth:`all_jobs` only); no limit, or a job Slurm no longer knows: the burst
        partition's MaxTime, the most it may run there."""
        if job_id in self._hours:
            return self._hours[job_id]
        try:
            out = self.slurm.scontrol("-o", "show", "job", job_id)
        except RuntimeError:  # guardrails.adapters.slurm.SlurmError: one line
            return self._limit_hours(None)
        m = re.search(r"\bTimeLimit=(\S+)", out)
        self._hours[job_id] = self._limit_hours(m.group(1) if m else None)
        return self._hours[job_id]

    def _limit_hours(self, time_limit: str | None) -> float:
        hours = slurm_hours(time_limit) if time_limit else None
        return hours if hours is not None else slurm_hours(self.stack.settings.max_time) or 24 * 7

    def _minutes_hours(self, minutes: int | None) -> float:
        return minutes / 60 if minutes is not None else self._limit_hours(None)

    def note_bursting(self, result: ResumeResult, jobs: list[tuple[str, list[str]]]) -> None:
        """Tell each job whose nodes were launched what it costs (``scontrol show job``:
        ``AdminComment=``): the $/h of the types launched, from the catalog, and that rate over
        its time limit (the spend gate reserves the dearest type a node may launch as, so
        this is at most what it reserved). A price the catalog lacks is said to be
        unknown, never $0."""
        cat = load_catalog()
        region = self.stack.config.region
        for job_id, job_nodes in jobs:
            mine = [n for n in job_nodes if n in result.launched]
            if not mine:
                continue
            hours = self.job_hours(job_id)
            rate, unknown = 0.0, []
            kinds: dict[str, int] = {}
            for n in mine:
                ns = self.nodes_of[n]
                itype = result.types.get(n, ns.instance_type)
                kinds[f"{itype} {ns.market}"] = kinds.get(f"{itype} {ns.market}", 0) + 1
                try:
                    rate += instance_rate(cat, itype, region, ns.market)[0]
                except CatalogError:
                    unknown.append(itype)
            what = ", ".join(f"{c} x {k}" for k, c in sorted(kinds.items()))
            money = (
                f"price unknown for {', '.join(sorted(set(unknown)))}"
                if unknown
                else f"${rate:,.2f}/h, projected ${rate * hours:,.2f} over its {hours:g} h limit"
            )
            self.note_jobs(
                [job_id], "burst", f"coreburst: bursting on {compress(mine)} ({what}): {money}"
            )

    # -- nodes ----------------------------------------------------------------------------
    def fail_nodes(
        self, failed: dict[str, str], jobs: list[tuple[str, list[str]]] | None = None
    ) -> None:
        """DOWN with the error code (the job requeues now), then POWER_DOWN_FORCE so the node
        is idle~ again (REFERENCE.md, Slurm power saving: about 1 s in 22.05). The jobs
        waiting for the nodes say why; the nodes' claims and commitments go."""
        by_code: dict[str, list[str]] = {}
        for node, code in failed.items():
            by_code.setdefault(code, []).append(node)
        for code, nodes in by_code.items():
            hl = compress(nodes)
            self.slurm.scontrol(
                "update", f"nodename={hl}", "state=down", f"reason=(Code:{code}){FAIL_REASON}"
            )
            self.slurm.scontrol("update", f"nodename={hl}", "state=power_down_force")
            cls = classify(code.removeprefix("CreateTags:"))
            # backoff_s: how long the daemon's burst-reconcile rule holds the pool after a
            # capacity error (coreburst:burst.capacityBackoffS, the one back-off)
            self.audit(
                "resume.failed",
                nodes=hl,
                code=code,
                error_class=cls,
                backoff_s=self.stack.settings.capacity_backoff_s,
            )
            mine = set(nodes)
            self.note_jobs(
                [j for j, jn in jobs or [] if mine.intersection(jn)],
                "requeue",
                f"coreburst: burst launch for {hl} failed ({code}: {cls}); requeued "
                f"{self.now():%Y-%m-%d %H:%M:%SZ}",
            )
        self.release(list(failed), keep_unsure=True)
        held = self.hold_pools(by_code)
        self.lift_requeue_holds(failed, jobs or [], held)

    def lift_requeue_holds(
        self, failed: dict[str, str], jobs: list[tuple[str, list[str]]], held: set[str]
    ) -> list[str]:
        """Start the jobs this failure requeued again now instead of after Slurm's requeue
        hold (coreburst/burst/requeue_hold.py): no slurmd ever saw them (slurmctld sends a
        batch job's launch only once every node of its allocation has registered, and these
        got no instance), and their nodes are DOWN and powered down. Only a job whose every
        failed node is in a pool held just now or, after a capacity error, a pool with (type,
        zone) choices left to try: after a quota, invalid or throttled request that holds
        nothing, Slurm's hold is the back-off. A job submitted with ``--requeue=expedite``
        (25.11+) comes back with no hold: nothing to lift. Returns the jobs lifted; the audit
        log gets ``resume.requeue_hold``."""
        sets = {ns.cluster: ns for ns in self.nodes_of.values()}
        choices_left: dict[str, bool] = {}

        def retry_soon(node: str, code: str) -> bool:
            pool = self.nodes_of[node].cluster
            if pool in held:
                return True
            if classify(code.removeprefix("CreateTags:")) != "capacity":
                return False
            if pool not in choices_left:
                choices_left[pool] = bool(self.choices(sets[pool])[0])
            return choices_left[pool]

        wanted = []
        for job, job_nodes in jobs:
            mine = [n for n in job_nodes if n in failed and n in self.nodes_of]
            if mine and all(retry_soon(n, failed[n]) for n in mine):
                wanted.append(job)
        if not wanted:
            return []
        found = requeue_hold.settle(self.slurm.squeue, wanted, wait_s=REQUEUE_WAIT_S)
        lifted = []
        for job in found.held:
            try:
                requeue_hold.lift(self.slurm.scontrol, job)
            except RuntimeError as exc:  # guardrails.adapters.slurm.SlurmError: one line
                log.warning("job %s: cannot lift its requeue hold: %s", job, exc)
                continue
            lifted.append(job)
        if lifted:
            log.info("requeue hold lifted for %s: eligible again now", ", ".join(lifted))
        self.audit("resume.requeue_hold", lifted=lifted, **found.by_status())
        return lifted

    def hold_pools(self, by_code: dict[str, list[str]]) -> set[str]:
        """Hold a pool whose launch failed so Slurm stops choosing its nodes and the jobs
        start elsewhere now (coreburst/burst/ec2errors.py): out of every (type, zone)
        choice after capacity errors (or a code nobody knows yet), a MAINT reservation
        ``coreburst-backoff-<pool>-<ms>`` that ends by itself when the choices' backoff does
        (``capacityBackoffS``; longer for a repeated unknown code); a quota or an invalid request,
        ``coreburst-protect-<pool>`` until an operator lifts it (``coreburst burst
        release-hold``). The guardrails' burst-reconcile rule tells Slack about each. Nodes
        that have an instance are left out (their jobs keep running). Returns the pools
        held."""
        wanted: dict[str, tuple[str, str]] = {}  # pool -> (reservation, why)
        timed: dict[str, int] = {}  # pool -> minutes its backoff has left
        sets = {ns.cluster: ns for ns in self.nodes_of.values()}
        for code, nodes in by_code.items():
            cls = classify(code.removeprefix("CreateTags:"))
            for pool in {self.nodes_of[n].cluster for n in nodes}:
                # capacity, or a code nobody knows yet: timed, as long as the choices' backoff
                if cls in ("capacity", "unknown") and pool not in wanted:
                    if not self.choices(sets[pool])[0]:
                        ms = int(self.now().timestamp() * 1000)
                        wanted[pool] = (f"{BACKOFF_PREFIX}{pool}-{ms}", code)
                        off = self.claims.backed_off(pool).values()
                        left = max((u for _, u in off), default=0.0) - self.claims.clock()
                        timed[pool] = max(1, math.ceil(left / 60))
                elif cls in ("quota", "invalid"):
                    wanted[pool] = (f"{PROTECT_PREFIX}{pool}", code)
        if not wanted:
            return set()
        held: set[str] = set()
        launched = {row[0] for row in self.claims.rows() if row[2] == "launched"}
        for pool, (resv, code) in sorted(wanted.items()):
            targets = [
                n for n, ns in self.nodes_of.items() if ns.cluster == pool and n not in launched
            ]
            if not targets:
                continue
            minutes = timed.get(pool)
            try:
                self.slurm.scontrol(
                    "create", "reservation", f"ReservationName={resv}",
                    f"Nodes={compress(targets)}", "Users=root", "Flags=MAINT,IGNORE_JOBS",
                    "StartTime=now", f"Duration={minutes or 'UNLIMITED'}",
                )  # fmt: skip
            except RuntimeError as exc:  # held already, or Slurm refused: the reconciler retries
                log.warning("cannot hold pool %s (%s): %s", pool, resv, exc)
                continue
            held.add(pool)
            log.warning("pool %s held: %s (%s)", pool, resv, code)
            self.audit(
                "resume.pool_held",
                pool=pool,
                reservation=resv,
                code=code,
                error_class=classify(code.removeprefix("CreateTags:")),
                minutes=minutes,
                nodes=compress(targets),
                # EC2's own words for a hold only an operator lifts; an unknown code's
                # timed holds alert only the first time (resume.alert) in a row.
                message=self.messages.get(code.removeprefix("CreateTags:"), ""),
                alert=classify(code.removeprefix("CreateTags:")) != "unknown",
            )
        return held

    def refuse(
        self, names: list[str], why: str, jobs: list[tuple[str, list[str]]] | None = None
    ) -> None:
        """DOWN with HEARTBEAT_REASON (the jobs requeue now), then a forced power-down."""
        hl = compress(names)
        self.slurm.scontrol("update", f"nodename={hl}", "state=down", f"reason={HEARTBEAT_REASON}")
        self.slurm.scontrol("update", f"nodename={hl}", "state=power_down_force")
        log.error("resume refused for %s: %s", hl, why)
        self.audit("resume.refused", nodes=hl, reason=why)
        mine = set(names)
        self.note_jobs(
            [j for j, jn in jobs or [] if mine.intersection(jn)],
            "burst",
            f"coreburst: burst paused ({why}); requeued, waits for the core or a retry",
        )
        self.release(names)

    def return_to_pool(self, names: list[str]) -> None:
        """After ResumeTimeout slurmctld leaves the node DOWN and powered down (``down~``,
        "ResumeTimeout reached"), and nothing would bring it back: ``state=resume`` makes it
        ``idle~`` (ready for the next job). The reason is kept in the node's Comment and
        the audit log; protected mode (the reconciler) still counts the failure."""
        hl = compress(names)
        when = f"{self.now():%Y-%m-%d %H:%M:%SZ}"
        try:
            self.slurm.scontrol(
                "update",
                f"nodename={hl}",
                f"comment=coreburst: resume failed {when} (ResumeTimeout reached); "
                "instance terminated, node returned to the pool",
            )
            self.slurm.scontrol("update", f"nodename={hl}", "state=resume")
        except RuntimeError as exc:  # the reconciler repairs down~ cloud nodes
            log.error("cannot return %s to the pool: %s", hl, exc)
            return
        self.audit("resume-fail.returned", nodes=hl)
