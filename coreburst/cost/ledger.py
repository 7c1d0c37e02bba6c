"""Dollars per job, user, account, partition or team, from Slurm's job records (pure).

Core GPU-hours are priced at one owned $/GPU-hour (the TCO model's amortised price of an
allocated GPU-hour). A burst node is billed by EC2 for every second its instance lives, busy
or not; each job on it pays its share, ``GPU-seconds on the node x instance $/h / (GPUs of
the instance x 3600)`` (nodes shared by several jobs split by time x GPUs), and what no job
used is *idle*: ``instance-seconds x GPUs - job GPU-seconds``, at the same rate, on its own
row. So the burst column adds up to instance-hours x the catalog's price, and never to more:
a job's time on a burst node is clipped to its instance's lifetime there (Slurm records jobs
held in CONFIGURING on a node that never registers for longer than the instance lived).
Instance lifetimes come from the burst audit log (:func:`instance_lifetimes`) or EC2's own
times (:func:`ec2_lifetimes`); a node with jobs but no recorded lifetime has its jobs priced
unclipped and the idle row is *unknown* (missing data is never idle, nor $0).

The core is paid for whether or not jobs use it: its *idle* row is, per core node, ``GPUs x the
time Slurm had it in service - GPU-seconds jobs held there`` (:mod:`coreburst.cost.capacity`:
GPU counts from scontrol, down/drained spans from slurmdbd's node events), at the owned rate.
GPU-seconds jobs held while their node was out of service (a draining node) are not taken
from its capacity twice. A node whose GPU count is unreadable, that scontrol no longer lists,
or whose jobs held more than its capacity (the records disagree) is *unknown*: named in a
note, never idle.

Money is exact: GPU-seconds are integers, prices :class:`~decimal.Decimal`, sums
:class:`~fractions.Fraction`; each money column's total is rounded once (half even), each idle
row on its own, and the rest shared out to the rows by largest remainder, so every column's
rows add up to its total to the cent, the total is the same whatever the grouping, and the
burst total is within half a cent of instance-hours x price. A price the catalog lacks makes
GPU-hours *unpriced*, never $0.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from fractions import Fraction
from typing import Any

from coreburst.burst.hostlist import HostlistError, expand
from coreburst.cost.accounting import AccountingError, JobRecord
from coreburst.cost.capacity import CoreCapacity

# Audit events (coreburst/burst/power.py) that start and end a node's instance.
LAUNCH_EVENTS = ("resume.launched",)
END_EVENTS = ("suspend", "resume-fail", "resume.cancelled")
IDLE_ROW = "(idle burst instances)"
IDLE_CORE_ROW = "(idle core GPUs)"
BY_CHOICES = ("team", "account", "user", "job", "partition")


@dataclass(frozen=True)
class BurstNode:
    """A burst node's instance: its GPUs and price (None: the catalog has no figure)."""

    cluster: str
    instance_type: str
    market: str
    gpus: int
    usd_per_hour: Decimal | None
    source: str


def instance_lifetimes(
    text: str, since: int, until: int, origin: str = "burst audit log"
) -> dict[str, list[tuple[int, int]]]:
    """Per node, the spans its instance ran inside [since, until), from the resume program's
    JSON-lines audit log: ``resume.launched`` opens a node's span, ``suspend``,
    ``resume-fail`` and ``resume.cancelled`` close it. A span still open at the end runs
    to ``until`` (the instance is still billed); a launch for a node whose span is open
    keeps the earlier start (an end the log missed is not assumed).

    >>> log = '{"ts": 100, "event": "resume.launched", "nodes": "od-[1-2]"}\\n' \\
    ...       '{"ts": 160.5, "event": "suspend", "nodes": "od-1", "instances": ["i-1"]}\\n'
    >>> instance_lifetimes(log, 0, 200)
    {'od-1': [(100, 160)], 'od-2': [(100, 200)]}
    """
    open_at: dict[str, int] = {}
    spans: dict[str, list[tuple[int, int]]] = {}

    def close(node: str, at: int) -> None:
        start = open_at.pop(node)
        lo, hi = max(start, since), min(at, until)
        if hi > lo:
            spans.setdefault(node, []).append((lo, hi))

    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            event, ts = rec["event"], int(rec["ts"])
            nodes = expand(rec["nodes"]) if event in LAUNCH_EVENTS + END_EVENTS else []
        except (ValueError, KeyError, TypeError, HostlistError):
            raise AccountingError(
                f"{origin} line {n}: not an audit record with ts, event and nodes"
            ) from None
        for node in nodes:
            if event in LAUNCH_EVENTS:
                open_at.setdefault(node, ts)
            elif node in open_at:
                close(node, ts)
    for node in list(open_at):
        close(node, until)
    return spans


