"""CloudWatch metric reads: which utilization series exist (``discover_series``) and the cache
of that answer and of each node's last rollup read (``SeriesCache``), GetMetricData in batches,
the per-instance rollups, per-device utilization and publisher heartbeats the idle rule decides
from, and the byte sums the egress rule prices. Clients come in from outside (``Aws.client``);
nothing here runs at import time.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from coreburst.common.catalog import load_catalog
from coreburst.common.telemetry import (
    PUBLISH_INTERVAL_S,
    PUBLISHER_HEARTBEATS,
    ROLLUP_PARTIAL_IDLE_STATS,
    ROLLUP_STATS,
    UTILIZATION_METRICS,
)
from guardrails.idle import PeriodStat
from guardrails.idle_config import IdleConfig, MetricConfig
from guardrails.model import DeviceSeries, Node, Series

MAX_QUERIES_PER_CALL = 500  # GetMetricData limit
MAX_DATAPOINTS_PER_CALL = 100_800


@dataclass(frozen=True)
class SeriesRef:
    key: str  # instance id, or resource id for sums
    device: str
    namespace: str
    metric: str
    dimensions: tuple[tuple[str, str], ...]


def discover_series(cw: Any, metric: MetricConfig, nodes: list[Node], mode: str) -> list[SeriesRef]:
    """The exact dimension sets to query. Real CloudWatch matches dimension sets exactly, so
    ``list-metrics`` keeps only series whose set is {InstanceId, <device dimension>}."""
    wanted = {n.instance_id: n for n in nodes}
    dims = {"InstanceId", metric.device_dimension}
    refs: list[SeriesRef] = []
    if mode == "telemetry":
        cat = load_catalog()
        for n in nodes:
            # every device the node can have (trn2: each physical NeuronCore, as at LNC=1);
            # devices that publish nothing are dropped, and coverage is checked against the
            # count the node is configured for
            for i in range(cat.instance(n.instance_type).accelerator.max_utilization_series()):
                d = (("InstanceId", n.instance_id), (metric.device_dimension, str(i)))
                refs.append(
                    SeriesRef(n.instance_id, str(i), metric.namespace, metric.metric_name, d)
                )
        return refs
    seen: set[tuple[tuple[str, str], ...]] = set()
    pages = cw.get_paginator("list_metrics").paginate(
        Namespace=metric.namespace,
        MetricName=metric.metric_name,
        Dimensions=[{"Name": "InstanceId"}],
        RecentlyActive="PT3H",
    )
    for page in pages:
        for m in page.get("Metrics", []):
            dd = {d["Name"]: d["Value"] for d in m.get("Dimensions", [])}
            if set(dd) != dims or dd["InstanceId"] not in wanted:
                continue
            key = tuple(sorted(dd.items()))
            if key in seen:
                continue
            seen.add(key)
            refs.append(
                SeriesRef(
                    dd["InstanceId"],
                    dd[metric.device_dimension],
                    metric.namespace,
                    metric.metric_name,
                    key,
                )
            )
    return refs


@dataclass
class _Listing:
    at: datetime
    instances: frozenset[str]  # running when the listing was taken
    refs: dict[str, list[SeriesRef]]


@dataclass
class _RollupWindow:
    """The rollup periods already read, per instance, and up to when each was read (a node is
    not read at every idle read: ``guardrails.rules.idle_reclaim``)."""

    until: dict[str, datetime]
    periods: dict[str, list[PeriodStat]]  # per instance, in time order


class SeriesCache:
    """What one daemon keeps between cycles: ListMetrics answers, the rollup window read so far
    (``fetch_rollups`` then reads only the periods since), and when the idle rule last read
    utilization (``idle.every``) with what it found.

    ListMetrics answers are reused between cycles.

    A 1,000-GPU-node fleet has 8,000 series: 16 ListMetrics pages and a fifth of a cycle's CPU
    each time. The set changes when instances launch, so a listing is reused for
    ``idle.series_refresh`` unless an instance that was not running when it was taken shows
    up. A series that appears later for an instance already known (its agent started late) is
    picked up at the next refresh; until then that node lacks series and stays UNKNOWN, never
    idle.
    """

    def __init__(self) -> None:
        self._listings: dict[tuple[str, ...], _Listing] = {}
        self.rollups: dict[tuple[str, ...], _RollupWindow] = {}
        # idle-reclaim's last read (guardrails.rules.idle_reclaim): when, and its decisions
        self.idle_read_at: datetime | None = None
        self.idle_decisions: dict[str, Any] = {}
        # per node: not read before this time (it cannot be idle for the window until then)
        self.idle_next: dict[str, datetime] = {}
        # per node: its state at its own last read ("idle", "busy", "unknown")
        self.idle_states: dict[str, str] = {}

    def idle_due(self, now: datetime, every: timedelta) -> bool:
        last = self.idle_read_at
        return last is None or now < last or now - last >= every

    def get(
        self, key: tuple[str, ...], nodes: list[Node], now: datetime, refresh: timedelta
    ) -> list[SeriesRef] | None:
        got = self._listings.get(key)
        if got is None or now - got.at >= refresh or now < got.at:
            return None
        if any(n.instance_id not in got.instances for n in nodes):
            return None
        return [r for n in nodes for r in got.refs.get(n.instance_id, ())]

    def put(
        self, key: tuple[str, ...], nodes: list[Node], refs: list[SeriesRef], now: datetime
    ) -> None:
        by_node: dict[str, list[SeriesRef]] = {}
        for r in refs:
            by_node.setdefault(r.key, []).append(r)
        self._listings[key] = _Listing(now, frozenset(n.instance_id for n in nodes), by_node)


def get_metric_data(
    cw: Any,
    refs: list[SeriesRef],
    *,
    start: datetime,
    end: datetime,
    period_s: int,
    stat: str,
) -> tuple[dict[int, Series], set[int]]:
    """Query many series in batches of up to 500 (fewer when the datapoint cap binds).

    Returns samples by index into ``refs`` and the indices whose batch failed, so a failed
    chunk turns its nodes blind instead of silently dropping them.
    """
    return query_stats(cw, [(r, stat) for r in refs], start=start, end=end, period_s=period_s)


def query_stats(
    cw: Any,
    items: list[tuple[SeriesRef, str]],
    *,
    start: datetime,
    end: datetime,
    period_s: int,
) -> tuple[dict[int, Series], set[int]]:
    """``get_metric_data`` with a statistic per query: (series, stat) pairs, answers by index.
    Each query is one metric requested (what GetMetricData bills)."""
    points = max(1, int((end - start).total_seconds() // period_s) + 1)
    batch = max(1, min(MAX_QUERIES_PER_CALL, MAX_DATAPOINTS_PER_CALL // points))
    out: dict[int, Series] = {}
    failed: set[int] = set()
    for base in range(0, len(items), batch):
        idx = range(base, min(base + batch, len(items)))
        queries = [
            {
                "Id": f"q{i}",
                "MetricStat": {
                    "Metric": {
                        "Namespace": items[i][0].namespace,
                        "MetricName": items[i][0].metric,
                        "Dimensions": [{"Name": k, "Value": v} for k, v in items[i][0].dimensions],
                    },
                    "Period": period_s,
                    "Stat": items[i][1],
                },
                "ReturnData": True,
            }
            for i in idx
        ]
        try:
            token: str | None = None
            while True:
                kw: dict[str, Any] = {
                    "MetricDataQueries": queries,
                    "StartTime": start,
                    "EndTime": end,
                    "ScanBy": "TimestampAscending",
                }
                if token:
                    kw["NextToken"] = token
                resp = cw.get_metric_data(**kw)
                for r in resp.get("MetricDataResults", []):
                    i = int(r["Id"][1:])
                    s = out.get(i)
                    if s is None:
                        s = out[i] = Series()
                    s.extend(r.get("Timestamps", []), map(float, r.get("Values", [])))
                token = resp.get("NextToken")
                if not token:
                    break
        except Exception:
            failed.update(idx)
    return out, failed


def heartbeat_refs(kind: str, metric: MetricConfig, nodes: list[Node]) -> list[SeriesRef]:
    """One heartbeat series per node whose utilization comes from a publisher of ours (the
    configured metric is ``coreburst.common.telemetry``'s for a family with a heartbeat); none for a
    metric someone else publishes, which has no heartbeat."""
    hb = PUBLISHER_HEARTBEATS.get(kind)  # type: ignore[call-overload]
    ours = UTILIZATION_METRICS.get(kind)  # type: ignore[call-overload]
    if hb is None or ours is None:
        return []
    if (metric.namespace, metric.metric_name, metric.device_dimension) != (
        ours.namespace,
        ours.metric_name,
        ours.device_dimension,
    ):
        return []
    return [
        SeriesRef(
            n.instance_id,
            "heartbeat",
            hb.namespace,
            hb.metric_name,
            (("InstanceId", n.instance_id),),
        )
        for n in nodes
    ]


def heartbeat_problem(
    beats: Series, now: datetime, max_gap: timedelta, publish_delay: timedelta = timedelta(0)
) -> str | None:
    """Why a node's publisher counts as dead (None while it is alive): no heartbeat in the
    window, or none within ``max_gap + publish_delay`` of now (the publisher sends what it
    buffered once per flush, so its newest heartbeat is up to that late). Its node is then
    blind, never idle."""
    past = [t for t in beats.timestamps if t <= now]
    if not past:
        return "publisher dead: no heartbeat in the window (node-side Neuron publisher not running)"
    age = now - max(past)
    if age > max_gap + publish_delay:
        return (
            f"publisher dead: last heartbeat {int(age.total_seconds())}s ago "
            f"(max gap {int(max_gap.total_seconds())}s + publish delay "
            f"{int(publish_delay.total_seconds())}s)"
        )
    return None


def fetch_utilization(
    cw: Any,
    nodes: list[Node],
    cfg: IdleConfig,
    now: datetime,
    cache: SeriesCache | None = None,
) -> tuple[dict[str, DeviceSeries], dict[str, str]]:
    """Per-node device series, plus nodes that could not be queried (id -> why)."""
    series: dict[str, DeviceSeries] = {n.instance_id: {} for n in nodes}
    errors: dict[str, str] = {}
    start = now - cfg.window - cfg.period
    for kind in sorted({n.accelerator_kind for n in nodes}):
        metric = cfg.metrics.get(kind)
        kind_nodes = [n for n in nodes if n.accelerator_kind == kind]
        if metric is None:
            for n in kind_nodes:
                errors[n.instance_id] = f"no metric configured for {kind}"
            continue
        key = (kind_nodes[0].region, metric.namespace, metric.metric_name, metric.device_dimension)
        try:
            refs = cache.get(key, kind_nodes, now, cfg.series_refresh) if cache else None
            if refs is None:
                refs = discover_series(cw, metric, kind_nodes, cfg.series_discovery)
                if cache and cfg.series_discovery == "list-metrics":
                    cache.put(key, kind_nodes, refs, now)
        except Exception as exc:
            for n in kind_nodes:
                errors[n.instance_id] = f"ListMetrics failed: {type(exc).__name__}"
            continue
        beats = heartbeat_refs(kind, metric, kind_nodes)
        util_count = len(refs)
        refs = [*refs, *beats]
        data, failed = get_metric_data(
            cw, refs, start=start, end=now, period_s=int(cfg.period.total_seconds()), stat="Maximum"
        )
        for i, ref in enumerate(refs):
            if i in failed:
                errors[ref.key] = "GetMetricData failed for this node's batch"
                continue
            if i >= util_count:
                why = heartbeat_problem(data.get(i, Series()), now, cfg.max_gap, cfg.publish_delay)
                if why and ref.key not in errors:
                    errors[ref.key] = why
                continue
            pts = data.get(i, Series())
            # telemetry mode queries devices that may not exist: no points = no series
            if pts or cfg.series_discovery == "list-metrics":
                devices = series[ref.key]
                if ref.device in devices:
                    devices[ref.device].extend(pts.timestamps, pts.values)
                else:
                    devices[ref.device] = pts
    return series, errors


def _floor(t: datetime, period_s: int) -> datetime:
    return datetime.fromtimestamp(int(t.timestamp()) // period_s * period_s, t.tzinfo)


def fetch_rollups(
    cw: Any,
    nodes: list[Node],
    cfg: IdleConfig,
    now: datetime,
    cache: SeriesCache | None = None,
    *,
    partial_idle: bool | None = None,
) -> tuple[dict[str, list[PeriodStat]], dict[str, str]]:
    """Each node's per-instance rollup over the window (``PeriodStat`` per period: Maximum and
    SampleCount of every accelerator's values, ``coreburst.common.telemetry.ROLLUP_STATS``, and
    Minimum with ``partial_idle``: ``ROLLUP_PARTIAL_IDLE_STATS``; None: as
    ``idle.report_partial_idle`` says), plus nodes that could not be read (id -> why). Two
    metrics per instance (three with Minimum) whatever its accelerator count; no ListMetrics:
    the dimension set is exactly {InstanceId}. Without Minimum a period's ``minimum`` is its
    Maximum (an upper bound on the idlest accelerator). Publisher heartbeats are not read here
    (``fetch_heartbeats``: only for nodes the rollup leaves blind, and in ``explain``): a live
    publisher's rollup already proves it is alive.

    With ``cache``, the periods already read are kept per node and only the periods since that
    node's last read are asked for again, from ``max_gap + publish_delay + period`` before it
    (the most recent periods may still have been filling, or their datapoints still on their
    way). A node the cache does not know, or whose read failed, is read over the whole window.
    Nodes are read in one batch from the earliest start among them (GetMetricData bills per
    metric, not per datapoint; one start keeps the calls at ceil(metrics / 500)). Without
    ``cache`` everything is read (``explain``, the check before an action).
    """
    partial = cfg.report_partial_idle if partial_idle is None else partial_idle
    stats = ROLLUP_PARTIAL_IDLE_STATS if partial else ROLLUP_STATS
    period_s = int(cfg.period.total_seconds())
    win_start = _floor(now - cfg.window - cfg.period, period_s)
    settle = cfg.max_gap + cfg.publish_delay + cfg.period
    out: dict[str, list[PeriodStat]] = {}
    errors: dict[str, str] = {}
    group: list[tuple[Node, SeriesRef, _RollupWindow]] = []
    windows: dict[tuple[str, ...], _RollupWindow] = {}
    start = now
    for kind in sorted({n.accelerator_kind for n in nodes}):
        metric = cfg.metrics.get(kind)
        kind_nodes = [n for n in nodes if n.accelerator_kind == kind]
        if metric is None:
            for n in kind_nodes:
                errors[n.instance_id] = f"no metric configured for {kind}"
            continue
        key = (
            kind_nodes[0].region,
            metric.namespace,
            metric.metric_name,
            str(period_s),
            ",".join(stats),
        )
        w = cache.rollups.get(key) if cache else None
        if w is None:
            w = _RollupWindow({}, {})
        windows[key] = w
        for n in kind_nodes:
            ref = SeriesRef(
                n.instance_id,
                "rollup",
                metric.namespace,
                metric.metric_name,
                (("InstanceId", n.instance_id),),
            )
            until = w.until.get(n.instance_id)
            since = win_start
            if until is not None and win_start < until <= now:
                since = max(win_start, _floor(until - settle, period_s))
            start = min(start, since)
            group.append((n, ref, w))
    k = len(stats)
    items = [(ref, stat) for _, ref, _ in group for stat in stats]
    data, failed = (
        query_stats(cw, items, start=start, end=now, period_s=period_s) if items else ({}, set())
    )
    has_min = "Minimum" in stats
    assert stats[0] == "Maximum" and stats[-1] == "SampleCount"
    for j, (n, _, w) in enumerate(group):
        iid = n.instance_id
        if failed and any(j * k + o in failed for o in range(k)):
            errors[iid] = "GetMetricData failed for this node's batch"
            w.until.pop(iid, None)
            w.periods.pop(iid, None)
            continue
        # ROLLUP_STATS is (Maximum, SampleCount); ROLLUP_PARTIAL_IDLE_STATS adds Minimum between
        mx = data.get(j * k) or Series()
        sc = data.get(j * k + k - 1) or Series()
        mn = (data.get(j * k + 1) or Series()) if has_min else mx
        if mx.timestamps == mn.timestamps == sc.timestamps:
            # the usual answer: one datapoint per period in each
            fresh = list(map(PeriodStat, mx.timestamps, mx.values, mn.values, sc.values))
        else:
            mins = dict(zip(mn.timestamps, mn.values, strict=True))
            counts = dict(zip(sc.timestamps, sc.values, strict=True))
            # a period with a Maximum but no SampleCount still proves busy; as
            # coverage it counts as zero samples (a hole)
            fresh = [
                PeriodStat(t, v, mins.get(t, v), counts.get(t, 0.0))
                for t, v in sorted(zip(mx.timestamps, mx.values, strict=True))
            ]
        # periods read before and not asked for again, then this read's (ascending)
        had = w.periods.get(iid)
        out[iid] = [p for p in had if win_start <= p[0] < start] + fresh if had else fresh
        if cache is not None:
            w.periods[iid], w.until[iid] = out[iid], now
    if cache is not None:
        for wkey, w in windows.items():
            # nodes not read this time keep what was read; a node gone or read too long ago
            # for anything of it to be reused is dropped
            for iid in [i for i, u in w.until.items() if u <= win_start]:
                del w.until[iid], w.periods[iid]
            cache.rollups[wkey] = w
    return out, errors


def fetch_heartbeats(
    cw: Any, nodes: list[Node], cfg: IdleConfig, now: datetime
) -> dict[str, str | None]:
    """Why each node's publisher counts as dead (None: alive), for the nodes whose metric
    comes from a publisher of ours with a heartbeat (``heartbeat_refs``); other nodes are left
    out. One metric per node over the idle window."""
    items: list[tuple[SeriesRef, str]] = []
    for kind in sorted({n.accelerator_kind for n in nodes}):
        metric = cfg.metrics.get(kind)
        if metric is not None:
            kind_nodes = [n for n in nodes if n.accelerator_kind == kind]
            items += [(r, "Maximum") for r in heartbeat_refs(kind, metric, kind_nodes)]
    if not items:
        return {}
    period_s = int(cfg.period.total_seconds())
    start = _floor(now - cfg.window - cfg.period, period_s)
    data, failed = query_stats(cw, items, start=start, end=now, period_s=period_s)
    out: dict[str, str | None] = {}
    for i, (ref, _) in enumerate(items):
        if i in failed:
            out[ref.key] = "GetMetricData failed for the publisher heartbeat"
        else:
            out[ref.key] = heartbeat_problem(
                data.get(i, Series()), now, cfg.max_gap, cfg.publish_delay
            )
    return out


def samples_per_period(cfg: IdleConfig) -> int:
    """Values each accelerator publishes per rollup period (``PUBLISH_INTERVAL_S`` apart)."""
    return max(1, int(cfg.period.total_seconds()) // PUBLISH_INTERVAL_S)


# NetworkOut's period under EC2 basic monitoring; detailed monitoring's 60 s datapoints fall
# inside it. Byte reads start and end on these boundaries, so each datapoint is in one read.
BYTES_PERIOD_S = 300


def sum_bytes(
    cw: Any,
    namespace: str,
    metric: str,
    dim: str,
    *,
    ids: Iterable[str],
    start: datetime,
    end: datetime,
) -> tuple[dict[str, float], bool]:
    """Bytes per resource in [start, end): the Sum of every ``BYTES_PERIOD_S`` period in it
    (CloudWatch stamps a datapoint at its period's start and counts a period when
    StartTime <= its start < EndTime). ``start`` and ``end`` must lie on period boundaries
    (``guardrails.egress.read_span``), so consecutive reads neither miss nor repeat a byte.
    Returns the totals and whether any batch failed (its resources are then missing)."""
    if int(start.timestamp()) % BYTES_PERIOD_S or int(end.timestamp()) % BYTES_PERIOD_S:
        raise ValueError(f"byte reads must start and end on {BYTES_PERIOD_S} s boundaries")
    refs = [SeriesRef(i, "", namespace, metric, ((dim, i),)) for i in ids]
    data, failed = get_metric_data(
        cw, refs, start=start, end=end, period_s=BYTES_PERIOD_S, stat="Sum"
    )
    return {refs[i].key: sum(s.values) for i, s in data.items()}, bool(failed)
