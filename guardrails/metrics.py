"""Prometheus metrics, on a registry of their own so tests and the demo can run several."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


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
        # `coreburst burst status` as gauges, set by the burst-reconcile rule each pass.
        from coreburst.burst.status import StatusCollector

        self.burst_status = StatusCollector()
        r.register(self.burst_status)
