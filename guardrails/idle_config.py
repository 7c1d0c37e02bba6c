"""The idle-reclaim rule's config sections, ``idle`` (what counts as idle, how utilization is
read) and ``reclaim`` (what happens to an idle node): in a module of their own beside the rule
(``guardrails.rules.idle_reclaim``), because the CloudWatch reads
(``guardrails.adapters.cloudwatch``), the shared ``rules.base.idle_params``, ``explain`` and the
sandbox demo read them too, and none of those may import a rule module.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, model_validator

from coreburst.common.telemetry import AGENT_FLUSH_INTERVAL_S, UTILIZATION_METRICS, AcceleratorKind
from guardrails.configtypes import Between, StrictModel, format_duration


class MetricConfig(StrictModel):
    """Where one accelerator family's per-device utilization is read. How many series a node
    must have is not configurable here: it comes from the catalog (one per GPU; one per logical
    NeuronCore at the node's LNC, see ``idle.neuron_lnc``), so a node is idle only when every
    accelerator it has is covered."""

    namespace: str
    """The CloudWatch namespace."""
    metric_name: str
    """The metric's name."""
    device_dimension: str
    """The dimension that names the device (beside InstanceId)."""
    rollup: bool = True
    """Decide from the per-instance rollup (the same metric under InstanceId alone: Maximum and
    SampleCount per period, plus Minimum with ``idle.report_partial_idle``;
    coreburst.common.telemetry publishes it): 2 metrics per instance per read instead of one per
    accelerator. false: read every per-device series (a metric someone else publishes without
    that rollup). ``explain`` always shows per-device series."""

    @model_validator(mode="before")
    @classmethod
    def _no_expect_series(cls, data: Any) -> Any:
        if isinstance(data, dict) and "expect_series" in data:
            raise ValueError(
                "expect_series is no longer accepted: the expected number of series comes from "
                "the catalog (one per GPU, one per logical NeuronCore at idle.neuron_lnc or the "
                "node's coreburst:neuron-lnc tag); remove it"
            )
        return data


def _default_metrics() -> dict[AcceleratorKind, MetricConfig]:
    return {
        kind: MetricConfig(
            namespace=m.namespace, metric_name=m.metric_name, device_dimension=m.device_dimension
        )
        for kind, m in UTILIZATION_METRICS.items()
    }


def _merge_metrics(value: Any) -> Any:
    """``idle.metrics`` merges into the defaults, family by family and key by key: overriding
    ``neuron`` keeps ``nvidia``, and ``neuron: {metric_name: x}`` keeps the namespace and device
    dimension. ``<family>: null`` removes a family (refused while a watched type needs it)."""
    if value is None:
        return _default_metrics()
    if not isinstance(value, dict):
        return value  # pydantic says what is wrong with it
    out: dict[Any, Any] = {k: m.model_dump() for k, m in _default_metrics().items()}
    for kind, m in value.items():
        if m is None:
            out.pop(kind, None)
        elif isinstance(m, dict) and isinstance(out.get(kind), dict):
            out[kind] = {**out[kind], **m}
        else:
            out[kind] = m
    return out


class IdleConfig(StrictModel):
    """``idle``: when a node's accelerators count as idle, from CloudWatch utilization."""

    threshold_percent: float = Field(default=5.0, gt=0, le=100)
    """Every accelerator of a node below this utilization (percent) for ``window``: idle."""
    window: Annotated[timedelta, Between("5m", "7d")] = timedelta(minutes=30)
    """How long a node must stay below the threshold to count as idle."""
    period: Annotated[timedelta, Between("1m", "1h")] = timedelta(minutes=1)
    """CloudWatch period of the datapoints read; standard-resolution metrics need whole minutes
    (GetMetricData's Period: a multiple of 60)."""
    max_gap: Annotated[timedelta, Between("1m", "1d")] = timedelta(minutes=5)
    """Longest tolerated hole in a series, including at the window's start and before "now"; at
    least one period and at most the window."""
    series_discovery: Literal["list-metrics", "telemetry"] = "list-metrics"
    """How the utilization series are found: list-metrics (ListMetrics, exact dimension sets) or
    telemetry (every device the catalog says the type has, without ListMetrics)."""
    series_refresh: Annotated[timedelta, Between("1m", "1d")] = timedelta(minutes=10)
    """How long a ListMetrics answer is reused; an instance that was not running when it was taken
    triggers a fresh one at once."""
    every: Annotated[timedelta, Between("1m", "1d")] = timedelta(minutes=5)
    """How often utilization is read and nodes are assessed, apart from the daemon's cycle
    (``interval``, which spend uses): GetMetricData bills per metric requested, so idle at 5 min
    costs a fifth of idle at 1 min. A cycle in between reads nothing and acts on nothing, except
    that a node due for its reclaim is read fresh at once. At a read, only the nodes that could
    be idle by then are read: one whose last read showed a busy period at t cannot be idle for
    ``window`` before t + window, so it is next read at the first read after that (a busy node
    about every window - publish_delay - period, rounded up to ``every``: 25 min at the
    defaults); a node marked idle is next read at its reclaim time. A node never read, with no
    data or whose read failed is read at every read."""
    publish_delay: Annotated[timedelta, Between("1m", "1h")] = timedelta(
        seconds=AGENT_FLUSH_INTERVAL_S
    )
    """How late the nodes' newest datapoints may arrive: the CloudWatch agent flushes every
    AGENT_FLUSH_INTERVAL_S (5 min) and the Neuron publisher as often. A node may go this much
    longer than ``max_gap`` without a datapoint at the end of the window (only there: a hole
    inside the window is still held to ``max_gap``) and still be idle. The cost: the newest <= 5
    min of activity is not visible yet when a node is marked; the act step reads the whole window
    again before it acts, after the grace period."""
    report_partial_idle: bool = False
    """Also read each rollup's Minimum (a third metric per node and read) to report "at least 1 of N
    devices idle in every period" on busy nodes. Off: a busy node is just busy. ``explain`` reads
    it whatever this says."""
    metrics: Annotated[dict[AcceleratorKind, MetricConfig], BeforeValidator(_merge_metrics)] = (
        Field(default_factory=_default_metrics)
    )
    """Where each accelerator family's utilization is read (nvidia, neuron); merges into the
    defaults key by key."""
    neuron_lnc: int | None = Field(default=None, ge=1)
    """Logical NeuronCore size (LNC) of the Trainium nodes, fleet-wide; None = the catalog's default
    for each type (trn2: 2, so 64 series per trn2.48xlarge). A node's ``coreburst:neuron-lnc``
    tag overrides it."""

    @model_validator(mode="after")
    def _consistent(self) -> IdleConfig:
        if self.period.total_seconds() % 60:
            raise ValueError(f"period {format_duration(self.period)}: use whole minutes")
        if not self.period <= self.max_gap <= self.window:
            raise ValueError(
                f"max_gap ({format_duration(self.max_gap)}) must be at least period "
                f"({format_duration(self.period)}) and at most window "
                f"({format_duration(self.window)})"
            )
        return self


class TagSelector(StrictModel):
    key: str
    """The tag key."""
    values: list[str] = Field(min_length=1)
    """The tag values that protect."""


class ProtectedConfig(StrictModel):
    """``reclaim.protected``: nodes never reclaimed, by Auto Scaling group or by tag."""

    asg_names: list[str] = []
    """Auto Scaling groups whose instances are never reclaimed."""
    tag_selectors: list[TagSelector] = []
    """Instances carrying one of these tags with one of its values are never reclaimed."""


class ReclaimConfig(StrictModel):
    """``reclaim``: what happens to an idle node: marked, its owner told, then stopped or scaled in
    after the grace."""

    enabled: bool = True
    """Act on idle nodes (false: report them only)."""
    grace: Annotated[timedelta, Between("5m", "30d")] = timedelta(hours=1)
    """Time between marking a node idle (and telling its owner) and acting on it."""
    mark_tag: str = "coreburst:idle-since"
    """The tag that records when a node was marked idle."""
    exempt_tag: str = "coreburst:exempt-until"
    """A node tagged with this and a date (YYYY-MM-DD) is left alone until then."""
    max_exemption: Annotated[timedelta, Between("1h", "365d")] = timedelta(days=30)
    """An exemption dated further ahead than this is ignored (the message says so)."""
    owner_tags: list[str] = ["owner", "team", "project", "cost-center"]
    """The tags that name a node's owner, in order (the first present wins): whom messages
    address."""
    protected: ProtectedConfig = ProtectedConfig()
    """Nodes never reclaimed."""
