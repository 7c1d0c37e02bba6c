"""The guardrail rule registry, and the narrow context a rule runs in.

Each rule is one module that defines one ``Rule``: a kebab-case name, a description, its typed
params model (the config section it reads), the IAM actions it calls, whether the config
switches it on, where in the cycle it runs (``order``), and ``run(ctx)``. A rule registers
through one registration point, the ``coreburst.guardrail_rules`` entry points in
pyproject.toml (``name = "module:RULE"``), which this module reads: the daemon's own rules live
in ``guardrails/rules/``, the burst product's (``spot-interruption``, ``burst-health``,
``burst-reconcile``) beside the rest of burst in ``coreburst/burst/``, a layer above, which
guardrails never imports by name. One registry drives what the daemon runs
(``guardrails.daemon``, in ``order``), what the config holds and ``rules:`` may select
(``guardrails.configfile``: each rule's ``sections``), what the Lambda handler runs and what
the deployed role allows (``infra.program`` -> ``infra.guardrails_iam``). A rule sees only
its ``RuleContext``, never the daemon.

    >>> from guardrails.rules import REGISTRY, iam_actions
    >>> list(REGISTRY)  # doctest: +NORMALIZE_WHITESPACE
    ['inventory', 'idle-reclaim', 'spend-limit', 'egress-spike', 'budget-relay',
     'spot-interruption', 'burst-health', 'burst-reconcile', 'core-idle']
    >>> "ec2:StopInstances" in REGISTRY["idle-reclaim"].iam_actions
    True
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from importlib.metadata import entry_points

from guardrails.rules.base import CycleReport, Prices, Rule, RuleContext

__all__ = [
    "ENTRY_POINT_GROUP",
    "REGISTRY",
    "CycleReport",
    "Prices",
    "Rule",
    "RuleContext",
    "iam_actions",
    "registered",
]

ENTRY_POINT_GROUP = "coreburst.guardrail_rules"


def registered() -> dict[str, Rule]:
    """Every rule the installed distribution declares, in run order. Each entry point's name is
    its rule's name; two rules may not share an ``order`` (the run order is then explicit)."""
    rules: list[Rule] = []
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        rule = ep.load()
        if not isinstance(rule, Rule) or rule.name != ep.name:
            raise RuntimeError(f"entry point {ep.name} = {ep.value} is not the Rule {ep.name!r}")
        rules.append(rule)
    if not rules:
        raise RuntimeError(
            f"no guardrail rules registered (entry point group {ENTRY_POINT_GROUP}): install "
            "coreburst (pip install '.[guardrails]') rather than running it from a bare checkout"
        )
    orders = [r.order for r in rules]
    if len(set(orders)) != len(orders):
        raise RuntimeError(
            f"two rules share a run order: {sorted((r.order, r.name) for r in rules)}"
        )
    return {r.name: r for r in sorted(rules, key=lambda r: r.order)}


class _Registry(Mapping[str, Rule]):
    """The registered rules, read from the entry points on first use: a rule module imports
    ``guardrails.rules.base``, so reading them while this package initialises would import a
    rule that is itself still being imported."""

    def __init__(self) -> None:
        self._rules: dict[str, Rule] | None = None

    def _loaded(self) -> dict[str, Rule]:
        if self._rules is None:
            self._rules = registered()
        return self._rules

    def __getitem__(self, name: str) -> Rule:
        return self._loaded()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._loaded())

    def __len__(self) -> int:
        return len(self._loaded())


REGISTRY: Mapping[str, Rule] = _Registry()


def iam_actions() -> list[str]:
    """Every IAM action any registered rule needs, sorted (the daemon's policy)."""
    return sorted({a for r in REGISTRY.values() for a in r.iam_actions})
