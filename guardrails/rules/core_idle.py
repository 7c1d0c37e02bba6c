"""Rule ``core-idle``: Slurm jobs on the on-prem core that hold GPUs and do not use them.

Each cycle it reads the running jobs and the GPUs each holds (``squeue --json``, see
``guardrails.adapters.slurm.parse_jobs``) and every held GPU's DCGM activity from Prometheus
(``guardrails.adapters.dcgm``: ``DCGM_FI_PROF_GR_ENGINE_ACTIVE``, else ``DCGM_FI_DEV_GPU_UTIL``, by
host
and GPU index; the exporter's host is matched to the Slurm node by name, short name or
``host_map``, see ``guardrails.adapters.dcgm.match_hosts``). Per job:

* **efficiency** over its run so far (mean activity of its GPUs since it started) and the
  allocated and measured GPU-hours, recorded in the state store (``record_core_usage``) for
  ``coreburst core report``;
* **idle**: every GPU below ``threshold_percent`` for the ``window`` -> its owner is warned in
  Slack (``slack_users`` maps the Slurm user to a Slack member, who is mentioned); after the
  ``grace`` the ``policy`` acts: ``warn`` (default: nothing more), ``requeue``
  (``scontrol requeue``) or ``cancel`` (``scancel``). **Some** GPUs idle: warned, never acted on.
* **blind**: any held GPU without a series, or with a hole longer than ``max_gap`` in the
  window, on a node whose exporter host is ambiguous, or whose series carry dcgm-exporter's
  ``hpc_job`` label naming another job than Slurm does: reported, never acted on. Missing or
  conflicting data is never read as idle.
* **young**: running for less than its window: not judged yet.
* **exempt**: ``--comment=coreburst-exempt-until=YYYY-MM-DD`` on the job (at most
  ``max_exemption`` ahead; a later date is not honoured) or an entry in ``exemptions``; both
  expire.

Interactive jobs (salloc/srun) and short jobs (time limit at most ``short_time_limit``) have
thresholds of their own. Acting goes through the actuator's gate like every cloud rule
(dry-run, leader lease, kill switch, breaker, ``safety.max_actions_per_cycle``) plus this rule's
own ``max_actions_per_cycle``; the intent is stored before ``scontrol``/``scancel`` runs, and
Slurm is read again right before acting (a job that restarted or ended is left alone). A
standby daemon decides and reports, never warns or acts. The decision is :func:`assess`
(pure).

    >>> # run(ctx)   # ctx: guardrails.rules.RuleContext
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from guardrails import messages
from guardrails.adapters.dcgm import Activity, GpuKey, Prometheus, PrometheusError, node_activity
from guardrails.adapters.slurm import SlurmError, SlurmJob, SlurmJobs
from guardrails.configtypes import Between, StrictModel, format_duration
from guardrails.model import Series
from guardrails.rules.base import Rule, RuleContext
from guardrails.timefmt import iso, parse_iso


# -- params: the ``core_idle`` section --------------------------------------------------------
class CoreIdleThresholds(StrictModel):
    """When a job's GPUs count as idle, and how long its owner has before the policy acts."""

    threshold_percent: float = Field(default=5.0, gt=0, le=100)
    """Every GPU of the job below this (percent of DCGM activity) for ``window``: idle."""
    window: Annotated[timedelta, Between("5m", "7d")] = timedelta(hours=2)
    """How long every GPU of the job must stay below the threshold."""
    grace: Annotated[timedelta, Between("5m", "7d")] = timedelta(hours=1)
    """From the warning to the requeue / cancel (policy ``warn``: never acts)."""


class CoreExemption(StrictModel):
    """A job (``job``) or a Slurm user's jobs (``user``) left alone until ``until``."""

    job: str | None = Field(default=None, pattern=r"^\d+$")
    """The Slurm job id exempted."""
    user: str | None = Field(default=None, min_length=1)
    """The Slurm user whose jobs are exempted."""
    until: date
    """The last day of the exemption (YYYY-MM-DD)."""

    @model_validator(mode="after")
    def _one_target(self) -> CoreExemption:
        if (self.job is None) == (self.user is None):
            raise ValueError("an exemption names exactly one of job: <id> or user: <name>")
        return self


