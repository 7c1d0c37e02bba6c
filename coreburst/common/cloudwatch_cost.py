"""What the guardrails' own CloudWatch use costs a day, term by term.

Three terms, each priced from the catalog's dated ``cloudwatch`` figures
(coreburst/common/data/catalog.yaml; the AWS CloudWatch pricing page, paid tier):

- **custom metrics**: every series the nodes publish (one per metric name + dimension set),
  per metric-month on the tiered price over the account's custom metrics, prorated by the hour;
  counted from the very agent config and publisher command line the launch template installs
  (``coreburst.common.telemetry``), so the count cannot drift from what is shipped;
- **PutMetricData**: requests the nodes make to publish them (the CloudWatch agent flushes once
  per ``force_flush_interval``, 5 min; the Neuron publisher collects once per ``--interval``
  and sends what it buffered once per ``--flush-interval``, 5 min), per request;
- **GetMetricData**: metrics the guardrail daemon requests at its cadence, per metric
  requested: the idle rule reads a node's rollup (``ROLLUP_STATS``, 2 metrics; 3 with
  ``idle.report_partial_idle``) only when it could be idle by then: a busy node is read about
  every ``window - publish_delay - period``, rounded up to ``idle.every`` (25 min at the
  defaults), as the busy minute it was last read with leaves the window; the egress rule reads
  each node's NetworkOut every ``egress.every``. The figure assumes a fleet whose nodes are
  busy, its idle nodes reclaimed (a node marked idle is read again at its reclaim time); a
  blind node (no data) is read at every ``idle.every`` and costs more.

The tiered term assumes the fleet's metrics are the account's only custom metrics unless
``existing_metrics`` says how many others there are (the marginal price is then lower). The free
tier (10 metrics, 1 million API requests a month) is left out: the figure never understates.
A price or instance type the catalog lacks is an error, never a zero.

    >>> from coreburst.common.catalog import load_catalog
    >>> b = bill([FleetGroup("p5.48xlarge", 1000)], load_catalog(), Cadence(300, 900))
    >>> b.custom_metrics, round(b.put_requests_day), round(b.get_metrics_day)
    (1000, 288000, 211200)
    >>> [f"{t} ${usd:.2f}" for t, _, usd in b.lines()]
    ['custom metrics $9.86', 'PutMetricData $2.88', 'GetMetricData $2.11', 'all-in $14.86']
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from coreburst.common.catalog import Catalog, CatalogError, CloudWatchPrices, CustomMetricTier
from coreburst.common.telemetry import (
    AGENT_FLUSH_INTERVAL_S,
    NEURON_FLUSH_INTERVAL_S,
    PUBLISH_INTERVAL_S,
    PUT_MAX_DATUMS,
    ROLLUP_PARTIAL_IDLE_STATS,
    ROLLUP_STATS,
    UTILIZATION_METRICS,
    AcceleratorKind,
    Series,
    agent_config_series,
    cloudwatch_agent_config,
    neuron_publisher_series,
)

SECONDS_PER_DAY = 86_400


@dataclass(frozen=True)
class FleetGroup:
    """``nodes`` instances of one type, publishing per-device series or not
    (``perDeviceMetrics``)."""

    instance_type: str
    nodes: int
    per_device: bool = False


@dataclass(frozen=True)
class Cadence:
    """How often the daemon reads and the nodes publish, in seconds. ``egress_every_s`` None:
    the egress rule is off (no NetworkOut reads). The defaults are the daemon's
    (guardrails/config.py ``idle``) and what the launch template installs."""

    idle_every_s: float
    egress_every_s: float | None
    window_s: float = 1800  # idle.window
    publish_delay_s: float = AGENT_FLUSH_INTERVAL_S  # idle.publish_delay
    period_s: float = 60  # idle.period
    partial_idle: bool = False  # idle.report_partial_idle: Minimum read too
    flush_interval_s: float = AGENT_FLUSH_INTERVAL_S
    neuron_interval_s: float = PUBLISH_INTERVAL_S
    neuron_flush_interval_s: float = NEURON_FLUSH_INTERVAL_S

    @property
    def rollup_stats(self) -> int:
        return len(ROLLUP_PARTIAL_IDLE_STATS if self.partial_idle else ROLLUP_STATS)

    @property
    def busy_read_every_s(self) -> float:
        """How often a busy node's rollup is read: when the busy minute it was last read with
        (up to ``publish_delay + period`` old then) has left the window, at the next
        ``idle.every`` step; never more often than every ``idle.every``.

        >>> Cadence(300, 900).busy_read_every_s  # 30 - 5 - 1 = 24 min, rounded up to 25
        1500.0
        """
        wait = self.window_s - self.publish_delay_s - self.period_s
        return float(max(1, math.ceil(wait / self.idle_every_s)) * self.idle_every_s)


@dataclass(frozen=True)
class CloudWatchBill:
    nodes: int
    custom_metrics: int
    custom_usd_day: float
    put_requests_day: float
    put_usd_day: float
    get_metrics_day: float
    get_usd_day: float
    # Whether any price used is marked unverified in the catalog, and the figures' provenance.
    unverified: bool
    source: str
    # GetMetricData's two parts: the idle rule's rollup reads and the egress rule's NetworkOut
    get_idle_metrics_day: float = 0.0
    get_egress_metrics_day: float = 0.0

    @property
    def total_usd_day(self) -> float:
        return self.custom_usd_day + self.put_usd_day + self.get_usd_day

    def lines(self) -> list[tuple[str, str, float]]:
        """(term, quantity, $/day) per term, then the all-in total."""
        return [
            ("custom metrics", f"{self.custom_metrics:,} metrics", self.custom_usd_day),
            ("PutMetricData", f"{self.put_requests_day:,.0f} requests/day", self.put_usd_day),
            (
                "GetMetricData",
                f"{self.get_metrics_day:,.0f} metrics/day (idle {self.get_idle_metrics_day:,.0f}"
                f", egress {self.get_egress_metrics_day:,.0f})",
                self.get_usd_day,
            ),
            ("all-in", f"{self.nodes:,} nodes", self.total_usd_day),
        ]


def _devices(cat: Catalog, instance_type: str) -> tuple[AcceleratorKind, int]:
    acc = cat.instance(instance_type).accelerator
    return acc.kind, acc.utilization_series()


def node_series(kind: AcceleratorKind, per_device: bool = False) -> list[Series]:
    """The series one node of ``kind`` publishes, read from what the launch template installs:
    the CloudWatch agent config (NVIDIA) or the Neuron publisher's series (Trainium)."""
    if kind == "nvidia":
        return agent_config_series(cloudwatch_agent_config(per_device=per_device))
    return neuron_publisher_series(per_device)


