"""What every guardrail rule builds on: ``Rule`` (what a rule declares), ``RuleContext`` (all a
rule may use), the cycle's report and prices, and the helpers more than one rule shares. A rule
module imports this, never the registry (``guardrails.rules``) or another rule: the layer
contract in pyproject.toml checks it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError
from pydantic import BaseModel

from coreburst.common.catalog import Catalog, CatalogError
from guardrails import messages
from guardrails.adapters.slurm import Scontrol, SlurmError, power_down_when_idle
from guardrails.config import GuardrailsConfig
from guardrails.idle import Decision, IdleParams
from guardrails.idle_config import IdleConfig, ReclaimConfig
from guardrails.model import Node
from guardrails.timefmt import iso, parse_iso

if TYPE_CHECKING:
    from guardrails.actuator import Actuator
    from guardrails.adapters.aws import Aws
    from guardrails.adapters.cloudwatch import SeriesCache
    from guardrails.adapters.slack import Alert
    from guardrails.clock import Clock
    from guardrails.metrics import Metrics
    from guardrails.stores.base import StateStore


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
    factory (the adapter functions are ``guardrails.adapters.aws``'s), the actuator (every write
    goes
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
    # Where in a cycle it runs, lower first (the budget relay reads the burn spend-limit
    # recorded; spot-interruption requeues, with the reason on the job, before burst-reconcile
    # powers down). Unique across rules.
    order: int
    description: str
    params: type[BaseModel]
    iam_actions: tuple[str, ...]
    # Which config section holds the params, and whether the rule is switched on.
    section: Callable[[GuardrailsConfig], BaseModel]
    enabled: Callable[[GuardrailsConfig], bool]
    # None: the daemon runs it itself (inventory, before every other rule).
    run: Callable[[RuleContext], None] | None = None
    example: str = ""
    # The config sections the rule owns: YAML key -> params model (``params`` is one of them).
    # ``guardrails.configfile`` adds each to the whole config, so ``cfg.<key>`` is one.
    sections: Mapping[str, type[BaseModel]] = field(default_factory=dict)
    # Checks across sections (``cfg`` -> None, or ValueError: reported as the config's own
    # error), run while the config is validated; and checks that need more than the config
    # (``(cfg, origin)`` -> None, or ConfigError naming ``origin``), run after it is valid.
    validators: tuple[Callable[[Any], None], ...] = ()
    checks: tuple[Callable[[Any, str], None], ...] = ()


# -- shared by more than one rule ---------------------------------------------------------
def cost_explorer_cached(ctx: RuleContext, cache_key: str, fetch: Callable[[], float]) -> float:
    """A Cost Explorer figure, fetched at most every ``spend.cost_explorer_refresh`` (each
    request costs money); the last value stands in when a fetch fails."""
    now = ctx.clock.now()
    cached = ctx.state.get(cache_key)
    if cached and now - parse_iso(cached["at"]) < ctx.cfg.spend.cost_explorer_refresh:
        return float(cached["value"])
    try:
        v = fetch()
    except (ClientError, BotoCoreError) as exc:
        ctx.report.errors.append(f"cost explorer: {type(exc).__name__}")
        return float(cached["value"]) if cached else 0.0
    ctx.state.put(cache_key, {"at": iso(now), "value": v})
    return v


def idle_params(cfg: GuardrailsConfig) -> IdleParams:
    idle: IdleConfig = cfg.idle
    reclaim: ReclaimConfig = cfg.reclaim
    p = reclaim.protected
    return IdleParams(
        threshold_percent=idle.threshold_percent,
        window=idle.window,
        max_gap=idle.max_gap,
        publish_delay=idle.publish_delay,
        grace=reclaim.grace,
        max_exemption=reclaim.max_exemption,
        exempt_tag=reclaim.exempt_tag,
        protected_asgs=frozenset(p.asg_names),
        protected_tags=tuple((s.key, frozenset(s.values)) for s in p.tag_selectors),
    )


def reclaim_slurm_node(ctx: RuleContext, n: Node, d: Decision) -> bool:
    """For the idle-reclaim rule, before it acts: True when ``n`` is a burst node (its
    instance carries the Slurm node tag the resume program sets), which idle reclaim must not
    stop or terminate through EC2 (a slurmd runs there). Instead Slurm is asked to power the
    node down once no job holds it (``State=POWER_DOWN_ASAP``: the node is drained so no new
    job lands on it, a running job is never killed; the SuspendProgram then ends the
    instance), through the actuator's gate. Without the burst-reconcile rule (no scontrol
    here) the node is left to Slurm's SuspendTime."""
    p = ctx.cfg.burst_reconcile
    node = n.tags.get(p.node_tag_key)
    if not node:
        return False
    act = ctx.actuator
    if not p.enabled:
        act.audit(
            "reclaim.left-to-slurm",
            instance_id=n.instance_id,
            node=node,
            why="a Slurm burst node; burst-reconcile is off, so Slurm's SuspendTime powers it down",
        )
        return True
    slurm = Scontrol(p.slurm_bin_dir, p.slurm_conf, p.slurm_timeout_s)
    key = f"reclaim-slurm:{n.instance_id}:{iso(d.marked_at) if d.marked_at else ''}"
    try:
        done = act.execute(
            key,
            node,
            "slurm",
            "power-down-when-idle",
            reason=f"{d.reason}; instance {n.instance_id} runs slurmd for {node}",
            call=lambda: power_down_when_idle(slurm, [node]),
        )
    except SlurmError as exc:
        ctx.state.drop_intent(key)
        act.audit("action.failed", key=key, instance_id=node, error=str(exc))
        ctx.report.errors.append(f"idle-reclaim: {exc}")
        return True
    if done:
        ctx.state.remove_mark(n.instance_id)
    return True