class CoreIdleConfig(StrictModel):
    """The ``core-idle`` rule (guardrails/rules/core_idle.py): GPUs that Slurm jobs on the
    on-prem core hold but do not use, from DCGM through Prometheus. Off unless switched on; it
    needs ``squeue``/``scontrol``/``scancel`` on this host and a Prometheus URL."""

    enabled: bool = False
    """Run the core-idle rule."""
    prometheus_url: str | None = Field(default=None, pattern=r"^https?://[^\s/]+(/\S*)?$")
    """Prometheus scraping dcgm-exporter on every core node (its HTTP API root)."""
    prometheus_timeout_s: float = Field(default=30.0, gt=0, le=300)
    """The whole answer's deadline (not one socket read's), and the largest answer read."""
    prometheus_max_mib: int = Field(default=64, ge=1, le=4096)
    """The largest Prometheus answer read."""
    step: Annotated[timedelta, Between("15s", "5m")] = timedelta(minutes=1)
    """Resolution the activity is read at, and the longest hole tolerated in a GPU's series (more,
    or no series at all: the job is blind and never acted on)."""
    max_gap: Annotated[timedelta, Between("1m", "1d")] = timedelta(minutes=5)
    """Longest hole tolerated in a GPU's series (at least step)."""
    policy: Literal["warn", "requeue", "cancel"] = "warn"
    """What happens after the grace: warn only, ``scontrol requeue`` or ``scancel``."""
    batch: CoreIdleThresholds = CoreIdleThresholds()
    """Thresholds for batch jobs."""
    interactive: CoreIdleThresholds = CoreIdleThresholds(
        window=timedelta(minutes=30), grace=timedelta(minutes=30)
    )
    """salloc/srun sessions (Slurm's batch_flag false): people step away; warn sooner."""
    short: CoreIdleThresholds = CoreIdleThresholds(
        window=timedelta(minutes=30), grace=timedelta(minutes=30)
    )
    """Jobs whose time limit is at most ``short_time_limit``: they end soon by themselves."""
    short_time_limit: Annotated[timedelta, Between("1m", "7d")] = timedelta(hours=1)
    """Jobs with a time limit this short or shorter use the ``short`` thresholds."""
    partitions: list[str] | None = None
    """Partitions watched (None: every partition whose jobs hold GPUs)."""
    host_map: dict[
        Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,252}$")],
        Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,252}$")],
    ] = {}
    """dcgm-exporter's host label -> Slurm node name, where they differ beyond a domain: an exporter
    host matches the node of its own name, else the node of its short name (``core1.lab.example``
    -> ``core1``). Two exporter hosts matching one node make that node's GPUs blind (never a
    guess) until this names the one to use."""
    slack_users: dict[str, Annotated[str, Field(pattern=r"^[UW][A-Z0-9]{2,20}$")]] = {}
    """Slurm user -> Slack member id, so the warning mentions the job's owner."""
    exempt_comment_key: str = Field(default="coreburst-exempt-until", pattern=r"^[\w.:-]+$")
    """A job exempts itself with ``--comment=coreburst-exempt-until=YYYY-MM-DD`` (at most
    ``max_exemption`` ahead); operators list exemptions here. Both expire."""
    exemptions: list[CoreExemption] = []
    """Jobs and users left alone until a date."""
    max_exemption: Annotated[timedelta, Between("1h", "365d")] = timedelta(days=14)
    """An exemption dated further ahead than this is ignored."""
    max_actions_per_cycle: int = Field(default=2, ge=0, le=100)
    """At most this many requeues/cancels per cycle (``safety.max_actions_per_cycle`` applies
    too)."""
    gpu_hour_usd: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    """$ per allocated GPU-hour of an owned node, for the messages and the report (see ``coreburst
    core price``: the TCO model's amortised cost); None: no dollar figures."""
    slurm_bin_dir: Path | None = None
    """Where squeue, scontrol and scancel are (none: PATH)."""
    slurm_conf: Path | None = None
    """The slurm.conf they read (none: SLURM_CONF or Slurm's default)."""
    slurm_timeout_s: float = Field(default=30.0, gt=0, le=300)
    """Deadline of each Slurm command."""

    @model_validator(mode="after")
    def _url_when_enabled(self) -> CoreIdleConfig:
        if self.enabled and not self.prometheus_url:
            raise ValueError(
                "set prometheus_url: http://<prometheus>:9090 (the server scraping dcgm-exporter)"
                " when enabled is true"
            )
        if self.max_gap < self.step:
            raise ValueError(
                f"max_gap ({format_duration(self.max_gap)}) is shorter than step "
                f"({format_duration(self.step)})"
            )
        by_node: dict[str, list[str]] = {}
        for host, node in self.host_map.items():
            by_node.setdefault(node, []).append(host)
        for node, hosts in sorted(by_node.items()):
            if len(hosts) > 1:
                raise ValueError(
                    f"host_map maps {' and '.join(sorted(hosts))} to the one Slurm node {node};"
                    " map exactly one exporter host to each node"
                )
        return self


