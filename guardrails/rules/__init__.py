"""The guardrail rule registry.

Each rule registers under a kebab-case name with its typed params model (the config section it
reads), a description, and the IAM actions it needs. A later issue generates the daemon's IAM
policy from these declarations, and ``tests/unit/guardrails/test_rules.py`` walks the registry.

    >>> from guardrails.rules import REGISTRY, iam_actions
    >>> sorted(REGISTRY)
    ['egress-spike', 'idle-reclaim', 'inventory', 'spend-limit']
    >>> "ec2:StopInstances" in REGISTRY["idle-reclaim"].iam_actions
    True
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from guardrails.config import (
    EgressConfig,
    GuardrailsConfig,
    IdleConfig,
    ReclaimConfig,
    SpendConfig,
)

if TYPE_CHECKING:
    from guardrails.daemon import Daemon


@dataclass(frozen=True)
class Rule:
    name: str
    description: str
    params: type[BaseModel]
    iam_actions: tuple[str, ...]
    # Which config section holds the params, and whether the rule is switched on.
    section: Callable[[GuardrailsConfig], BaseModel]
    enabled: Callable[[GuardrailsConfig], bool]
    run: Callable[[Daemon], None] | None = None
    example: str = ""


REGISTRY: dict[str, Rule] = {}


def register(rule: Rule) -> Rule:
    if rule.name in REGISTRY:
        raise ValueError(f"rule {rule.name!r} registered twice")
    REGISTRY[rule.name] = rule
    return rule


def iam_actions() -> list[str]:
    """Every IAM action any registered rule needs, sorted (the daemon's policy)."""
    return sorted({a for r in REGISTRY.values() for a in r.iam_actions})


def _run(method: str) -> Callable[[Daemon], None]:
    def call(d: Daemon) -> None:
        fn: Any = getattr(d, method)
        fn()

    return call


register(
    Rule(
        name="inventory",
        description=(
            "List running accelerated instances per region, with live spot prices "
            "(always on, whatever `rules` lists)."
        ),
        params=GuardrailsConfig,
        iam_actions=("ec2:DescribeInstances", "ec2:DescribeSpotPriceHistory"),
        section=lambda c: c,
        enabled=lambda c: True,
        example="regions: [us-east-1, us-east-2]",
    )
)
register(
    Rule(
        name="idle-reclaim",
        description=(
            "Mark nodes whose every accelerator stayed below the threshold for the window, "
            "warn the owner, and after the grace period stop, terminate or scale them in."
        ),
        params=IdleConfig,
        iam_actions=(
            "cloudwatch:ListMetrics",
            "cloudwatch:GetMetricData",
            "ec2:CreateTags",
            "ec2:DeleteTags",
            "ec2:StopInstances",
            "ec2:TerminateInstances",
            "autoscaling:TerminateInstanceInAutoScalingGroup",
            "ec2:DescribeSpotPriceHistory",
        ),
        section=lambda c: c.idle,
        enabled=lambda c: c.reclaim.enabled,
        run=_run("rule_idle"),
        example="idle: {threshold_percent: 5, window: 30m}\nreclaim: {grace: 1h}",
    )
)
register(
    Rule(
        name="spend-limit",
        description=(
            "Live burn rate plus Cost Explorer actuals per scope; alert at thresholds of the "
            "daily/monthly limit and optionally enforce at the hard limit."
        ),
        params=SpendConfig,
        iam_actions=(
            "ec2:DescribeSpotPriceHistory",
            "fsx:DescribeFileSystems",
            "directconnect:DescribeConnections",
            "ce:GetCostAndUsage",
            "autoscaling:DescribeAutoScalingGroups",
            "autoscaling:UpdateAutoScalingGroup",
            "ec2:TerminateInstances",
        ),
        section=lambda c: c.spend,
        enabled=lambda c: c.spend.enabled,
        run=_run("rule_spend"),
        example="spend: {scopes: [{name: account, daily_limit_usd: 5000}]}",
    )
)
register(
    Rule(
        name="egress-spike",
        description=(
            "Project daily egress $ from instance NetworkOut and NAT BytesOutToDestination; "
            "alert over a threshold or a jump against the trailing baseline."
        ),
        params=EgressConfig,
        iam_actions=(
            "cloudwatch:GetMetricData",
            "ec2:DescribeNatGateways",
            "ce:GetCostAndUsage",
        ),
        section=lambda c: c.egress,
        enabled=lambda c: c.egress.enabled,
        run=_run("rule_egress"),
        example="egress: {daily_threshold_usd: 500, spike_factor: 3}",
    )
)

# ReclaimConfig rides along with idle-reclaim; exported so the IAM generator can document it.
PARAM_SECTIONS: dict[str, type[BaseModel]] = {"reclaim": ReclaimConfig}