# EC2's StateTransitionReason for a stopped or terminated instance: "User initiated
# (2018-02-01 00:00:00 GMT)" (EC2 API reference, Instance.StateTransitionReason:
# https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_Instance.html); moto writes UTC.
_ENDED = re.compile(r"\((\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) (?:GMT|UTC)\)")
ENDED_STATES = ("shutting-down", "terminated", "stopping", "stopped")
NODE_TAG, JOB_TAG = "coreburst-slurm-node", "coreburst-job"


def ec2_lifetimes(
    text: str, since: int, until: int, origin: str = "--ec2-instances file"
) -> tuple[dict[str, list[tuple[int, int]]], dict[str, list[dict[str, Any]]]]:
    """Per node, the spans its instances ran inside [since, until) by EC2's own times, and
    each instance (id, the job it was launched for, launch and end), from saved
    ``aws ec2 describe-instances --output json`` (instances tagged ``coreburst-slurm-node``
    by the resume program). An instance still running runs to ``until``; one that ended
    with no time in its StateTransitionReason is refused (its bill cannot be told).

    >>> doc = '{"Reservations": [{"Instances": [{"InstanceId": "i-1", ' \\
    ...   '"LaunchTime": "1970-01-01T00:01:40+00:00", "State": {"Name": "running"}, ' \\
    ...   '"Tags": [{"Key": "coreburst-slurm-node", "Value": "od-1"}]}]}]}'
    >>> ec2_lifetimes(doc, 0, 200)[0]
    {'od-1': [(100, 200)]}
    """
    try:
        doc = json.loads(text)
        found = [i for r in doc["Reservations"] for i in r["Instances"]]
    except (ValueError, KeyError, TypeError):
        raise AccountingError(
            f"{origin}: not the JSON of aws ec2 describe-instances (no Reservations/Instances)"
        ) from None
    spans: dict[str, list[tuple[int, int]]] = {}
    instances: dict[str, list[dict[str, Any]]] = {}
    for inst in found:
        try:
            iid = str(inst["InstanceId"])
            tags = {t["Key"]: t["Value"] for t in inst.get("Tags") or []}
            launched = int(
                datetime.fromisoformat(inst["LaunchTime"].replace("Z", "+00:00")).timestamp()
            )
            state = inst["State"]["Name"]
        except (KeyError, TypeError, ValueError, AttributeError):
            raise AccountingError(
                f"{origin}: an instance without InstanceId, LaunchTime (ISO 8601), State or "
                "Tags as describe-instances prints them"
            ) from None
        node = tags.get(NODE_TAG)
        if not node:
            continue
        end = until
        if state in ENDED_STATES:
            m = _ENDED.search(str(inst.get("StateTransitionReason") or ""))
            if m is None:
                raise AccountingError(
                    f"{origin}: {iid} is {state} but its StateTransitionReason has no time; "
                    "give the file as describe-instances printed it, or leave it out to use "
                    "the audit log"
                )
            end = int(
                datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC).timestamp()
            )
        ended = state in ENDED_STATES
        instances.setdefault(node, []).append({
            "instance_id": iid,
            "launched_for_job": tags.get(JOB_TAG),  # the resume program's tag
            "launch": _iso(launched),
            "end": _iso(end) if ended else None,  # None: still running
        })  # fmt: skip
        lo, hi = max(launched, since), min(end, until)
        if hi > lo:
            spans.setdefault(node, []).append((lo, hi))
    return spans, instances


def _cents(x: Fraction) -> int:
    """Whole cents, half to even (``round`` of a Fraction is exact)."""
    return round(x * 100)