JobKind = Literal["batch", "interactive", "short"]
JobState = Literal["idle", "some-idle", "busy", "young", "blind", "exempt"]
MARKS_KEY = "core_idle.warned"  # kv: run key -> {"warned_at": iso, "job_id": ...}


def run_key(job: SlurmJob) -> str:
    """One run of a job: a requeued job starts again with a new start time (a new run)."""
    return f"{job.job_id}:{int(job.start.timestamp())}"


def job_kind(job: SlurmJob, p: CoreIdleConfig) -> JobKind:
    if job.interactive:
        return "interactive"
    if job.time_limit is not None and job.time_limit <= p.short_time_limit:
        return "short"
    return "batch"


def thresholds(kind: JobKind, p: CoreIdleConfig) -> CoreIdleThresholds:
    return {"batch": p.batch, "interactive": p.interactive, "short": p.short}[kind]


def exemption(job: SlurmJob, p: CoreIdleConfig, today: date) -> str | None:
    """Why the job is exempt today, or None (expired, too far ahead, or none)."""
    for e in p.exemptions:
        if e.until >= today and (e.job == job.job_id or (e.user and e.user == job.user)):
            return f"exempt until {e.until} by config ({'job' if e.job else 'user'})"
    prefix = p.exempt_comment_key + "="
    for word in job.comment.replace(",", " ").split():
        if not word.startswith(prefix):
            continue
        try:
            until = date.fromisoformat(word[len(prefix) :])
        except ValueError:
            return None
        if today <= until <= today + p.max_exemption:
            return f"exempt until {until} by the job's comment"
    return None


@dataclass(frozen=True)
class Assessment:
    job: SlurmJob
    kind: JobKind
    state: JobState
    reason: str
    efficiency_pct: float | None  # mean activity over the run so far, all its GPUs
    idle_gpus: list[str] = field(default_factory=list)
    allocated_gpu_h: float = 0.0
    used_gpu_h: float | None = None


def _slice(s: Series, start: datetime, end: datetime) -> tuple[list[datetime], list[float]]:
    order = sorted(range(len(s)), key=s.timestamps.__getitem__)
    ts = [s.timestamps[i] for i in order]
    vs = [s.values[i] for i in order]
    lo, hi = bisect.bisect_left(ts, start), bisect.bisect_right(ts, end)
    return ts[lo:hi], vs[lo:hi]


def hpc_job_conflict(
    job: SlurmJob,
    labels: Mapping[str, Series],
    start: datetime,
    now: datetime,
    p: CoreIdleConfig,
) -> list[str]:
    """The other jobs dcgm-exporter's HPC job mapping names on one of ``job``'s GPUs between
    ``start`` and ``now`` (``labels``: points per ``hpc_job`` value). The first ``max_gap``
    after the job's start is not counted: the previous job's label may linger one scrape (or
    Prometheus's lookback) until the prolog's mapping file is read."""
    since = max(start, job.start + p.max_gap)
    return sorted(j for j, s in labels.items() if j != job.job_id and _slice(s, since, now)[0])