def _per_device(s: Series, kind: AcceleratorKind) -> bool:
    return UTILIZATION_METRICS[kind].device_dimension in s.dimension_names


def custom_metrics_per_node(kind: AcceleratorKind, devices: int, per_device: bool = False) -> int:
    """Custom metrics one node adds: one per series, one per device for per-device series.

    >>> custom_metrics_per_node("nvidia", 8), custom_metrics_per_node("nvidia", 8, True)
    (1, 9)
    >>> custom_metrics_per_node("neuron", 64), custom_metrics_per_node("neuron", 64, True)
    (2, 66)
    """
    return sum(devices if _per_device(s, kind) else 1 for s in node_series(kind, per_device))


def put_requests_per_node_day(
    kind: AcceleratorKind, devices: int, cadence: Cadence, per_device: bool = False
) -> float:
    """PutMetricData requests one node makes a day. The agent sends each GPU's value once per
    collection under every published dimension set (one datum each; CloudWatch aggregates a
    set's values per period) and flushes once per ``flush_interval_s``, up to 1,000 datums a
    request. The Neuron publisher collects one datum per series (a statistic set for the rollup)
    once per ``neuron_interval_s`` and sends them once per ``neuron_flush_interval_s``, one
    request per namespace and 1,000 datums.

    >>> c = Cadence(300, 900)
    >>> put_requests_per_node_day("nvidia", 8, c), put_requests_per_node_day("neuron", 64, c)
    (288.0, 288.0)
    """
    series = node_series(kind, per_device)
    if kind == "nvidia":
        per_collection = len(series) * devices
        datums = per_collection * max(1.0, cadence.flush_interval_s / PUBLISH_INTERVAL_S)
        flushes = SECONDS_PER_DAY / cadence.flush_interval_s
        return flushes * math.ceil(datums / PUT_MAX_DATUMS)
    by_ns: dict[str, int] = {}
    for s in series:
        by_ns[s.namespace] = by_ns.get(s.namespace, 0) + (devices if _per_device(s, kind) else 1)
    flush = max(cadence.neuron_flush_interval_s, cadence.neuron_interval_s)
    collections = flush / cadence.neuron_interval_s
    calls = sum(math.ceil(n * collections / PUT_MAX_DATUMS) for n in by_ns.values())
    return SECONDS_PER_DAY / flush * calls


