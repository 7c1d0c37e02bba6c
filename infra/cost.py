"""Deploy-time cost estimate of a stack, from its config and the catalog (pure).

>>> from common.catalog import load_catalog
>>> lines = estimate_stack(cfg, load_catalog())          # doctest: +SKIP
>>> round(sum(l.monthly_usd for l in lines))               # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass

from common.catalog import Catalog
from infra.config import StackConfig

# Interface endpoints the network creates when asked: SSM (3), CloudWatch metrics and logs.
INTERFACE_ENDPOINT_SERVICES = ("ssm", "ssmmessages", "ec2messages", "monitoring", "logs")


@dataclass(frozen=True)
class CostLine:
    """One priced item. ``hourly_usd`` is the running rate; ``monthly_usd`` adds fixed costs."""

    category: str  # compute | storage | network | link
    item: str
    detail: str
    hourly_usd: float
    monthly_usd: float


def estimate_stack(
    cfg: StackConfig, catalog: Catalog, nat_gb_per_month: float = 0.0
) -> list[CostLine]:
    """Price every cost-bearing resource the stack declares, at full size, for one month."""
    hours = catalog.hours_per_month
    lines: list[CostLine] = []
    for c in cfg.clusters:
        rate = catalog.hourly_price(c.instance_type, cfg.region, c.capacity.model)
        per_h = rate * c.nodes
        lines.append(
            CostLine(
                "compute",
                f"cluster/{c.name}",
                f"{c.nodes} x {c.instance_type} {c.capacity.model} @ ${rate:,.3f}/h",
                per_h,
                per_h * hours,
            )
        )
        ebs = c.root_volume_gib * c.nodes * catalog.ebs_gp3_usd_per_gb_month.value
        lines.append(
            CostLine(
                "storage",
                f"cluster/{c.name}/root-volumes",
                f"{c.nodes} x {c.root_volume_gib} GiB gp3",
                ebs / hours,
                ebs,
            )
        )
    if cfg.lustre:
        lu = cfg.lustre
        rate = catalog.lustre_price(lu.deployment_type, lu.per_unit_storage_throughput)
        monthly = lu.storage_capacity_gib * rate
        tput = (
            f" {lu.per_unit_storage_throughput} MB/s/TiB" if lu.per_unit_storage_throughput else ""
        )
        lines.append(
            CostLine(
                "storage",
                "lustre",
                f"{lu.storage_capacity_gib} GiB {lu.deployment_type}{tput} @ ${rate}/GB-month",
                monthly / hours,
                monthly,
            )
        )
    if cfg.vpc.nat_gateway:
        nat = catalog.nat_gateway
        per_h = nat.usd_per_hour.value
        lines.append(
            CostLine(
                "network",
                "nat-gateway",
                f"1 NAT gateway, {nat_gb_per_month:,.0f} GB processed",
                per_h,
                per_h * hours + nat_gb_per_month * nat.usd_per_gb.value,
            )
        )
    if cfg.vpc.interface_endpoints:
        per_h = catalog.vpc_interface_endpoint_usd_per_hour.value * len(INTERFACE_ENDPOINT_SERVICES)
        lines.append(
            CostLine(
                "network",
                "interface-endpoints",
                f"{len(INTERFACE_ENDPOINT_SERVICES)} endpoints x 1 AZ",
                per_h,
                per_h * hours,
            )
        )
    if cfg.hybrid_link:
        for conn in cfg.hybrid_link.connections:
            per_h = catalog.dx_port_price(conn.bandwidth)
            lines.append(
                CostLine(
                    "link",
                    f"direct-connect/{conn.location}",
                    f"{conn.bandwidth} dedicated port",
                    per_h,
                    per_h * hours,
                )
            )
    return lines


def totals(lines: list[CostLine]) -> tuple[float, float]:
    """(hourly, monthly) totals."""
    return sum(x.hourly_usd for x in lines), sum(x.monthly_usd for x in lines)