def assess(
    job: SlurmJob,
    window_data: dict[GpuKey, Series],
    run_data: dict[GpuKey, Series],
    now: datetime,
    p: CoreIdleConfig,
    *,
    unmapped: Mapping[str, str] | None = None,
    hpc_jobs: Mapping[GpuKey, Mapping[str, Series]] | None = None,
) -> Assessment:
    """Decide one job from its GPUs' activity: ``window_data`` at ``step`` over at least the
    job's window, ``run_data`` (maybe coarser) since the job started. ``unmapped``: Slurm nodes
    whose exporter host is ambiguous, and why (their GPUs are blind); ``hpc_jobs``: per GPU the
    points of each ``hpc_job`` label the exporter put on it (another job there: blind).

    >>> from datetime import UTC
    >>> from guardrails.rules.core_idle import CoreIdleConfig
    >>> from guardrails.adapters.slurm import SlurmJob
    >>> now = datetime(2026, 1, 1, 12, tzinfo=UTC)
    >>> job = SlurmJob("7", "ann", "ml", "core", now - timedelta(hours=3), None,
    ...                {"n1": (0,)}, False)
    >>> pts = Series.of((now - timedelta(minutes=m), 0.0) for m in range(180, -1, -1))
    >>> assess(job, {("n1", 0): pts}, {("n1", 0): pts}, now, CoreIdleConfig()).state
    'idle'
    >>> assess(job, {}, {}, now, CoreIdleConfig()).state
    'blind'
    """
    kind = job_kind(job, p)
    th = thresholds(kind, p)
    ran = max(now - job.start, timedelta(0))
    alloc_h = job.gpu_count * ran.total_seconds() / 3600
    keys = [(node, i) for node, ix in sorted(job.gpus.items()) for i in ix]

    def out(state: JobState, reason: str, **kw: object) -> Assessment:
        return Assessment(job, kind, state, reason, allocated_gpu_h=alloc_h, **kw)  # type: ignore[arg-type]

    # Efficiency over the run: per GPU the mean of its points since the start.
    means: list[float] = []
    for k in keys:
        _, vs = _slice(run_data.get(k, Series()), job.start, now)
        if vs:
            means.append(sum(vs) / len(vs))
    eff = sum(means) / len(means) if keys and len(means) == len(keys) else None
    used = alloc_h * eff / 100 if eff is not None else None
    why_exempt = exemption(job, p, now.date())
    if why_exempt:
        return out("exempt", why_exempt, efficiency_pct=eff, used_gpu_h=used)
    start = max(job.start, now - th.window)
    idle: list[str] = []
    for node, i in keys:
        ts, vs = _slice(window_data.get((node, i), Series()), start, now)
        name = f"{node} GPU {i}"
        if unmapped and node in unmapped:
            return out("blind", f"{name}: {unmapped[node]}", efficiency_pct=eff, used_gpu_h=used)
        others = hpc_job_conflict(job, (hpc_jobs or {}).get((node, i), {}), start, now, p)
        if others:
            return out(
                "blind",
                f"{name}: dcgm-exporter's hpc_job label names job {', '.join(others)}, Slurm "
                f"job {job.job_id}",
                efficiency_pct=None,
                used_gpu_h=None,
            )
        if not ts:
            return out("blind", f"{name}: no DCGM data", efficiency_pct=eff, used_gpu_h=used)
        edges = [start, *ts, now]
        gap = max(b - a for a, b in itertools.pairwise(edges))
        if gap > p.max_gap:
            return out(
                "blind",
                f"{name}: no DCGM data for {format_duration(gap)} (max_gap "
                f"{format_duration(p.max_gap)})",
                efficiency_pct=eff,
                used_gpu_h=used,
            )
        if max(vs) < th.threshold_percent:
            idle.append(name)
    if ran < th.window:
        return out(
            "young",
            f"running {format_duration(ran)}, less than the {kind} window "
            f"{format_duration(th.window)}",
            efficiency_pct=eff,
            used_gpu_h=used,
            idle_gpus=idle,
        )
    below = f"below {th.threshold_percent:g} % for {format_duration(th.window)}"
    if idle and len(idle) == len(keys):
        return out(
            "idle", f"all {len(keys)} GPU(s) {below}", efficiency_pct=eff, used_gpu_h=used,
            idle_gpus=idle,
        )  # fmt: skip
    if idle:
        return out(
            "some-idle",
            f"{len(idle)} of {len(keys)} GPU(s) {below}",
            efficiency_pct=eff,
            used_gpu_h=used,
            idle_gpus=idle,
        )
    return out("busy", "GPUs in use", efficiency_pct=eff, used_gpu_h=used)


def _watched(jobs: list[SlurmJob], p: CoreIdleConfig) -> list[SlurmJob]:
    return [
        j for j in jobs
        if j.gpus and (p.partitions is None or j.partition in p.partitions)
    ]  # fmt: skip


