"""The guardrail rule registry, and the narrow context a rule runs in.

Each rule is one module here (``inventory``, ``idle_reclaim``, ``spend_limit``,
``egress_spike``, ``budget_relay``, ``burst_reconcile``, ``core_idle``) that registers one
``Rule``: a kebab-case name, a description, its typed params model (the config section it
reads), the IAM actions it calls, whether the config switches it on, and ``run(ctx)``. One
registry drives what the daemon runs (``guardrails.daemon``, in registry order), what
``rules:`` may select (``config.RULE_NAMES``, checked equal below) and what the deployed role
allows (``infra.program`` -> ``infra.guardrails_iam``). A rule sees only its ``RuleContext``,
never the daemon.

    >>> from guardrails.rules import REGISTRY, iam_actions
    >>> list(REGISTRY)  # doctest: +NORMALIZE_WHITESPACE
    ['inventory', 'idle-reclaim', 'spend-limit', 'egress-spike', 'budget-relay',
     'burst-reconcile', 'core-idle']
    >>> "ec2:StopInstances" in REGISTRY["idle-reclaim"].iam_actions
    True
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from common.catalog import Catalog, CatalogError
from guardrails import messages
from guardrails.config import RULE_NAMES, GuardrailsConfig
from guardrails.idle import Decision
from guardrails.model import Node

if TYPE_CHECKING:
    from guardrails.actuator import Actuator
    from guardrails.aws import Aws, SeriesCache
    from guardrails.clock import Clock
    from guardrails.metrics import Metrics
    from guardrails.slack import Alert
    from guardrails.store import StateStore


@dataclass
class CycleReport:
    """What one cycle saw and did (printed by ``once``, saved as ``last_cycle``)."""

    at: datetime
    nodes: int = 0
    states: Counter[str] = field(default_factory=Counter)
    decisions: list[Decision] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)
    alerts_queued: int = 0
    errors: list[str] = field(default_factory=list)
    # per scope: the dollar figures, plus unpriced instances and projected limit breaches
    spend: dict[str, dict[str, Any]] = field(default_factory=dict)
    egress: dict[str, Any] = field(default_factory=dict)
    budget_notices: int = 0


class Prices:
    """$/h of a node: the catalog's price, or the live spot price when ``spend.spot_price`` is
    ``live`` and one was seen this run. Built from the config (rebuilt on reload)."""

    def __init__(self, catalog: Catalog, spot_price: str) -> None:
        self.catalog = catalog
        self.live = spot_price == "live"
        self.spot: dict[tuple[str, str], float] = {}

    def hourly(self, n: Node) -> float | None:
        if n.market == "spot" and self.live:
            live = self.spot.get((n.instance_type, n.az))
            if live is not None:
                return live
        try:
            return self.catalog.hourly_price(n.instance_type, n.region, n.market)
        except CatalogError:
            return None


@dataclass
class RuleContext:
    """All a rule may use: the (frozen) config, this cycle's nodes and report, the AWS client
    factory (the adapter functions are ``guardrails.aws``'s), the actuator (every write goes
    through its gate), ``alert`` (into the outbox), the state store, the clock, prices and the
    catalog, metrics and the log."""

    cfg: GuardrailsConfig
    clock: Clock
    state: StateStore
    aws: Aws
    actuator: Actuator
    alert: Callable[[Alert, timedelta | None], None]
    prices: Prices
    metrics: Metrics
    log: Any
    report: CycleReport
    series_cache: SeriesCache
    nodes: list[Node] = field(default_factory=list)

    @property
    def catalog(self) -> Catalog:
        return self.prices.catalog

    def owner(self, n: Node) -> str:
        return messages.owner(n, self.cfg.reclaim.owner_tags)


@dataclass(frozen=True)
class Rule:
    name: str
    description: str
    params: type[BaseModel]
    iam_actions: tuple[str, ...]
    # Which config section holds the params, and whether the rule is switched on.
    section: Callable[[GuardrailsConfig], BaseModel]
    enabled: Callable[[GuardrailsConfig], bool]
    # None: the daemon runs it itself (inventory, before every other rule).
    run: Callable[[RuleContext], None] | None = None
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


# Registration order is run order: the budget relay reads the burn the spend rule recorded.
from guardrails.rules import (  # noqa: E402  (the modules register into REGISTRY above)
    budget_relay,
    burst_reconcile,
    core_idle,
    egress_spike,
    idle_reclaim,
    inventory,
    spend_limit,
)

for _module in (
    inventory,
    idle_reclaim,
    spend_limit,
    egress_spike,
    budget_relay,
    burst_reconcile,
    core_idle,
):
    register(_module.RULE)

if set(REGISTRY) != set(RULE_NAMES):  # config's vocabulary and the registry are one list
    raise RuntimeError(f"rules registered {sorted(REGISTRY)} but config knows {RULE_NAMES}")