def apportion(total_cents: int, parts: list[Fraction]) -> list[int]:
    """Share ``total_cents`` over ``parts`` (exact dollars) by largest remainder: each part
    gets its floor in cents, the cents left go to the largest remainders (ties: first). When
    the floors already exceed the total (a total rounded down, parts in whole cents) the
    excess comes off the smallest remainders (ties: last) that have a cent to give.

    >>> apportion(100, [Fraction(1, 3)] * 3)
    [34, 33, 33]
    >>> apportion(1, [Fraction(1, 100), Fraction(1, 100)])
    [1, 0]
    """
    floors = [int(p * 100 // 1) for p in parts]
    left = total_cents - sum(floors)
    order = sorted(range(len(parts)), key=lambda i: (-(parts[i] * 100 - floors[i]), i))
    for i in order[: max(0, left)]:
        floors[i] += 1
    for i in [i for i in reversed(order) if floors[i] > 0][: max(0, -left)]:
        floors[i] -= 1
    return floors


@dataclass
class Row:
    """One group's figures. GPU-seconds are exact (Fraction for a multi-node share)."""

    group: str
    jobs: set[str] = field(default_factory=set)
    core_gpu_s: Fraction = Fraction(0)
    burst_gpu_s: Fraction = Fraction(0)
    burst_usd: Fraction = Fraction(0)  # exact, before the column is rounded
    unpriced_gpu_s: Fraction = Fraction(0)
    core_cents: int | None = None
    burst_cents: int = 0
    unknown: bool = False  # an idle row whose figure is unknown: shown so, left out of totals
    measured_gpu_s: Fraction = Fraction(0)  # GPU-seconds of job runs DCGM measured
    active_gpu_s: Fraction = Fraction(0)  # those x their engine-active ratio
    # The catalog citations of the burst prices the row's burst dollars came from, each once
    # (``ref 2025-06; estimate 2026-11 unverified`` for a spot pool).
    burst_sources: list[str] = field(default_factory=list)

    def cite_burst(self, node: BurstNode) -> None:
        if node.source not in self.burst_sources:
            self.burst_sources.append(node.source)

    @property
    def gpu_active(self) -> float | None:
        """GPU-seconds-weighted engine-active ratio of the measured runs; None: none measured."""
        return float(self.active_gpu_s / self.measured_gpu_s) if self.measured_gpu_s else None

    @property
    def total_cents(self) -> int | None:
        return None if self.core_cents is None else self.core_cents + self.burst_cents


@dataclass
class Ledger:
    rows: list[Row]
    idle: Row
    idle_by_node: dict[str, dict[str, Any]]
    notes: list[str]
    core_rate: Decimal | None
    instance_gpu_s: dict[str, int]  # per burst node: instance-seconds x GPUs in the window
    idle_core: Row = field(default_factory=lambda: Row(IDLE_CORE_ROW, unknown=True))
    idle_core_by_node: dict[str, dict[str, Any]] = field(default_factory=dict)
    core_unknown: dict[str, str] = field(default_factory=dict)  # core node -> why unknown
    # per burst node: its instance's lifetime in the window and every job run that used it
    instances: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def all_rows(self) -> list[Row]:
        return [*self.rows, self.idle_core, self.idle]

    def total(self, attr: str) -> Any:
        vals = [getattr(r, attr) for r in self.all_rows if not r.unknown]
        if any(v is None for v in vals):
            return None
        return sum(vals, start=Fraction(0) if isinstance(vals[0], Fraction) else 0)


def _union(spans: Iterable[tuple[int, int]], lo: int, hi: int) -> list[tuple[int, int]]:
    """``spans`` clipped to [lo, hi) and merged, in order."""
    out: list[tuple[int, int]] = []
    for a, b in sorted((max(a, lo), min(b, hi)) for a, b in spans):
        if b <= a:
            continue
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _overlap(lo: int, hi: int, spans: list[tuple[int, int]]) -> int:
    return sum(max(0, min(hi, b) - max(lo, a)) for a, b in spans)


def idle_core(
    core: CoreCapacity,
    used_by: dict[str, Fraction],
    since: int,
    until: int,
) -> tuple[dict[str, Fraction], dict[str, dict[str, Any]], dict[str, str]]:
    """Per core node: idle GPU-seconds, its figures, and the nodes that are unknown (why).
    ``used_by``: node -> GPU-seconds jobs held there while it was in service, from
    ``max(since, core.recorded_from)`` to ``until`` (pure)."""
    idle: dict[str, Fraction] = {}
    figures: dict[str, dict[str, Any]] = {}
    unknown: dict[str, str] = {}
    lo = since if core.recorded_from is None else max(since, core.recorded_from)
    for node in sorted(set(core.gpus) | set(used_by)):
        gpus = core.gpus.get(node)
        if node not in core.gpus:
            unknown[node] = f"{node} ran jobs but scontrol does not list it (removed?)"
            continue
        if gpus is None:
            unknown[node] = core.unknown.get(node, f"{node}: GPU count unreadable")
            continue
        if core.recorded_from is None:
            unknown[node] = f"{node}: slurmdbd has no record of the cluster in the window"
            continue
        out = _union(core.out_of_service.get(node, []), lo, until)
        in_service = max(0, until - lo) - sum(b - a for a, b in out)
        used = used_by.get(node, Fraction(0))
        spare = gpus * in_service - used
        if spare < 0:
            unknown[node] = (
                f"{node}: jobs held {float(used) / 3600:,.3f} GPU-h, more than its {gpus} GPUs "
                "in service (Slurm's records disagree)"
            )
            continue
        idle[node] = spare
        figures[node] = {
            "gpus": gpus,
            "in_service_h": round(in_service / 3600, 4),
            "out_of_service_h": round(sum(b - a for a, b in out) / 3600, 4),
            "held_gpu_h": round(float(used) / 3600, 4),
            "idle_gpu_h": round(float(spare) / 3600, 4),
        }
    return idle, figures, unknown


def group_of(job: JobRecord, by: str, teams: dict[str, str]) -> str:
    account = job.account or "(no account)"
    if by == "team":
        return teams.get(job.account, account)
    if by == "account":
        return account
    if by == "user":
        return job.user or "(no user)"
    if by == "partition":
        return job.partition or "(no partition)"
    return job.job_id


def _iso(t: int) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _named(ids: Iterable[str], most: int = 5) -> str:
    """``2, 3`` or ``2, 3, 4, 5, 6 and 12 more``."""
    ordered = sorted(ids, key=lambda j: (len(j), j))
    more = f" and {len(ordered) - most:,} more" if len(ordered) > most else ""
    return ", ".join(ordered[:most]) + more


def build_ledger(
    jobs: Iterable[JobRecord],
    *,
    since: int,
    until: int,
    now: int,
    by: str,
    core_rate: Decimal | None,
    burst_nodes: dict[str, BurstNode],
    lifetimes: dict[str, list[tuple[int, int]]] | None,
    teams: dict[str, str] | None = None,
    core: CoreCapacity | None = None,
    active: dict[JobRecord, float | None] | None = None,
    lifetime_source: str = "the burst audit log",
) -> Ledger:
    """Rows of GPU-hours and dollars per group, the idle core and idle burst rows, and notes
    (pure; one pass over ``jobs``, which may be a stream). ``lifetimes`` None: no audit log
    (idle burst instance-hours unknown); ``core`` None: the core's capacity could not be read
    (idle core GPU-hours unknown); ``active``: each run's engine-active ratio from DCGM
    (:mod:`coreburst.cost.measured`; None: unmeasured).

    A run's time on a burst node is clipped to its instance's lifetime there: Slurm records a
    job held in CONFIGURING on a node that never registered for longer than the instance
    lived, and EC2 bills the instance, not the record."""
    teams = teams or {}
    rows: dict[str, Row] = {}
    # Integer accumulators (GPU-seconds x the run's node count n, keyed by n), made exact
    # Fractions once at the end: a million runs through Fraction arithmetic took minutes.
    core_acc: dict[tuple[str, int], int] = {}  # (group, n)
    burst_acc: dict[tuple[str, str, int], int] = {}  # (group, burst node, n)
    used_acc: dict[tuple[str, int], int] = {}  # (burst node, n): clipped to its instance
    held_acc: dict[tuple[str, int], int] = {}  # (core node, n): while in service
    clipped: dict[str, dict[str, int]] = {}  # burst node -> run -> seconds outside the instance
    ran_on: dict[str, set[str]] = {}  # burst node -> runs that used its instance
    notes: list[str] = []
    unknown_gpus = 0
    life = (
        {n: _union(sp, since, until) for n, sp in lifetimes.items()}
        if lifetimes is not None
        else {}
    )
    lo_core = (
        since if core is None or core.recorded_from is None else max(since, core.recorded_from)
    )
    out_core = (
        {n: _union(sp, lo_core, until) for n, sp in core.out_of_service.items()} if core else {}
    )
    no_spans: list[tuple[int, int]] = []
    for job in jobs:
        start, end = job.span(now)
        a, b = max(start, since), min(end, until)
        if b <= a or not job.nodes:
            continue
        secs = b - a
        group = group_of(job, by, teams)
        row = rows.get(group)
        if row is None:
            row = rows[group] = Row(group)
        row.jobs.add(job.job_id)
        gpus, n = job.gpus, len(job.nodes)
        if gpus == 0:
            unknown_gpus += 1
        if active is not None:
            ratio = active.get(job)
            if ratio is not None:
                row.measured_gpu_s += gpus * secs
                row.active_gpu_s += gpus * secs * Fraction(ratio)
        on_core = 0
        for node in job.nodes:
            if node not in burst_nodes:
                on_core += 1
                ca, cb = max(start, lo_core), min(end, until)
                held = 0
                if cb > ca:
                    held = gpus * (cb - ca - _overlap(ca, cb, out_core.get(node, no_spans)))
                held_acc[node, n] = held_acc.get((node, n), 0) + held
                continue
            spans = life.get(node)
            on = secs if spans is None else _overlap(a, b, spans)
            if on < secs:
                per = clipped.setdefault(node, {})
                per[job.job_id] = per.get(job.job_id, 0) + secs - on
            if on:
                ran_on.setdefault(node, set()).add(job.job_id)
            used_acc[node, n] = used_acc.get((node, n), 0) + gpus * on
            burst_acc[group, node, n] = burst_acc.get((group, node, n), 0) + gpus * on
        if on_core:
            core_acc[group, n] = core_acc.get((group, n), 0) + gpus * secs * on_core
    if unknown_gpus:
        notes.append(
            f"{unknown_gpus} job run(s) have no gres/gpu in their TRES (counted as 0 "
            "GPUs): set AccountingStorageTRES=gres/gpu in slurm.conf"
        )
    for (group, n), v in core_acc.items():
        rows[group].core_gpu_s += Fraction(v, n)
    used_on: dict[str, Fraction] = {}
    for (node, n), v in used_acc.items():
        used_on[node] = used_on.get(node, Fraction(0)) + Fraction(v, n)
    held_on: dict[str, Fraction] = {}
    for (node, n), v in held_acc.items():
        held_on[node] = held_on.get(node, Fraction(0)) + Fraction(v, n)

    # Each burst node's instance: its GPU-seconds, and the share of them each run pays.
    idle = Row(IDLE_ROW)
    idle_by_node: dict[str, dict[str, Any]] = {}
    instance_gpu_s: dict[str, int] = {}
    factor: dict[str, Fraction] = {}
    over, no_life = [], []
    for node in sorted(set(life) | set(used_on)):
        bn = burst_nodes.get(node)
        if bn is None:
            continue  # a node no longer in the stack: its price is unknown
        if node not in life:
            if lifetimes is not None:
                no_life.append(node)
            continue
        have = sum(hi - lo for lo, hi in life[node]) * bn.gpus
        instance_gpu_s[node] = have
        used = used_on.get(node, Fraction(0))
        if used > have:  # more GPUs held at once than the instance has: records disagree
            over.append(node)
            factor[node] = Fraction(have) / used
            continue
        spare = have - used
        if spare == 0:
            continue
        idle.jobs.add(node)
        if bn.usd_per_hour is None:
            idle.unpriced_gpu_s += spare
        else:
            idle.burst_gpu_s += spare
            idle.burst_usd += spare * Fraction(bn.usd_per_hour) / (bn.gpus * 3600)
            idle.cite_burst(bn)
        idle_by_node[node] = {
            "cluster": bn.cluster,
            "instance_type": bn.instance_type,
            "instance_hours": round(have / bn.gpus / 3600, 4),
            "idle_gpu_h": round(float(spare) / 3600, 4),
        }
    for (group, node, n), v in burst_acc.items():
        bn, row = burst_nodes[node], rows[group]
        gs = Fraction(v, n)
        if bn.usd_per_hour is None:
            row.unpriced_gpu_s += gs
            continue
        row.burst_gpu_s += gs
        row.burst_usd += gs * factor.get(node, 1) * Fraction(bn.usd_per_hour) / (bn.gpus * 3600)
        row.cite_burst(bn)
    if lifetimes is None and burst_nodes:
        idle.unknown = True
        if used_on:
            notes.append(
                "no burst audit log: idle burst instance-hours are unknown (not zero); "
                "burst jobs are priced from their GPU-hours, unclipped"
            )
    if no_life:
        idle.unknown = True
        notes.append(
            f"jobs ran on {', '.join(no_life)} but {lifetime_source} has no instance there "
            "in the window: those jobs are priced from their GPU-hours, unclipped, and idle "
            "burst instance-hours are unknown (not zero)"
        )
    for node in sorted(clipped):
        per = clipped[node]
        lived = ", ".join(f"{_iso(lo)}..{_iso(hi)}" for lo, hi in life.get(node, []))
        notes.append(
            f"{len(per)} job run(s) on {node} ({_named(per)}) were recorded "
            f"{sum(per.values()):,} s outside its instance's lifetime ({lived or 'none'} in "
            f"{lifetime_source}): clipped to it, since EC2 bills the instance (a job Slurm "
            "holds in CONFIGURING on a node that never registers is recorded longer)"
        )
    if over:
        notes.append(
            f"jobs on {', '.join(over)} held more GPUs at once than the instance has (Slurm's "
            "records disagree): they share its cost in proportion, and it has no idle figure"
        )
    ordered = sorted(rows.values(), key=lambda r: (-(r.core_gpu_s + r.burst_gpu_s), r.group))
    # Each idle row is rounded on its own, so that it reads the same under every --by; the
    # groups share the rest of the column's rounded total (largest remainder), so that the
    # rows add up to it and the window has one total whatever the grouping.
    idle.burst_cents = 0 if idle.unknown else _cents(idle.burst_usd)
    known_idle = [] if idle.unknown else [idle]
    exact = sum((r.burst_usd for r in [*ordered, *known_idle]), start=Fraction(0))
    shares = apportion(_cents(exact) - idle.burst_cents, [r.burst_usd for r in ordered])
    for r, c in zip(ordered, shares, strict=True):
        r.burst_cents = c
    idle.core_cents = None if core_rate is None else 0
    idle_c = Row(IDLE_CORE_ROW, unknown=core is None)
    core_figures: dict[str, dict[str, Any]] = {}
    core_unknown: dict[str, str] = {}
    if core is None:
        if held_on:
            notes.append("the core's GPUs could not be read: idle core GPU-hours are unknown")
    else:
        core_spare, core_figures, core_unknown = idle_core(core, held_on, since, until)
        idle_c.jobs = set(core_spare)
        idle_c.core_gpu_s = sum(core_spare.values(), start=Fraction(0))
        if core_unknown:
            notes.append(
                "idle core GPU-hours unknown (not counted) for "
                + "; ".join(core_unknown[n] for n in sorted(core_unknown))
            )
        if core.recorded_from is not None and core.recorded_from > since:
            notes.append(
                "slurmdbd has the cluster only from "
                f"{datetime.fromtimestamp(core.recorded_from, UTC):%Y-%m-%d %H:%M} UTC: "
                "no core capacity is counted before"
            )
    if core_rate is not None:
        rate = Fraction(core_rate) / 3600
        idle_c.core_cents = _cents(idle_c.core_gpu_s * rate)
        exact_core = sum((r.core_gpu_s * rate for r in ordered), start=Fraction(0))
        if not idle_c.unknown:
            exact_core += idle_c.core_gpu_s * rate
        left = _cents(exact_core) - (0 if idle_c.unknown else idle_c.core_cents)
        for r, c in zip(
            ordered, apportion(left, [r.core_gpu_s * rate for r in ordered]), strict=True
        ):
            r.core_cents = c
    instances = {
        node: {
            "cluster": burst_nodes[node].cluster,
            "instance_type": burst_nodes[node].instance_type,
            "lifetime": [[_iso(lo), _iso(hi)] for lo, hi in life.get(node, [])],
            "lifetime_source": lifetime_source if node in life else None,
            "jobs": sorted(ran_on.get(node, ()), key=lambda j: (len(j), j)),
            "clipped_s": dict(sorted(clipped.get(node, {}).items())),
        }
        for node in sorted(set(life) | set(ran_on) | set(clipped))
        if node in burst_nodes
    }
    return Ledger(
        ordered, idle, idle_by_node, notes, core_rate, instance_gpu_s,
        idle_c, core_figures, core_unknown, instances,
    )  # fmt: skip


def burst_nodes_of(
    node_sets: Iterable[Any], price: Callable[[str, str], tuple[Decimal | None, str]]
) -> dict[str, BurstNode]:
    """``node -> BurstNode`` from the stack's node sets (coreburst.burst.slurmconf.NodeSet);
    ``price(instance_type, market)`` gives ($/h or None, source)."""
    out = {}
    for ns in node_sets:
        rate, src = price(ns.instance_type, ns.market)
        if ns.gpus <= 0:  # trn2: Neuron devices, not gres/gpu; no $/GPU-hour to share out
            rate, src = None, f"{ns.instance_type} has no GPUs in Slurm"
        for n in ns.names:
            out[n] = BurstNode(ns.cluster, ns.instance_type, ns.market, ns.gpus, rate, src)
    return out
