"""The idle decision: pure functions over plain data, no AWS calls.

    >>> from datetime import UTC, datetime, timedelta
    >>> from guardrails.idle import IdleParams, assess_utilization
    >>> from guardrails.model import Sample, Series
    >>> now = datetime(2026, 1, 1, 12, tzinfo=UTC)
    >>> pts = Series.of(Sample(now - timedelta(minutes=m), 1.0) for m in range(30, -1, -1))
    >>> assess_utilization({"0": pts}, 1, now, IdleParams()).state
    'idle'

A node is IDLE only when every accelerator has datapoints covering the whole window up to the
present and every one of them is below the threshold. Missing, stale or partial data makes it
UNKNOWN ("blind"): reported, never reclaimed. Missing data is never read as zero.

"Up to the present" allows for how late the nodes publish (``publish_delay``: the CloudWatch
agent and the Neuron publisher send their buffered datapoints every 5 min): the stretch after
the newest datapoint may last ``max_gap + publish_delay``. A hole inside the window (or at its
start) is held to ``max_gap``, and a node without data is blind, never idle.

With the per-instance rollup (``assess_rollup``) the same rules hold per period: CloudWatch
aggregates every accelerator's value of one period into Maximum, Minimum and SampleCount, and a
period counts as covered only when SampleCount is exactly the expected accelerator count (times
the samples each publishes per period). A period with fewer (or more) samples is a hole, held to
``max_gap`` like a hole in a per-device series: with one of 64 NeuronCores silent every period
the node is blind, never idle.

"Every accelerator" is counted by the caller from the catalog and the node's configuration
(``guardrails.rules.idle_reclaim.expected_series``: one series per GPU, one per logical
NeuronCore at the node's LNC), never assumed: with 63 of a trn2's 64 NeuronCore series the
node is blind, not idle. When that count cannot be known the caller passes the reason instead.
"""

from __future__ import annotations

import bisect
import itertools
import math
import operator
from dataclasses import dataclass, field
from datetime import UTC, datetime, time, timedelta
from typing import Literal, NamedTuple

from coreburst.common.telemetry import AGENT_FLUSH_INTERVAL_S
from guardrails.model import DeviceSeries, Node, Series

UtilState = Literal["idle", "busy", "unknown"]
Action = Literal["stop", "terminate", "scale-in", "report-only"]
Step = Literal["none", "mark", "wait", "act", "unmark"]


@dataclass(frozen=True)
class IdleParams:
    threshold_percent: float = 5.0
    window: timedelta = timedelta(minutes=30)
    max_gap: timedelta = timedelta(minutes=5)
    # how late the newest datapoints may arrive (idle.publish_delay): allowed after the newest
    # datapoint on top of max_gap, never inside the window
    publish_delay: timedelta = timedelta(seconds=AGENT_FLUSH_INTERVAL_S)
    grace: timedelta = timedelta(hours=1)
    max_exemption: timedelta = timedelta(days=30)
    exempt_tag: str = "coreburst:exempt-until"
    protected_asgs: frozenset[str] = frozenset()
    # (tag key, allowed values)
    protected_tags: tuple[tuple[str, frozenset[str]], ...] = ()


@dataclass(frozen=True)
class DeviceStat:
    device: str
    max_value: float | None
    datapoints: int
    first: datetime | None
    last: datetime | None
    largest_gap_s: float | None


@dataclass(frozen=True)
class Utilization:
    state: UtilState
    reason: str
    devices: list[DeviceStat] = field(default_factory=list)
    idle_devices: list[str] = field(default_factory=list)
    # The earliest time the node could be idle for the whole window, from what was read: after
    # a busy period at t, t + window (strictly after: a period stamped at the window's start
    # still counts); after a hole longer than max_gap that ends at t, t + window - max_gap.
    # None: it could be idle at the next read (no such period, no data, or a hole not closed by
    # any data yet, which late data may still fill).
    idle_from: datetime | None = None


# A busy period stamped exactly at the window's start still counts (``at < start`` is left
# out, ``at == start`` is not), so a node is idle no earlier than just after t + window.
_JUST_AFTER = timedelta(seconds=1)


def _idle_from(
    last_busy: datetime | None, hole_end: datetime | None, params: IdleParams
) -> datetime | None:
    got = [
        *([last_busy + params.window + _JUST_AFTER] if last_busy is not None else []),
        *([hole_end + params.window - params.max_gap] if hole_end is not None else []),
    ]
    return max(got) if got else None


