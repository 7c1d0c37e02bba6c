"""What burst nodes cost while Slurm runs them, for ``coreburst plan``.

On a burst stack the clusters' Auto Scaling groups stay at 0 instances (infra/components/
gpu_cluster.py): Slurm starts each node through the resume program and ends it after
SuspendTime idle, so the stack's fixed monthly cost holds no GPU instance. What a user needs
instead is the price of one node-hour per pool, what the whole pool costs per hour while every
node runs, and the largest projection the spend gate can be asked to approve (every node of
the pool for its partition's MaxTime): the same arithmetic as the gate (coreburst/burst/gate.py
``Gate.check``: nodes x $/h x time limit, instance price only), at the same rate: a pool with
fallback types is priced at the dearest type it may launch as (:func:`node_rate`). A price
the catalog
lacks raises :class:`coreburst.common.pricing.UnpricedError`: it is never shown as zero.

    >>> from coreburst.burst.config import parse_burst
    >>> stack = parse_burst("dev", {
    ...     "aws:region": "us-east-1", "coreburst:availabilityZone": "us-east-1a",
    ...     "coreburst:tags": {"team": "t", "project": "p", "costCenter": "c",
    ...                        "environment": "dev"},
    ...     "coreburst:budget": {"monthlyUsd": 1000},
    ...     "coreburst:clusters": [{"name": "p5", "instanceType": "p5.48xlarge", "nodes": 2,
    ...                             "capacity": {"model": "on-demand"}}],
    ...     "coreburst:burst": {"coreNodes": "dgx[1-2]", "maxTime": "1-00:00:00"}})
    >>> (r,) = pool_rates(stack)
    >>> r.nodes, round(r.instance_usd_per_node_hour, 2), r.max_hours, round(r.max_projection_usd)
    (2, 55.04, 24.0, 2642)
"""

from __future__ import annotations

from dataclasses import dataclass

from coreburst.burst.config import BurstStack, gate_limits
from coreburst.burst.slurmconf import NodeSet, node_sets
from coreburst.common import pricing
from coreburst.common.catalog import Catalog, load_catalog
from coreburst.common.pricing import UnpricedError
from infra.config import StackConfigError


def slurm_hours(value: str) -> float | None:
    """Hours in a Slurm time limit (sbatch(1) --time: "minutes", "minutes:seconds",
    "hours:minutes:seconds", "days-hours", "days-hours:minutes", "days-hours:minutes:seconds");
    None for no limit (UNLIMITED, INFINITE, Partition_Limit) or an unreadable value.

    >>> slurm_hours("7-00:00:00"), slurm_hours("90"), slurm_hours("01:30:00")
    (168.0, 1.5, 1.5)
    """
    v = value.strip()
    try:
        if "-" in v:
            days_s, rest = v.split("-", 1)
            hms = [int(x) for x in rest.split(":")] + [0, 0]
            if len(hms) > 5:
                return None
            return int(days_s) * 24 + hms[0] + hms[1] / 60 + hms[2] / 3600
        parts = [int(x) for x in v.split(":")]
    except ValueError:
        return None
    if len(parts) == 1:
        return parts[0] / 60
    if len(parts) == 2:
        return parts[0] / 60 + parts[1] / 3600
    if len(parts) == 3:
        return parts[0] + parts[1] / 60 + parts[2] / 3600
    return None


@dataclass(frozen=True)
class PoolRate:
    """One cluster's burst nodes, priced per node-hour."""

    cluster: str
    partition: str
    instance_type: str
    market: str
    nodes: int
    instance_usd_per_node_hour: float  # what the spend gate counts
    volume_usd_per_node_hour: float  # the node's root volume, billed while the instance lives
    max_time: str  # the partition's MaxTime
    max_hours: float | None  # None: UNLIMITED
    source: str
    # The type a node is priced as: the dearest it may launch as (fallbacks included); None:
    # instance_type.
    priced_type: str | None = None

    @property
    def usd_per_node_hour(self) -> float:
        return self.instance_usd_per_node_hour + self.volume_usd_per_node_hour

    @property
    def usd_per_hour_all_nodes(self) -> float:
        return self.usd_per_node_hour * self.nodes

    @property
    def max_projection_usd(self) -> float | None:
        """The largest cost the spend gate can be asked to approve for this pool: every node
        for the partition's MaxTime (None without a MaxTime: the gate then uses the job's own
        limit, or the burst MaxTime)."""
        if self.max_hours is None:
            return None
        return self.nodes * self.instance_usd_per_node_hour * self.max_hours