def read_activity(
    prom: Prometheus, jobs: list[SlurmJob], now: datetime, p: CoreIdleConfig
) -> tuple[Activity, Activity]:
    """(window data at ``step``, run-so-far data) for the Slurm nodes these jobs hold GPUs
    on, keyed by node whatever the exporters call their hosts."""
    nodes = {n for j in jobs for n in j.gpus}
    longest = max(p.batch.window, p.interactive.window, p.short.window)
    step = p.step.total_seconds()
    window = node_activity(prom, nodes, now - longest, now, step_s=step, host_map=p.host_map)
    first = min(j.start for j in jobs)
    if first >= now - longest:
        return window, window
    whole = node_activity(prom, nodes, first, now, step_s=step, host_map=p.host_map)
    return window, whole


def run(ctx: RuleContext) -> None:
    p: CoreIdleConfig = ctx.cfg.core_idle
    now = ctx.clock.now()
    act = ctx.actuator
    slurm = SlurmJobs(p.slurm_bin_dir, p.slurm_conf, p.slurm_timeout_s)
    try:
        jobs = _watched(slurm.running(), p)
    except SlurmError as exc:  # nothing is decided on a partial or failed read
        ctx.report.errors.append(f"core-idle: {exc}")
        act.audit("core.slurm-unreadable", error=str(exc))
        return
    marks: dict[str, dict[str, Any]] = dict(ctx.state.get(MARKS_KEY, {}) or {})
    live = {run_key(j) for j in jobs}
    for gone in sorted(set(marks) - live):  # ended, requeued or cancelled since
        act.audit("core.unmark", run=gone, reason="job no longer running")
        marks.pop(gone)
    if not jobs:
        if act.leader:  # a standby never writes what the leader keeps
            ctx.state.put(MARKS_KEY, marks)
        return
    try:
        window, whole = read_activity(
            Prometheus(str(p.prometheus_url), p.prometheus_timeout_s, p.prometheus_max_mib * 2**20),
            jobs,
            now,
            p,
        )
    except PrometheusError as exc:  # every job is blind this cycle
        window, whole = Activity(), Activity()
        ctx.report.errors.append(f"core-idle: {exc}")
    unmapped = {**whole.unmapped, **window.unmapped}
    for node, why in sorted(unmapped.items()):  # a config fix the operator has to make
        ctx.report.errors.append(f"core-idle: Slurm node {node}'s GPUs are blind: {why}")
        act.audit("core.host-unmapped", node=node, why=why)
    blind: list[tuple[str, str]] = []
    acted = 0
    for job in jobs:
        a = assess(
            job, window.series, whole.series, now, p, unmapped=unmapped,
            hpc_jobs=window.hpc_jobs,
        )  # fmt: skip
        key = run_key(job)
        ctx.report.states[f"core-{a.state}"] += 1
        act.audit(
            "core.decision",
            job_id=job.job_id,
            user=job.user,
            account=job.account,
            kind=a.kind,
            state=a.state,
            reason=a.reason,
            efficiency_pct=a.efficiency_pct,
            gpus=job.gpu_count,
        )
        if act.leader:  # one writer per store
            ctx.state.record_core_usage(
                key,
                now,
                job_id=job.job_id,
                user=job.user,
                account=job.account,
                partition=job.partition,
                start=job.start,
                gpus=job.gpu_count,
                allocated_gpu_h=a.allocated_gpu_h,
                used_gpu_h=a.used_gpu_h,
                state=a.state,
            )
        if a.state == "blind":
            blind.append((job.job_id, a.reason))
            continue  # never acted on; a warning already given stays
        if a.state not in ("idle", "some-idle"):
            if key in marks:
                act.audit("core.unmark", run=key, reason=a.reason)
                marks.pop(key)
            continue
        if not act.leader:
            act.audit("standby.skip", job_id=job.job_id, state=a.state)
            continue
        th = thresholds(a.kind, p)
        mark = marks.get(key)
        # Warned again, and the grace starts over, when all GPUs are idle after a warning about
        # some, and when the daemon acts after a dry-run warning (which promised nothing).
        if (
            mark is None
            or (a.state == "idle" and mark.get("state") != "idle")
            or (mark.get("dry") and not act.dry_run)
        ):
            _warn(ctx, a, now, th)
            marks[key] = {
                "warned_at": iso(now),
                "job_id": job.job_id,
                "state": a.state,
                "dry": act.dry_run,
            }
            continue
        if a.state != "idle" or p.policy == "warn":
            continue
        due = parse_iso(marks[key]["warned_at"]) + th.grace
        if now < due:
            continue
        if acted >= p.max_actions_per_cycle:
            act.audit(
                "action.skipped",
                key=f"core-{p.policy}:{key}",
                instance_id=f"slurm-job-{job.job_id}",
                kind=p.policy,
                because=f"core_idle.max_actions_per_cycle of {p.max_actions_per_cycle} reached",
            )
            continue
        if _act(ctx, slurm, a, key, marks[key]["warned_at"]):
            acted += 1
            marks.pop(key)
    if act.leader:
        ctx.state.put(MARKS_KEY, marks)
    if blind:
        ctx.alert(messages.core_blind(blind), timedelta(hours=6))


