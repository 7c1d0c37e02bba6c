"""Prometheus metrics, on a registry of their own so tests and the demo can run several."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector


class Snapshot(Collector):
    """Metric families computed elsewhere, exposed as last set: nothing until the first
    ``set`` (families whose labels come and go with what they describe, which a Gauge with
    fixed children would keep after they are gone)."""

    def __init__(self) -> None:
        self.families: list[Metric] = []

    def set(self, families: Iterable[Metric]) -> None:
        self.families = list(families)

    def collect(self) -> Iterator[Metric]:
        return iter(self.families)

    def describe(self) -> Iterator[Metric]:
        return iter(())  # the names vary with what was set: collected at scrape time


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.cycle_seconds = Histogram(
            "coreburst_guardrails_cycle_seconds", "Wall time of one cycle", registry=r
        )
        self.cycle_failures = Counter(
            "coreburst_guardrails_cycle_failures_total", "Cycles that failed", registry=r
        )
        self.api_calls = Counter(
            "coreburst_guardrails_api_calls_total", "AWS API calls", ["operation"], registry=r
        )
        self.nodes = Gauge(
            "coreburst_guardrails_nodes", "Nodes by utilization state", ["state"], registry=r
        )
        self.burn = Gauge(
            "coreburst_guardrails_burn_usd_per_hour", "Live burn rate", ["scope"], registry=r
        )
        self.actions = Counter(
            "coreburst_guardrails_actions_total", "Actions", ["kind", "outcome"], registry=r
        )
        self.outbox_depth = Gauge(
            "coreburst_guardrails_outbox_depth", "Alerts waiting for delivery", registry=r
        )
        self.slack_rejected = Counter(
            "coreburst_slack_rejected",  # exposed as coreburst_slack_rejected_total
            "Slack webhook posts refused with a 4xx other than 408/429; the alert is kept in "
            "the outbox as failed",
            ["status"],
            registry=r,
        )
        self.egress = Gauge(
            "coreburst_guardrails_egress_projected_usd_per_day", "Projected egress", registry=r
        )
        self.idle_gpus = Gauge(
            "coreburst_guardrails_idle_gpus",
            "GPUs of running core jobs below the idle threshold, by job owner (core-idle)",
            ["owner"],
            registry=r,
        )
        # `coreburst burst status` as gauges (coreburst/burst/status.py families), set by the
        # burst-reconcile rule each pass.
        self.burst_status = Snapshot()
        r.register(self.burst_status)
