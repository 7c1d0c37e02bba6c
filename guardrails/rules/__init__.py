"""The guardrail rule registry, and the narrow context a rule runs in.

Each rule is one module here (``inventory``, ``idle_reclaim``, ``spend_limit``,
``egress_spike``, ``budget_relay``, ``spot_interruption``, ``burst_health``,
``burst_reconcile``, ``core_idle``) that registers one
``Rule``: a kebab-case name, a description, its typed params model (the config section it
reads), the IAM actions it calls, whether the config switches it on, and ``run(ctx)``. One
registry drives what the daemon runs (``guardrails.daemon``, in registry order), what
config holds and ``rules:`` may select (``guardrails.configfile``: each rule's ``sections``)
and what the deployed role
allows (``infra.program`` -> ``infra.guardrails_iam``). A rule sees only its ``RuleContext``,
never the daemon.

    >>> from guardrails.rules import REGISTRY, iam_actions
    >>> list(REGISTRY)  # doctest: +NORMALIZE_WHITESPACE
    ['inventory', 'idle-reclaim', 'spend-limit', 'egress-spike', 'budget-relay',
     'spot-interruption', 'burst-health', 'burst-reconcile', 'core-idle']
    >>> "ec2:StopInstances" in REGISTRY["idle-reclaim"].iam_actions
    True
"""

from __future__ import annotations

from guardrails.rules.base import CycleReport, Prices, Rule, RuleContext

__all__ = ["REGISTRY", "CycleReport", "Prices", "Rule", "RuleContext", "iam_actions", "register"]

REGISTRY: dict[str, Rule] = {}


def register(rule: Rule) -> Rule:
    if rule.name in REGISTRY:
        raise ValueError(f"rule {rule.name!r} registered twice")
    REGISTRY[rule.name] = rule
    return rule


def iam_actions() -> list[str]:
    """Every IAM action any registered rule needs, sorted (the daemon's policy)."""
    return sorted({a for r in REGISTRY.values() for a in r.iam_actions})


# Registration order is run order: the budget relay reads the burn the spend rule recorded;
# spot-interruption requeues (with the reason on the job) before burst-reconcile powers down.
from guardrails.rules import (  # noqa: E402  (the modules register into REGISTRY above)
    budget_relay,
    burst_health,
    burst_reconcile,
    core_idle,
    egress_spike,
    idle_reclaim,
    inventory,
    spend_limit,
    spot_interruption,
)

for _module in (
    inventory,
    idle_reclaim,
    spend_limit,
    egress_spike,
    budget_relay,
    spot_interruption,
    burst_health,
    burst_reconcile,
    core_idle,
):
    register(_module.RULE)
