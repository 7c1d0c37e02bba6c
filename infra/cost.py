"""Deploy-time cost estimate of a stack from its config: the config adapter of
:mod:`coreburst.common.pricing` (pure).

Each line is named after the resource the program declares for it (``<cluster>-asg``,
``lustre-fs``, ``net-nat-<az>``...), so these lines and the ones :mod:`policies.pricing` reads
off the resources line up one to one; ``tests/unit/test_pricing_agreement.py`` checks that
they agree to the cent.

>>> from coreburst.common.catalog import load_catalog
>>> lines = estimate_stack(cfg, load_catalog())          # doctest: +SKIP
>>> round(sum(l.monthly_usd for l in lines))               # doctest: +SKIP
"""

from __future__ import annotations

from coreburst.common import pricing
from coreburst.common.catalog import Catalog
from coreburst.common.pricing import CostLine, totals
from infra.config import StackConfig

# Interface endpoints the network creates when asked: SSM (3), CloudWatch metrics and logs.
INTERFACE_ENDPOINT_SERVICES = ("ssm", "ssmmessages", "ec2messages", "monitoring", "logs")

# Component names infra/program.py gives; resource names below follow each component's scheme.
NETWORK, LUSTRE, LINK, VPN, GUARDRAILS = "net", "lustre", "link", "vpn", "guardrails"


def connection_key(location: str) -> str:
    """The key HybridLink names a connection by (``_slug`` there; kept here so this module
    stays free of pulumi imports; the agreement test catches a drift)."""
    return "".join(ch if ch.isalnum() else "-" for ch in location.lower()).strip("-")


def estimate_stack(
    cfg: StackConfig, catalog: Catalog, nat_gb_per_month: float = 0.0
) -> list[CostLine]:
    """Price every cost-bearing resource the stack declares, at its configured size, for one
    month (``catalog.hours_per_month`` hours). Raises CatalogError for a missing figure."""
    lines: list[CostLine] = []
    for c in cfg.clusters:
        asg = f"{c.name}-asg"
        # The ASG's desired capacity is `nodes` (GpuCluster): what runs and is billed. On a
        # burst stack it is 0 (Slurm starts the nodes; coreburst/burst/cost.py prices them per
        # hour).
        nodes = 0 if cfg.burst is not None else c.nodes
        lines.append(
            pricing.instance_hours(
                catalog,
                asg,
                instance_type=c.instance_type,
                region=cfg.region,
                market=c.capacity.model,
                nodes=nodes,
            )
        )
        if nodes:
            lines.append(pricing.ebs_volumes(catalog, f"{asg}/volumes", c.root_volume_gib, nodes))
    if cfg.lustre:
        lu = cfg.lustre
        lines.append(
            pricing.lustre(
                catalog,
                f"{LUSTRE}-fs",
                lu.storage_capacity_gib,
                deployment_type=lu.deployment_type,
                throughput=lu.per_unit_storage_throughput,
                storage_type="SSD",  # what the Lustre component declares
            )
        )
    az = cfg.availability_zone
    if cfg.vpc.nat_gateway:
        lines.append(pricing.nat_gateway(catalog, f"{NETWORK}-nat-{az}", nat_gb_per_month))
        lines.append(pricing.public_ipv4(catalog, f"{NETWORK}-nat-eip-{az}"))
    if cfg.vpc.interface_endpoints:
        # Each endpoint has one network interface, in the one private subnet (one AZ).
        for service in INTERFACE_ENDPOINT_SERVICES:
            lines.append(pricing.interface_endpoint(catalog, f"{NETWORK}-{service}", azs=1))
    if cfg.hybrid_link:
        link = cfg.hybrid_link
        for conn in link.connections:
            item = f"{LINK}-dx-{connection_key(conn.location)}"
            lines.append(pricing.dx_port(catalog, item, conn.bandwidth))
        if link.vif_type == "transit":
            # Two attachments to the transit gateway: the VPC and the Direct Connect gateway.
            lines.append(pricing.transit_gateway_attachment(catalog, f"{LINK}-tgw-vpc", "VPC"))
            lines.append(
                pricing.transit_gateway_attachment(
                    catalog, f"{LINK}-dxgw-assoc", "Direct Connect gateway"
                )
            )
    if cfg.vpn:
        lines.append(pricing.vpn_connection(catalog, f"{VPN}-connection"))
    if cfg.guardrails.enabled:
        lines.append(pricing.secret(catalog, f"{GUARDRAILS}-slack-webhook"))
    if (
        cfg.burst is not None
        and cfg.burst.node is not None
        and not cfg.burst.node.munge_key_secret_arn
    ):
        # The munge key burst nodes read (gpu_cluster.declare_slurm_join), unless one is named.
        lines.append(pricing.secret(catalog, "slurm-munge-key"))
    return lines


__all__ = ["INTERFACE_ENDPOINT_SERVICES", "CostLine", "estimate_stack", "totals"]