def get_metrics_per_node_day(cadence: Cadence) -> float:
    """Metrics the daemon requests a day per node: the rollup's statistics every busy node's
    read (``Cadence.busy_read_every_s``) and NetworkOut every egress read. A trn2 heartbeat is
    read only for a node the rollup leaves blind (none in a healthy fleet), so it is not
    counted.

    >>> get_metrics_per_node_day(Cadence(300, 900))  # 2 x 57.6 reads + 96
    211.2
    >>> get_metrics_per_node_day(Cadence(300, 900, partial_idle=True))  # 3 x 57.6 + 96
    268.8
    """
    reads = cadence.rollup_stats * SECONDS_PER_DAY / cadence.busy_read_every_s
    if cadence.egress_every_s is not None:
        reads += SECONDS_PER_DAY / cadence.egress_every_s
    return round(reads, 6)


def tiered_usd_per_month(metrics: int, tiers: list[CustomMetricTier], existing: int = 0) -> float:
    """Custom metrics' monthly price for ``metrics`` more metrics on top of ``existing`` ones,
    each tier's price applying to the metrics that fall in it.

    >>> from coreburst.common.catalog import load_catalog
    >>> t = load_catalog().cloudwatch.custom_metric_tiers
    >>> round(tiered_usd_per_month(36_000, t), 2)  # 10,000 x 0.30 + 26,000 x 0.10
    5600.0
    """
    if metrics < 0 or existing < 0:
        raise ValueError("metric counts cannot be negative")

    def cumulative(n: int) -> float:
        usd, low = 0.0, 0
        for t in tiers:
            high = n if t.up_to_metrics is None else min(n, t.up_to_metrics)
            if high > low:
                usd += (high - low) * t.usd_per_metric_month.value
            if t.up_to_metrics is None or n <= t.up_to_metrics:
                return usd
            low = t.up_to_metrics
        raise CatalogError("cloudwatch.custom_metric_tiers: the last tier must have no bound")

    return cumulative(existing + metrics) - cumulative(existing)


def prices(cat: Catalog) -> CloudWatchPrices:
    if cat.cloudwatch is None:
        raise CatalogError(
            "the catalog has no cloudwatch prices (cloudwatch: in "
            "coreburst/common/data/catalog.yaml); the guardrails' CloudWatch bill is unknown"
        )
    return cat.cloudwatch


def bill(
    groups: list[FleetGroup], cat: Catalog, cadence: Cadence, existing_metrics: int = 0
) -> CloudWatchBill:
    """The fleet's CloudWatch $/day, term by term (see the module docstring)."""
    p = prices(cat)
    nodes = metrics = 0
    put = get = get_egress = 0.0
    egress_per_node = (
        SECONDS_PER_DAY / cadence.egress_every_s if cadence.egress_every_s is not None else 0.0
    )
    for g in groups:
        if g.nodes < 0:
            raise ValueError(f"{g.instance_type}: a negative node count ({g.nodes})")
        kind, devices = _devices(cat, g.instance_type)
        nodes += g.nodes
        metrics += g.nodes * custom_metrics_per_node(kind, devices, g.per_device)
        put += g.nodes * put_requests_per_node_day(kind, devices, cadence, g.per_device)
        get += g.nodes * get_metrics_per_node_day(cadence)
        get_egress += g.nodes * egress_per_node
    month = tiered_usd_per_month(metrics, p.custom_metric_tiers, existing_metrics)
    figures = [
        p.api_usd_per_1000_requests,
        p.get_metric_data_usd_per_1000_metrics,
        *(t.usd_per_metric_month for t in p.custom_metric_tiers),
    ]
    return CloudWatchBill(
        nodes=nodes,
        custom_metrics=metrics,
        custom_usd_day=month * 24 / cat.hours_per_month,
        put_requests_day=put,
        put_usd_day=put * p.api_usd_per_1000_requests.value / 1000,
        get_metrics_day=get,
        get_usd_day=get * p.get_metric_data_usd_per_1000_metrics.value / 1000,
        unverified=any(f.unverified for f in figures),
        source=", ".join(sorted({f"{f.source} {f.as_of}" for f in figures})),
        get_idle_metrics_day=get - get_egress,
        get_egress_metrics_day=get_egress,
    )
