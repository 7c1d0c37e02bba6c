"""Price resources from their properties with the catalog (pure).

The same arithmetic as :func:`infra.cost.estimate_stack`, but driven by what the engine will
create (launch templates + ASG desired capacity + market, FSx capacity and throughput, Direct
Connect port speed, NAT gateways, interface endpoints), so ``pulumi preview`` output and the
offline evaluation are priced the same way.

    >>> lines = price_resources(resources, load_catalog())      # doctest: +SKIP
    >>> round(sum(x.monthly_usd for x in lines))                 # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Sequence

from pulumi_policy import PolicyResource

from common.catalog import Catalog, CatalogError
from infra.cost import CostLine
from policies.common import (
    ASG,
    AWS_PROVIDER,
    LUSTRE,
    as_int,
    asg_market,
    get,
    launch_template_of,
    of_type,
)

NAT = "aws:ec2/natGateway:NatGateway"
DX_CONNECTION = "aws:directconnect/connection:Connection"
VPC_ENDPOINT = "aws:ec2/vpcEndpoint:VpcEndpoint"
DEFAULT_REGION = "us-east-1"


def stack_region(resources: Sequence[PolicyResource]) -> str:
    for p in of_type(resources, AWS_PROVIDER):
        region = p.props.get("region")
        if isinstance(region, str) and region:
            return region
    return DEFAULT_REGION


def _root_gib(lt_props: object) -> int:
    total = 0
    for bdm in get(lt_props, "blockDeviceMappings") or []:
        total += as_int(get(bdm, "ebs.volumeSize"))
    return total


def price_resources(
    resources: Sequence[PolicyResource],
    catalog: Catalog,
    egress_gb: float = 0.0,
    nat_gb_per_month: float = 0.0,
) -> list[CostLine]:
    """One line per cost-bearing resource, for a month of ``catalog.hours_per_month`` hours.

    Raises :class:`CatalogError` when a resource needs a figure the catalog lacks.
    """
    hours = catalog.hours_per_month
    region = stack_region(resources)
    lines: list[CostLine] = []
    for asg in of_type(resources, ASG):
        lt = launch_template_of(asg)
        if lt is None:
            continue
        itype = str(lt.props.get("instanceType", ""))
        nodes = as_int(asg.props.get("desiredCapacity"), as_int(asg.props.get("minSize")))
        market = asg_market(asg.props, lt.props)
        rate = catalog.hourly_price(itype, region, market)
        lines.append(
            CostLine(
                "compute",
                asg.name,
                f"{nodes} x {itype} {market} @ ${rate:,.3f}/h",
                rate * nodes,
                rate * nodes * hours,
            )
        )
        gib = _root_gib(lt.props)
        if gib and nodes:
            ebs = gib * nodes * catalog.ebs_gp3_usd_per_gb_month.value
            lines.append(
                CostLine(
                    "storage",
                    f"{asg.name}/volumes",
                    f"{nodes} x {gib} GiB gp3",
                    ebs / hours,
                    ebs,
                )
            )
    for fs in of_type(resources, LUSTRE):
        deployment = str(fs.props.get("deploymentType", "SCRATCH_1"))
        tput = as_int(fs.props.get("perUnitStorageThroughput")) or None
        gib = as_int(fs.props.get("storageCapacity"))
        rate = catalog.lustre_price(deployment, tput)
        tier = f" {tput} MB/s/TiB" if tput else ""
        lines.append(
            CostLine(
                "storage",
                fs.name,
                f"{gib} GiB {deployment}{tier} @ ${rate}/GB-month",
                gib * rate / hours,
                gib * rate,
            )
        )
    nats = of_type(resources, NAT)
    for i, nat in enumerate(nats):
        per_h = catalog.nat_gateway.usd_per_hour.value
        # Processed data is one monthly figure for the stack; charge it to the first gateway.
        gb = nat_gb_per_month if i == 0 else 0.0
        lines.append(
            CostLine(
                "network",
                nat.name,
                f"NAT gateway, {gb:,.0f} GB processed",
                per_h,
                per_h * hours + gb * catalog.nat_gateway.usd_per_gb.value,
            )
        )
    for ep in of_type(resources, VPC_ENDPOINT):
        if ep.props.get("vpcEndpointType") != "Interface":
            continue
        subnets = ep.props.get("subnetIds")
        # Unknown until apply in a preview (the engine's sentinel string): count one AZ.
        azs = max(1, len(subnets) if isinstance(subnets, list) else 1)
        per_h = catalog.vpc_interface_endpoint_usd_per_hour.value * azs
        lines.append(
            CostLine("network", ep.name, f"interface endpoint x {azs} AZ", per_h, per_h * hours)
        )
    for dx in of_type(resources, DX_CONNECTION):
        bandwidth = str(dx.props.get("bandwidth", ""))
        per_h = catalog.dx_port_price(bandwidth)
        lines.append(CostLine("link", dx.name, f"{bandwidth} dedicated port", per_h, per_h * hours))
    if egress_gb > 0:
        cost = catalog.internet_egress_cost(egress_gb)
        lines.append(
            CostLine(
                "transfer",
                "internet-egress",
                f"{egress_gb:,.0f} GB/month to the internet",
                cost / hours,
                cost,
            )
        )
    return lines


__all__ = ["CatalogError", "price_resources", "stack_region"]