def _warn(ctx: RuleContext, a: Assessment, now: datetime, th: CoreIdleThresholds) -> None:
    p: CoreIdleConfig = ctx.cfg.core_idle
    job = a.job
    act_after = now + th.grace if a.state == "idle" else None
    ctx.alert(
        messages.core_idle_warning(
            job_id=job.job_id,
            job_name=job.name,
            user=job.user,
            account=job.account,
            partition=job.partition,
            kind=a.kind,
            gpus=job.gpu_count,
            idle_gpus=a.idle_gpus,
            efficiency_pct=a.efficiency_pct,
            window=format_duration(th.window),
            threshold_pct=th.threshold_percent,
            policy=p.policy,
            act_after=act_after,
            member=p.slack_users.get(job.user),
            usd_per_gpu_hour=p.gpu_hour_usd,
            exempt_comment_key=p.exempt_comment_key,
            exempt_until=(now + timedelta(days=7)).date(),
            max_exemption_days=p.max_exemption.days,
            run_key=run_key(job),
            dry_run=ctx.actuator.dry_run,
        ),
        timedelta(0),
    )
    ctx.actuator.audit(
        "core.warn",
        job_id=job.job_id,
        user=job.user,
        state=a.state,
        reason=a.reason,
        act_after=act_after,
        policy=p.policy,
        dry_run=ctx.actuator.dry_run,
    )


def _act(ctx: RuleContext, slurm: SlurmJobs, a: Assessment, key: str, warned_at: str) -> bool:
    p: CoreIdleConfig = ctx.cfg.core_idle
    job, act = a.job, ctx.actuator
    try:  # Slurm again right before acting: the job may have ended or restarted meanwhile
        still = {run_key(j) for j in slurm.running()}
    except SlurmError as exc:
        ctx.report.errors.append(f"core-idle: {exc}")
        return False
    if key not in still:
        act.audit("core.guarded", job_id=job.job_id, why="no longer the same running job")
        return False
    action_key = f"core-{p.policy}:{key}"
    call = slurm.requeue if p.policy == "requeue" else slurm.cancel
    reason = f"{a.reason}; warned at {warned_at}"
    try:
        ok = act.execute(
            action_key,
            f"slurm-job-{job.job_id}",
            "slurm",
            p.policy,
            reason=reason,
            call=lambda: call(job.job_id),
        )
    except SlurmError as exc:  # not an AWS failure: forget the intent, decide again later
        ctx.state.drop_intent(action_key)
        act.audit("action.failed", key=action_key, instance_id=job.job_id, error=str(exc))
        ctx.report.errors.append(f"core-idle: {exc}")
        return False
    if ok:
        ctx.alert(
            messages.core_idle_acted(
                action_key,
                job_id=job.job_id,
                user=job.user,
                policy=p.policy,
                reason=reason,
                member=p.slack_users.get(job.user),
            ),
            timedelta(0),
        )
    return ok


RULE = Rule(
    name="core-idle",
    order=80,
    description=(
        "Warn the owners of Slurm jobs on the on-prem core whose GPUs stay idle (DCGM via "
        "Prometheus), and after a grace period requeue or cancel them by policy."
    ),
    params=CoreIdleConfig,
    iam_actions=(),
    section=lambda c: c.core_idle,
    enabled=lambda c: c.core_idle.enabled,
    run=run,
    example=(
        "core_idle: {enabled: true, prometheus_url: 'http://prometheus:9090', policy: requeue,"
        " slack_users: {alice: U0123ABCD}}"
    ),
    sections={"core_idle": CoreIdleConfig},
)
