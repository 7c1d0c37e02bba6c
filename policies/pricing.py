"""Price resources from their properties: the resource adapter of :mod:`coreburst.common.pricing`
(pure).

Driven by what the engine will create (launch templates + ASG desired capacity + market, FSx
capacity and throughput, Direct Connect port speed, NAT gateways and their Elastic IPs,
interface endpoints per AZ, transit gateway attachments, VPN connections, secrets), so
``pulumi preview`` output and the offline evaluation are priced the same way as
:mod:`infra.cost` prices the stack config (``tests/unit/test_pricing_agreement.py``).

    >>> lines = price_resources(resources, load_catalog())      # doctest: +SKIP
    >>> round(sum(x.monthly_usd for x in lines))                 # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pulumi_policy import PolicyResource
from pulumi_policy.proxy import UnknownValueError

from coreburst.common import pricing
from coreburst.common.catalog import Catalog, CatalogError
from coreburst.common.pricing import CostLine, UnpricedError
from policies.common import (
    ASG,
    AWS_PROVIDER,
    LUSTRE,
    SUBNET,
    as_int,
    asg_market,
    deps,
    get,
    launch_template_of,
    of_type,
)

NAT = "aws:ec2/natGateway:NatGateway"
EIP = "aws:ec2/eip:Eip"
DX_CONNECTION = "aws:directconnect/connection:Connection"
DX_GATEWAY_ASSOCIATION = "aws:directconnect/gatewayAssociation:GatewayAssociation"
TRANSIT_GATEWAY = "aws:ec2transitgateway/transitGateway:TransitGateway"
TGW_VPC_ATTACHMENT = "aws:ec2transitgateway/vpcAttachment:VpcAttachment"
VPC_ENDPOINT = "aws:ec2/vpcEndpoint:VpcEndpoint"
VPN_CONNECTION = "aws:ec2/vpnConnection:VpnConnection"
SECRET = "aws:secretsmanager/secret:Secret"
DEFAULT_REGION = "us-east-1"
# The engine's "known after apply" value in `pulumi preview --json` (policies.sources.UNKNOWN).
_UNKNOWN_SENTINEL = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"
_UNKNOWN = object()


def _read(props: Any, key: str) -> Any:
    """``props[key]``; ``None`` when absent, ``_UNKNOWN`` when known only after apply."""
    try:
        value = props.get(key)
    except UnknownValueError:
        return _UNKNOWN
    return _UNKNOWN if value == _UNKNOWN_SENTINEL else value


def stack_region(resources: Sequence[PolicyResource]) -> str:
    for p in of_type(resources, AWS_PROVIDER):
        region = p.props.get("region")
        if isinstance(region, str) and region:
            return region
    return DEFAULT_REGION


def asg_nodes(asg: PolicyResource) -> tuple[int, str]:
    """Instances the group runs, and a note when that is not its stated desired capacity.

    An ASG launches and keeps ``desiredCapacity`` instances, which is what EC2 bills; without
    one it starts at ``minSize`` ("If you do not specify a desired capacity, the default is
    the minimum size of the group": EC2 Auto Scaling API reference, CreateAutoScalingGroup,
    https://docs.aws.amazon.com/autoscaling/ec2/APIReference/API_CreateAutoScalingGroup.html).
    A desired capacity known only after apply is priced at ``maxSize``, the most it can be.
    """
    desired = _read(asg.props, "desiredCapacity")
    if desired is None:
        return as_int(_read(asg.props, "minSize")), " (no desiredCapacity: minSize)"
    if desired is _UNKNOWN:
        top = _read(asg.props, "maxSize")
        if top is None or top is _UNKNOWN:
            raise UnpricedError(f"cannot price {asg.name}: its size is unknown until apply")
        return as_int(top), " (desiredCapacity unknown: maxSize)"
    return as_int(desired), ""


def _root_gib(item: str, lt_props: Any) -> int:
    """GiB of EBS per instance from the launch template's block device mappings."""
    mappings = [m for m in get(lt_props, "blockDeviceMappings") or [] if get(m, "ebs")]
    if not mappings:
        raise UnpricedError(
            f"cannot price {item}: the root volume's size comes from the AMI; declare it in "
            "blockDeviceMappings"
        )
    total = 0
    for bdm in mappings:
        # An absent volumeType takes the AMI's; the program always sets gp3.
        vtype = get(bdm, "ebs.volumeType", "gp3")
        if vtype != "gp3":
            raise UnpricedError(f"cannot price {item}: the catalog prices gp3, not {vtype}")
        size = as_int(get(bdm, "ebs.volumeSize"))
        if size <= 0:
            raise UnpricedError(f"cannot price {item}: a volume's size is unknown")
        total += size
    return total


def _endpoint_azs(ep: PolicyResource) -> int:
    """AZs an interface endpoint has a network interface in: one per subnet it names (at most
    one subnet per AZ). Unknown ids still show as references to the subnets."""
    subnets = _read(ep.props, "subnetIds")
    if isinstance(subnets, list) and subnets:
        return len(subnets)
    referenced = deps(ep, "subnetIds", SUBNET)
    if referenced:
        return len(referenced)
    raise UnpricedError(f"cannot price {ep.name}: its subnets (one per AZ) are unknown")


def _lustre(cat: Catalog, fs: PolicyResource) -> CostLine:
    deployment = _read(fs.props, "deploymentType")
    tput = _read(fs.props, "perUnitStorageThroughput")
    storage = _read(fs.props, "storageType")
    capacity = _read(fs.props, "storageCapacity")
    if any(v is _UNKNOWN for v in (deployment, tput, storage, capacity)):
        raise UnpricedError(f"cannot price {fs.name}: its size or type is unknown until apply")
    return pricing.lustre(
        cat,
        fs.name,
        as_int(capacity),
        deployment_type=str(deployment) if deployment else None,
        throughput=as_int(tput) or None,
        storage_type=str(storage) if storage else None,
    )


def price_resources(
    resources: Sequence[PolicyResource],
    catalog: Catalog,
    egress_gb: float = 0.0,
    nat_gb_per_month: float = 0.0,
) -> list[CostLine]:
    """One line per cost-bearing resource, for a month of ``catalog.hours_per_month`` hours.

    Raises :class:`CatalogError` (:class:`coreburst.common.pricing.UnpricedError`) naming the
    resource
    when one cannot be priced: a missing figure is never counted as zero.
    """
    region = stack_region(resources)
    lines: list[CostLine] = []
    for asg in of_type(resources, ASG):
        lt = launch_template_of(asg)
        if lt is None:
            raise UnpricedError(f"cannot price {asg.name}: it has no launch template")
        itype = str(lt.props.get("instanceType", ""))
        nodes, note = asg_nodes(asg)
        market = asg_market(asg.props, lt.props)
        line = pricing.instance_hours(
            catalog, asg.name, instance_type=itype, region=region, market=market, nodes=nodes
        )
        lines.append(line if not note else _note(line, note))
        if nodes:
            item = f"{asg.name}/volumes"
            lines.append(pricing.ebs_volumes(catalog, item, _root_gib(item, lt.props), nodes))
    lines += [_lustre(catalog, fs) for fs in of_type(resources, LUSTRE)]
    for i, nat in enumerate(of_type(resources, NAT)):
        # Processed data is one monthly figure for the stack; charge it to the first gateway.
        gb = nat_gb_per_month if i == 0 else 0.0
        lines.append(pricing.nat_gateway(catalog, nat.name, gb))
    lines += [pricing.public_ipv4(catalog, eip.name) for eip in of_type(resources, EIP)]
    for ep in of_type(resources, VPC_ENDPOINT):
        # Gateway endpoints (S3, DynamoDB) are free; interface endpoints bill per AZ-hour.
        if _read(ep.props, "vpcEndpointType") == "Interface":
            lines.append(pricing.interface_endpoint(catalog, ep.name, _endpoint_azs(ep)))
    for dx in of_type(resources, DX_CONNECTION):
        lines.append(pricing.dx_port(catalog, dx.name, str(dx.props.get("bandwidth", ""))))
    for att in of_type(resources, TGW_VPC_ATTACHMENT):
        lines.append(pricing.transit_gateway_attachment(catalog, att.name, "VPC"))
    for assoc in of_type(resources, DX_GATEWAY_ASSOCIATION):
        # Associating a Direct Connect gateway with a transit gateway is an attachment of it;
        # with a virtual private gateway it is free.
        if deps(assoc, "associatedGatewayId", TRANSIT_GATEWAY):
            lines.append(
                pricing.transit_gateway_attachment(catalog, assoc.name, "Direct Connect gateway")
            )
    lines += [pricing.vpn_connection(catalog, v.name) for v in of_type(resources, VPN_CONNECTION)]
    lines += [pricing.secret(catalog, s.name) for s in of_type(resources, SECRET)]
    if egress_gb > 0:
        lines.append(pricing.internet_egress(catalog, egress_gb))
    return lines


def _note(line: CostLine, note: str) -> CostLine:
    return CostLine(
        line.category, line.item, line.detail + note, line.hourly_usd, line.monthly_usd, line.source
    )


__all__ = [
    "CatalogError",
    "CostLine",
    "UnpricedError",
    "asg_nodes",
    "price_resources",
    "stack_region",
]