def node_rate(cat: Catalog, ns: NodeSet, region: str) -> tuple[float, str, str]:
    """($/h, instance type, source) a node of ``ns`` is priced at: the dearest type it may
    launch as, its fallbacks included, since the spend gate must never reserve less than the
    launch can cost. ``coreburst plan`` and the gate both price a node with this. Raises
    CatalogError (named) for a type the catalog cannot price.

    >>> from coreburst.burst.slurmconf import NodeSet
    >>> cat = load_catalog()
    >>> ns = NodeSet("od", "p5.48xlarge", "on-demand", ("od-1",), 192, 1, 8, "h100", (), "burst",
    ...              ("p5.48xlarge", "p5e.48xlarge"))
    >>> node_rate(cat, ns, "us-east-1")[1]
    'p5e.48xlarge'
    """
    best: tuple[float, str, str] | None = None
    for t in ns.instance_types or (ns.instance_type,):
        rate, src = pricing.instance_rate(cat, t, region, ns.market)
        if best is None or rate > best[0]:
            best = (rate, t, src)
    assert best is not None
    return best


def pool_rates(stack: BurstStack, catalog: Catalog | None = None) -> list[PoolRate]:
    """One :class:`PoolRate` per cluster with nodes; raises UnpricedError (named) for a
    figure the catalog lacks."""
    cat = catalog or load_catalog()
    s = stack.settings
    root_gib = {c.name: c.root_volume_gib for c in stack.config.clusters}
    out = []
    for ns in node_sets(stack, cat):
        item = f"burst pool {ns.cluster}"
        rate, priced_type, src = node_rate(cat, ns, stack.config.region)
        volume = pricing.ebs_volumes(cat, f"{item}/volume", root_gib[ns.cluster], 1)
        max_time = s.spot_max_time if ns.partition == s.spot_partition else s.max_time
        out.append(
            PoolRate(
                cluster=ns.cluster,
                partition=ns.partition,
                instance_type=ns.instance_type,
                priced_type=priced_type,
                market=ns.market,
                nodes=len(ns.names),
                instance_usd_per_node_hour=rate,
                volume_usd_per_node_hour=volume.hourly_usd,
                max_time=max_time,
                max_hours=slurm_hours(max_time),
                source="; ".join(x for x in (src, volume.source) if x),
            )
        )
    return out


@dataclass(frozen=True)
class GateSummary:
    """The spend gate as the plan states it: its guardrails config and, when readable on this
    machine, the scope and its limits."""

    guardrails_config: str
    scope: str | None = None
    daily_limit_usd: float | None = None
    monthly_limit_usd: float | None = None
    unreadable: str | None = None  # why the limits cannot be shown here (one line)


def gate_summary(stack: BurstStack) -> GateSummary | None:
    """None without a spend gate. The guardrails config usually lives on the controller, not
    where the plan runs: then the summary says so instead of failing the plan."""
    gate = stack.settings.spend_gate
    if gate is None:
        return None
    try:
        limits = gate_limits(gate)
    except StackConfigError as exc:
        return GateSummary(str(gate.guardrails_config), unreadable=str(exc))
    return GateSummary(
        str(gate.guardrails_config),
        limits.scope,
        limits.daily_limit_usd,
        limits.monthly_limit_usd,
    )


__all__ = ["GateSummary", "PoolRate", "UnpricedError", "gate_summary", "pool_rates", "slurm_hours"]