def _hole_end(edges: list[datetime], max_gap: timedelta) -> datetime | None:
    """Where the newest hole longer than ``max_gap`` between consecutive ``edges`` ends."""
    end = None
    for a, b in itertools.pairwise(edges):
        if b - a > max_gap:
            end = b
    return end


def _device_stat(device: str, s: Series, start: datetime, now: datetime) -> DeviceStat:
    ts, vs = s.timestamps, s.values
    if not all(map(operator.le, ts, ts[1:])):  # CloudWatch answers in order; pages may not
        order = sorted(range(len(ts)), key=ts.__getitem__)
        ts, vs = [ts[i] for i in order], [vs[i] for i in order]
    lo, hi = bisect.bisect_left(ts, start), bisect.bisect_right(ts, now)
    if lo == hi:
        return DeviceStat(device, None, 0, None, None, None)
    edges = [start, *ts[lo:hi], now]
    gap = max(map(operator.sub, edges[1:], edges[:-1])).total_seconds()
    return DeviceStat(device, max(vs[lo:hi]), hi - lo, ts[lo], ts[hi - 1], gap)


def assess_utilization(
    series: DeviceSeries, expected_series: int | str, now: datetime, params: IdleParams
) -> Utilization:
    """Classify one node from its per-device series (see module docstring).

    ``expected_series``: how many devices the node has (each must be covered), or why that
    cannot be known (then the node can be busy or blind, never idle)."""
    start = now - params.window
    stats = [_device_stat(d, pts, start, now) for d, pts in sorted(series.items())]
    thr = params.threshold_percent
    gaps = {d: _device_gaps(pts, start, now, thr, params.max_gap) for d, pts in series.items()}
    mg, late = params.max_gap, params.max_gap + params.publish_delay

    def covered(s: DeviceStat) -> bool:
        inner, trailing, _, _ = gaps[s.device]
        return inner <= mg and trailing <= late

    busy = [s for s in stats if s.max_value is not None and s.max_value >= thr]
    idle_devs = [
        s.device for s in stats if s.max_value is not None and s.max_value < thr and covered(s)
    ]
    if busy:
        # Busy is certain from any busy datapoint, whatever the gaps elsewhere.
        top = max(busy, key=lambda s: s.max_value or 0.0)
        reason = f"device {top.device} peaked at {top.max_value:.1f}% (threshold {thr:g}%)"
        if idle_devs:
            reason += f"; {len(idle_devs)} of {len(stats)} devices idle (reported, not reclaimed)"
        last_busy = max(b for _, _, b, _ in gaps.values() if b is not None)
        holes = [h for _, _, _, h in gaps.values() if h is not None]
        until = _idle_from(last_busy, max(holes) if holes else None, params)
        return Utilization("busy", reason, stats, idle_devs, until)
    if isinstance(expected_series, str):
        return Utilization("unknown", expected_series, stats, idle_devs)
    if expected_series < 1:
        return Utilization("unknown", "no accelerator count for this node", stats, idle_devs)
    if not series:
        return Utilization("unknown", "no utilization series for this node", stats)
    if len(series) < expected_series:
        return Utilization(
            "unknown",
            f"only {len(series)} of {expected_series} accelerator series present",
            stats,
            idle_devs,
        )
    for s in stats:
        if s.datapoints == 0:
            return Utilization("unknown", f"device {s.device}: no datapoints in window", stats)
        inner, trailing, _, hole = gaps[s.device]
        if trailing > late:
            assert s.last is not None
            why = (
                f"stale: last datapoint {int((now - s.last).total_seconds())}s ago (max gap "
                f"{int(mg.total_seconds())}s + publish delay "
                f"{int(params.publish_delay.total_seconds())}s)"
            )
            return Utilization("unknown", f"device {s.device}: {why}", stats, idle_devs)
        if inner > mg:
            why = (
                f"partial: a {int(inner.total_seconds())}s gap in the window "
                f"(max gap {int(mg.total_seconds())}s)"
            )
            until = _idle_from(None, hole, params)
            return Utilization("unknown", f"device {s.device}: {why}", stats, idle_devs, until)
    peak = max(s.max_value or 0.0 for s in stats)
    mins = int(params.window.total_seconds() // 60)
    return Utilization(
        "idle",
        f"all {len(stats)} devices below {thr:g}% for {mins} min (peak {peak:.1f}%)",
        stats,
        idle_devs,
    )


def _device_gaps(
    s: Series, start: datetime, now: datetime, thr: float, max_gap: timedelta
) -> tuple[timedelta, timedelta, datetime | None, datetime | None]:
    """One device's longest hole inside the window (from its start), the stretch after its
    newest datapoint, its newest busy datapoint, and where its newest hole longer than
    ``max_gap`` ends."""
    pts = sorted((t, v) for t, v in zip(s.timestamps, s.values, strict=True) if start <= t <= now)
    if not pts:
        return now - start, now - start, None, None
    edges = [start, *(t for t, _ in pts)]
    inner = max(map(operator.sub, edges[1:], edges[:-1]))
    busy = [t for t, v in pts if v >= thr]
    return inner, now - pts[-1][0], (busy[-1] if busy else None), _hole_end(edges, max_gap)


class PeriodStat(NamedTuple):
    """One period of a node's per-instance rollup: the statistics CloudWatch computed over
    every value published under the instance id alone in [at, at + period). (A tuple: a
    10,000-node fleet keeps 300,000 of them.)"""

    at: datetime
    maximum: float
    minimum: float
    samples: float


ROLLUP_DEVICE = "all (rollup)"


def assess_rollup(
    periods: list[PeriodStat],
    expected_series: int | str,
    now: datetime,
    params: IdleParams,
    samples_per_period: int = 1,
) -> Utilization:
    """Classify one node from its rollup (see module docstring).

    ``expected_series``: how many accelerators the node has, or why that cannot be known (then
    busy or blind, never idle). ``samples_per_period``: values each accelerator publishes per
    period (period / publish interval), so a covered period holds exactly
    ``expected_series * samples_per_period`` samples.

    >>> from datetime import UTC, datetime, timedelta
    >>> now = datetime(2026, 1, 1, 12, tzinfo=UTC)
    >>> full = [PeriodStat(now - timedelta(minutes=m), 2.0, 0.0, 8) for m in range(31)]
    >>> assess_rollup(full, 8, now, IdleParams()).state
    'idle'
    >>> short = [PeriodStat(p.at, 2.0, 0.0, 7) for p in full]
    >>> assess_rollup(short, 8, now, IdleParams()).reason
    'only 7 of 8 accelerator series present (rollup SampleCount 7 of 8 in 31 periods)'
    """
    start = now - params.window
    thr = params.threshold_percent
    want = expected_series * samples_per_period if isinstance(expected_series, int) else -1
    # Holes: from the window's start to each complete period, and from the newest complete
    # period to a newer one that arrived incomplete (data came, so that is no delay). After the
    # newest complete period the data may still be on its way: max_gap + publish_delay.
    mg, late = params.max_gap, params.max_gap + params.publish_delay
    scan = _scan_rollup(periods, start, now, thr=thr, want=want, mg=mg)
    if scan is None:  # out of time order
        return assess_rollup(
            sorted(periods, key=lambda p: p[0]),
            expected_series,
            now,
            params,
            samples_per_period,
        )
    n_pts, n_cov, first_cov, edge, inner, hole_end, peak, top, low, last_busy, last_short = scan
    trailing = now - edge
    stat = DeviceStat(
        ROLLUP_DEVICE,
        peak if n_pts else None,
        n_cov,
        first_cov,
        edge if n_cov else None,
        max(inner, trailing).total_seconds(),
    )
    stats = [stat]
    if last_short is not None and last_short > edge:
        inner = max(inner, last_short - edge)
        if last_short - edge > mg:
            hole_end = last_short
    # "One idle accelerator": some accelerator stayed below the threshold in every period.
    # Without Minimum read (idle.report_partial_idle off) the caller passes the Maximum in
    # its place, an upper bound: the note then never claims an idle accelerator.
    one_idle = bool(n_pts) and low < thr
    idle_devs = [ROLLUP_DEVICE] if one_idle else []
    if last_busy is not None:
        reason = _busy_reason(top, thr, low if one_idle else None, expected_series)
        until = _idle_from(last_busy, hole_end, params)
        return Utilization("busy", reason, stats, idle_devs, until)
    if isinstance(expected_series, str):
        return Utilization("unknown", expected_series, stats, idle_devs)
    if expected_series < 1 or want < 1:
        return Utilization("unknown", "no accelerator count for this node", stats, idle_devs)
    if not n_pts:
        return Utilization(
            "unknown", "no utilization datapoints for this node in the window", stats
        )
    if inner > mg or trailing > late:
        why = _not_covered_reason(
            [p for p in periods if start <= p[0] <= now],
            expected_series,
            samples_per_period,
            n_cov=n_cov,
            inner=inner,
            trailing=trailing,
            params=params,
        )
        until = _idle_from(None, hole_end, params) if inner > mg else None
        return Utilization("unknown", why, stats, idle_devs, until)
    mins = int(params.window.total_seconds() // 60)
    return Utilization(
        "idle",
        f"all {expected_series} devices below {thr:g}% for {mins} min (peak {peak:.1f}%, "
        f"rollup of {n_cov} complete periods)",
        stats,
        idle_devs,
    )


def parse_exemption(value: str) -> datetime:
    """ISO date (exempt through the end of that UTC day) or ISO datetime."""
    v = value.strip()
    if len(v) == 10:
        d = datetime.fromisoformat(v).date()
        return datetime.combine(d, time.max, tzinfo=UTC)
    dt = datetime.fromisoformat(v.replace("Z", "+00:00"))
    return dt if dt.tzinfo else dt.replace(tzinfo=UTC)


def exemption_status(tags: dict[str, str], now: datetime, params: IdleParams) -> tuple[bool, str]:
    raw = tags.get(params.exempt_tag)
    if raw is None:
        return False, "no exemption tag"
    try:
        until = parse_exemption(raw)
    except ValueError:
        return False, f"exemption tag {params.exempt_tag}={raw!r} is not an ISO date: ignored"
    if until <= now:
        return False, f"exemption expired at {until.isoformat()}"
    if until - now > params.max_exemption:
        return False, (
            f"exemption until {until.date()} exceeds the maximum of "
            f"{params.max_exemption.days} days: ignored"
        )
    return True, f"exempt until {until.isoformat()}"


def protection_status(node: Node, params: IdleParams) -> tuple[bool, str]:
    if node.asg and node.asg in params.protected_asgs:
        return True, f"protected: ASG {node.asg}"
    for key, values in params.protected_tags:
        if node.tags.get(key) in values:
            return True, f"protected: tag {key}={node.tags[key]}"
    return False, "not protected"


def reclaim_action(node: Node) -> Action:
    if node.asg:
        return "scale-in"
    if node.market == "spot":
        return "terminate"
    if node.market == "on-demand" and node.ebs_root:
        return "stop"
    # Capacity Blocks and reservations are prepaid; instance-store roots cannot be stopped.
    return "report-only"


@dataclass(frozen=True)
class Decision:
    instance_id: str
    state: UtilState
    step: Step
    action: Action
    reason: str
    utilization: Utilization
    marked_at: datetime | None = None
    act_after: datetime | None = None


def decide(
    node: Node,
    util: Utilization,
    marked_at: datetime | None,
    now: datetime,
    params: IdleParams,
) -> Decision:
    """What to do with one node this cycle, given its utilization and any earlier mark.

    The act time is ``marked_at + grace`` compared with ``>=``, so a missed cycle delays an
    action, never skips it.
    """
    action = reclaim_action(node)
    exempt, why_exempt = exemption_status(node.tags, now, params)
    protected, why_prot = protection_status(node, params)

    def d(step: Step, reason: str) -> Decision:
        act_after = marked_at + params.grace if marked_at else None
        if step == "mark":
            act_after = now + params.grace
        return Decision(
            node.instance_id, util.state, step, action, reason, util, marked_at, act_after
        )

    if exempt or protected:
        why = why_exempt if exempt else why_prot
        if marked_at:
            return d("unmark", f"{why}; removing idle mark")
        return d("none", f"{util.state}: {util.reason}; {why}")
    suffix = f"; {why_exempt}" if node.tags.get(params.exempt_tag) else ""
    if util.state == "busy":
        if marked_at:
            return d("unmark", f"busy again: {util.reason}")
        return d("none", f"busy: {util.reason}")
    if util.state == "unknown":
        return d("none", f"blind (never reclaimed): {util.reason}")
    if action == "report-only":
        return d("none", f"idle: {util.reason}; {node.market} capacity is reported only{suffix}")
    if marked_at is None:
        return d("mark", f"idle: {util.reason}{suffix}")
    if now >= marked_at + params.grace:
        return d("act", f"idle since {marked_at.isoformat()}: {util.reason}{suffix}")
    return d("wait", f"idle, grace until {(marked_at + params.grace).isoformat()}{suffix}")


def _busy_reason(top: float, thr: float, idlest: float | None, expected_series: int | str) -> str:
    """Why a node is busy; ``idlest``: the highest per-period Minimum when some accelerator
    stayed below the threshold in every period (reported, never reclaimed)."""
    reason = f"busiest accelerator peaked at {top:.1f}% (threshold {thr:g}%)"
    if idlest is not None:
        of = f" of {expected_series}" if isinstance(expected_series, int) else ""
        reason += (
            f"; at least 1{of} devices idle in every period (idlest at most {idlest:.1f}%; "
            "reported, not reclaimed)"
        )
    return reason


def _not_covered_reason(
    pts: list[PeriodStat],
    expected_series: int,
    samples_per_period: int,
    *,
    n_cov: int,
    inner: timedelta,
    trailing: timedelta,
    params: IdleParams,
) -> str:
    """Why a rollup node whose window is not covered (a hole longer than max_gap, or its newest
    complete period too old) is neither idle nor busy: the hole or the staleness, and what the
    rollup's SampleCount says about missing (or extra) series."""
    mg = params.max_gap
    want = expected_series * samples_per_period
    short = [p for p in pts if p.samples < want]
    over = [p for p in pts if p.samples > want]
    note = ""
    if short:
        fewest = int(min(p.samples for p in short))
        if samples_per_period == 1:
            head = f"only {fewest} of {expected_series} accelerator series present"
        else:
            head = f"only {fewest} of {want} samples per period present"
        note = f"{head} (rollup SampleCount {fewest} of {want} in {len(short)} periods)"
    elif over:
        most = int(max(p.samples for p in over))
        note = (
            f"rollup SampleCount {most} where {want} were expected in {len(over)} periods "
            f"(more than one value per accelerator per period)"
        )
    if not n_cov:
        why = note or "no complete period in the window"
    elif inner > mg:
        why = f"partial: a {int(inner.total_seconds())}s gap in the window (max gap "
        why += f"{int(mg.total_seconds())}s)" + (f"; {note}" if note else "")
    else:
        why = (
            f"stale: last complete period {int(trailing.total_seconds())}s ago (max gap "
            f"{int(mg.total_seconds())}s + publish delay "
            f"{int(params.publish_delay.total_seconds())}s)"
        )
    return why


class _RollupScan(NamedTuple):
    """What one pass over a node's rollup periods in the window found (``assess_rollup``)."""

    n_pts: int
    n_cov: int  # complete periods (exactly the expected number of samples)
    first_cov: datetime | None
    edge: datetime  # the newest complete period (or the window's start)
    inner: timedelta  # the longest hole ending at a complete period
    hole_end: datetime | None  # where the newest hole longer than max_gap ends
    peak: float
    top: float  # the highest busy Maximum
    low: float  # the highest per-period Minimum
    last_busy: datetime | None
    last_short: datetime | None  # the newest period that arrived incomplete


def _scan_rollup(
    periods: list[PeriodStat],
    start: datetime,
    now: datetime,
    *,
    thr: float,
    want: int,
    mg: timedelta,
) -> _RollupScan | None:
    """One pass over ``periods`` (this runs for every node every read); None when they are not
    in time order."""
    n_pts = n_cov = 0
    first_cov: datetime | None = None
    edge = start  # the newest complete period (or the window's start)
    inner = timedelta(0)  # the longest hole ending at a complete period
    hole_end: datetime | None = None  # where the newest hole longer than max_gap ends
    peak = top = -math.inf
    low = -math.inf  # the highest per-period Minimum
    last_busy: datetime | None = None
    last_short: datetime | None = None  # the newest period that arrived incomplete
    prev = start
    in_order = True
    for p in periods:
        at = p[0]
        if at < start or at > now:
            continue
        if at < prev:
            in_order = False
        prev = at
        n_pts += 1
        mx = p[1]
        if mx >= thr:
            last_busy = at
            if mx > top:  # noqa: PLR1730 (not max(): a call per period, every node every read)
                top = mx
        if mx > peak:  # noqa: PLR1730 (as above)
            peak = mx
        if p[2] > low:  # noqa: PLR1730 (as above)
            low = p[2]
        if p[3] == want:
            gap = at - edge
            if gap > inner:  # noqa: PLR1730 (as above)
                inner = gap
            if gap > mg:
                hole_end = at
            edge = at
            n_cov += 1
            if first_cov is None:
                first_cov = at
        else:
            last_short = at
    if not in_order:
        return None
    return _RollupScan(
        n_pts, n_cov, first_cov, edge, inner, hole_end, peak, top, low, last_busy, last_short
    )
