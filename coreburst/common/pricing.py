"""Per-item prices: the one place that turns a cost-bearing thing into dollars (pure).

Two thin adapters call these: :mod:`infra.cost` (from a stack's config) and
:mod:`policies.pricing` (from resource properties, offline or ``pulumi preview --json``);
``tests/unit/test_pricing_agreement.py`` checks that they price every stack the same, item by
item. Every figure comes from the catalog (``coreburst/common/data/catalog.yaml``) with its date and
source, carried on the line as ``source``. A figure the catalog lacks raises
:class:`UnpricedError` naming the item: an unknown price is never a zero.

    >>> from coreburst.common.catalog import load_catalog
    >>> line = instance_hours(load_catalog(), "dev-p5-asg", instance_type="p5.48xlarge",
    ...                       region="us-east-1", market="on-demand", nodes=2)
    >>> round(line.hourly_usd, 2), line.source
    (110.08, 'ref 2025-06')

Usage-billed services the stacks create (Lambda, DynamoDB on demand, SQS, SNS, CloudWatch Logs,
EventBridge Scheduler, S3 storage and requests) have no fixed price and are not itemised here;
internet egress and NAT-processed data are priced from a volume the caller states.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from coreburst.common.catalog import Catalog, CatalogError, Figure, Source


class UnpricedError(CatalogError):
    """An item cannot be priced: the catalog lacks its figure, or what it is is unknown."""


@dataclass(frozen=True)
class CostLine:
    """One priced item. ``hourly_usd`` is the running rate; ``monthly_usd`` adds fixed and
    volume-based monthly costs. ``source`` names the catalog figures used (source, date)."""

    category: str  # compute | storage | network | link | security | transfer
    item: str
    detail: str
    hourly_usd: float
    monthly_usd: float
    source: str = ""


def _src(*figures: Figure) -> str:
    """How a line cites its figures: ``source as_of[ unverified]``, ``; ``-separated, each once
    (``ref 2025-06; estimate 2026-11 unverified``)."""
    out: list[str] = []
    for f in figures:
        if f.cited not in out:
            out.append(f.cited)
    return "; ".join(out)


def merge_sources(*sources: str) -> str:
    """Several lines' ``source`` strings as one, each figure citation once, in order.

    >>> merge_sources("ref 2025-06", "ref 2025-06; estimate 2026-11 unverified", "")
    'ref 2025-06; estimate 2026-11 unverified'
    """
    out: list[str] = []
    for s in sources:
        for part in s.split("; "):
            if part and part not in out:
                out.append(part)
    return "; ".join(out)


def cites_unverified(source: str) -> bool:
    """Whether a ``source`` string cites a figure marked ``unverified: true``."""
    return any(part.strip().endswith(" unverified") for part in source.split(";"))


def source_keys(source: str) -> list[str]:
    """The source keys a ``source`` string cites, in order, each once."""
    keys: list[str] = []
    for part in source.split(";"):
        key = part.strip().split(" ", 1)[0]
        if key and key not in keys:
            keys.append(key)
    return keys


def sources_legend(sources: Mapping[str, Source], source: str) -> str:
    """Where each key a ``source`` string cites can be checked (a ``sources`` table: the
    catalog's, the TCO defaults'), for a report's footer; ``scenario`` (a figure the user gave)
    needs none; a key the table lacks is named as such. Keys in alphabetical order, so the line
    reads the same whatever order the lines it covers came in.

    >>> from coreburst.common.catalog import load_catalog
    >>> sources_legend(load_catalog().sources, "ref 2025-06; estimate 2026-11 unverified")
    'sources: estimate = docs/sources.md#estimate; ref = docs/sources.md#ref'
    """
    parts = []
    for key in sorted(source_keys(source)):
        if key == "scenario":
            continue
        src = sources.get(key)
        parts.append(f"{key} = {src.where if src else 'not in the sources table'}")
    return "sources: " + ("; ".join(parts) or "none")


def _need(figure: Figure | None, item: str, what: str) -> Figure:
    if figure is None:
        raise UnpricedError(f"cannot price {item}: the catalog has no {what} figure")
    return figure


def _line(
    cat: Catalog, category: str, item: str, detail: str, *, per_h: float, src: str, fixed: float = 0
) -> CostLine:
    return CostLine(category, item, detail, per_h, per_h * cat.hours_per_month + fixed, src)


def totals(lines: Iterable[CostLine]) -> tuple[float, float]:
    """(hourly, monthly) totals."""
    items = list(lines)
    return sum(x.hourly_usd for x in items), sum(x.monthly_usd for x in items)


# -- compute ----------------------------------------------------------------------------------
def instance_rate(cat: Catalog, instance_type: str, region: str, market: str) -> tuple[float, str]:
    """$/h for one instance by capacity model, and the figures it came from.

    Spot is the catalog's offline estimate (a fraction of on-demand); a capacity reservation
    bills at the on-demand rate (EC2 user guide, "Capacity Reservation pricing and billing").
    """
    rate = cat.hourly_price(instance_type, region, market)  # raises CatalogError, named
    facts = cat.instance(instance_type)
    if market == "capacity-block":
        return rate, _src(facts.capacity_block_usd_per_hour[region])
    od = facts.on_demand_usd_per_hour[region]
    if market == "spot":
        return rate, _src(od, cat.spot_fraction_of_on_demand)
    return rate, _src(od)


def instance_hours(
    cat: Catalog, item: str, *, instance_type: str, region: str, market: str, nodes: int
) -> CostLine:
    """``nodes`` instances running the whole month (EC2 bills per instance-second running)."""
    rate, src = instance_rate(cat, instance_type, region, market)
    detail = f"{nodes} x {instance_type} {market} @ ${rate:,.3f}/h"
    return _line(cat, "compute", item, detail, per_h=rate * nodes, src=src)


def ebs_volumes(
    cat: Catalog, item: str, gib_per_node: int, nodes: int, volume_type: str = "gp3"
) -> CostLine:
    """EBS volumes of ``nodes`` instances, per GB-month provisioned (gp3's baseline 3,000
    IOPS and 125 MB/s are included: https://aws.amazon.com/ebs/pricing/)."""
    if volume_type != "gp3":
        raise UnpricedError(f"cannot price {item}: the catalog prices gp3, not {volume_type}")
    if gib_per_node <= 0:
        raise UnpricedError(f"cannot price {item}: volume size unknown ({gib_per_node} GiB)")
    fig = cat.ebs_gp3_usd_per_gb_month
    monthly = gib_per_node * nodes * fig.value
    return CostLine(
        "storage",
        item,
        f"{nodes} x {gib_per_node} GiB gp3",
        monthly / cat.hours_per_month,
        monthly,
        _src(fig),
    )


# -- FSx for Lustre -----------------------------------------------------------------------------
# FSx API reference, CreateFileSystemLustreConfiguration: DeploymentType "(Default = SCRATCH_1)";
# CreateFileSystem: StorageType default SSD.
# https://docs.aws.amazon.com/fsx/latest/APIReference/API_CreateFileSystemLustreConfiguration.html
LUSTRE_DEFAULT_DEPLOYMENT = "SCRATCH_1"
LUSTRE_DEFAULT_STORAGE_TYPE = "SSD"


def lustre_usd_per_gb_month(cat: Catalog, deployment_type: str, throughput: int | None) -> Figure:
    """The storage rate of an SSD file system; PERSISTENT types are priced by their
    throughput tier (MB/s/TiB), scratch types have none. Raises CatalogError when missing."""
    tiers = cat.fsx_lustre_usd_per_gb_month.get(deployment_type)
    key = str(throughput or 0)
    if tiers is None or key not in tiers:
        known = [f"{d}/{t}" for d, ts in cat.fsx_lustre_usd_per_gb_month.items() for t in ts]
        raise UnpricedError(
            f"no FSx for Lustre price for {deployment_type} at {throughput} MB/s/TiB; catalog "
            f"has {', '.join(known)}"
        )
    return tiers[key]


def lustre_usd_per_hour(
    capacity_gib: float, usd_per_gb_month: float, hours_per_month: float
) -> float:
    """The hourly run rate of a file system billed per GB-month of provisioned capacity."""
    return capacity_gib * usd_per_gb_month / hours_per_month


def lustre(
    cat: Catalog,
    item: str,
    capacity_gib: int,
    *,
    deployment_type: str | None = None,
    throughput: int | None = None,
    storage_type: str | None = None,
) -> CostLine:
    """An FSx for Lustre file system: provisioned GiB x the deployment/throughput rate
    (https://aws.amazon.com/fsx/lustre/pricing/). Absent fields take the API's defaults."""
    deployment = deployment_type or LUSTRE_DEFAULT_DEPLOYMENT
    storage = storage_type or LUSTRE_DEFAULT_STORAGE_TYPE
    if storage != "SSD":
        raise UnpricedError(f"cannot price {item}: the catalog prices SSD Lustre, not {storage}")
    if capacity_gib <= 0:
        raise UnpricedError(f"cannot price {item}: storage capacity unknown ({capacity_gib} GiB)")
    if deployment.startswith("PERSISTENT") and not throughput:
        raise UnpricedError(
            f"cannot price {item}: {deployment} needs perUnitStorageThroughput (MB/s/TiB)"
        )
    try:
        fig = lustre_usd_per_gb_month(cat, deployment, throughput)
    except CatalogError as exc:
        raise UnpricedError(f"cannot price {item}: {exc}") from None
    tier = f" {throughput} MB/s/TiB" if throughput else ""
    hourly = lustre_usd_per_hour(capacity_gib, fig.value, cat.hours_per_month)
    return CostLine(
        "storage",
        item,
        f"{capacity_gib} GiB {deployment}{tier} @ ${fig.value}/GB-month",
        hourly,
        capacity_gib * fig.value,
        _src(fig),
    )


# -- network ------------------------------------------------------------------------------------
def nat_gateway(cat: Catalog, item: str, gb_per_month: float = 0.0) -> CostLine:
    """One NAT gateway: per hour plus per GB processed (https://aws.amazon.com/vpc/pricing/).
    Its Elastic IP is a separate line (:func:`public_ipv4`)."""
    nat = cat.nat_gateway
    return _line(
        cat,
        "network",
        item,
        f"NAT gateway, {gb_per_month:,.0f} GB processed",
        per_h=nat.usd_per_hour.value,
        src=_src(nat.usd_per_hour, nat.usd_per_gb),
        fixed=gb_per_month * nat.usd_per_gb.value,
    )


def public_ipv4(cat: Catalog, item: str, count: int = 1) -> CostLine:
    """Public IPv4 addresses (an Elastic IP, attached or idle), per address-hour."""
    fig = _need(cat.public_ipv4_usd_per_hour, item, "public IPv4 address")
    return _line(
        cat, "network", item, f"{count} public IPv4 address", per_h=fig.value * count, src=_src(fig)
    )


def interface_endpoint(cat: Catalog, item: str, azs: int) -> CostLine:
    """One interface VPC endpoint, billed per AZ it has a network interface in, per hour
    (https://aws.amazon.com/privatelink/pricing/: "per VPC endpoint per AZ")."""
    if azs < 1:
        raise UnpricedError(f"cannot price {item}: an interface endpoint is in at least one AZ")
    fig = cat.vpc_interface_endpoint_usd_per_hour
    return _line(
        cat, "network", item, f"interface endpoint x {azs} AZ", per_h=fig.value * azs, src=_src(fig)
    )


def dx_port(cat: Catalog, item: str, bandwidth: str) -> CostLine:
    """A dedicated Direct Connect port, per port-hour by speed
    (https://aws.amazon.com/directconnect/pricing/)."""
    fig = cat.direct_connect_port_usd_per_hour.get(bandwidth)
    if fig is None:
        raise UnpricedError(
            f"cannot price {item}: no Direct Connect port price for {bandwidth!r}; known: "
            f"{', '.join(cat.direct_connect_port_usd_per_hour)}"
        )
    return _line(cat, "link", item, f"{bandwidth} dedicated port", per_h=fig.value, src=_src(fig))


def transit_gateway_attachment(cat: Catalog, item: str, kind: str) -> CostLine:
    """One transit gateway attachment (VPC, Direct Connect gateway...), per attachment-hour."""
    fig = _need(cat.transit_gateway_attachment_usd_per_hour, item, "transit gateway attachment")
    return _line(
        cat, "link", item, f"transit gateway {kind} attachment", per_h=fig.value, src=_src(fig)
    )


def vpn_connection(cat: Catalog, item: str) -> CostLine:
    """One Site-to-Site VPN connection (two tunnels), per connection-hour
    (https://aws.amazon.com/vpn/pricing/); its gateways are free."""
    fig = _need(cat.site_to_site_vpn_connection_usd_per_hour, item, "Site-to-Site VPN connection")
    return _line(
        cat, "link", item, "Site-to-Site VPN connection (2 tunnels)", per_h=fig.value, src=_src(fig)
    )


def secret(cat: Catalog, item: str) -> CostLine:
    """One Secrets Manager secret, per secret-month (prorated by the hour)."""
    fig = _need(cat.secrets_manager_secret_usd_per_month, item, "Secrets Manager secret")
    return CostLine(
        "security",
        item,
        "Secrets Manager secret",
        fig.value / cat.hours_per_month,
        fig.value,
        _src(fig),
    )


def internet_egress(cat: Catalog, gb_per_month: float, item: str = "internet-egress") -> CostLine:
    """Internet egress for the month, on the catalog's cumulative tiers."""
    cost = cat.internet_egress_cost(gb_per_month)
    tiers = [t.usd_per_gb for t in cat.data_transfer.internet_out_tiers]
    return CostLine(
        "transfer",
        item,
        f"{gb_per_month:,.0f} GB/month to the internet",
        cost / cat.hours_per_month,
        cost,
        _src(*tiers),
    )


__all__ = [
    "LUSTRE_DEFAULT_DEPLOYMENT",
    "LUSTRE_DEFAULT_STORAGE_TYPE",
    "CostLine",
    "UnpricedError",
    "dx_port",
    "ebs_volumes",
    "instance_hours",
    "instance_rate",
    "interface_endpoint",
    "internet_egress",
    "lustre",
    "lustre_usd_per_gb_month",
    "lustre_usd_per_hour",
    "nat_gateway",
    "public_ipv4",
    "secret",
    "totals",
    "transit_gateway_attachment",
    "vpn_connection",
]


# -- owned nodes (the on-prem core) -----------------------------------------------------------
def owned_gpu_hour_usd(node_month_usd: float, gpus_per_node: int, hours_per_month: float) -> float:
    """$ per GPU-hour of an owned node: what the node costs a month (amortised purchase plus
    its fixed and power costs, as the TCO model resolves them: ``coreburst.tco.model``) over every
    GPU-hour it has that month. Owned capacity is paid for every hour, busy or not, so this is
    the price of an *allocated* GPU-hour, idle or used: the one price core and burst reports
    share (``coreburst core report``; the daemon's ``core_idle.gpu_hour_usd``).

    >>> round(owned_gpu_hour_usd(10_000.0, 8, 730), 4)
    1.7123
    """
    if gpus_per_node <= 0 or hours_per_month <= 0:
        raise ValueError("gpus_per_node and hours_per_month must be positive")
    return node_month_usd / (gpus_per_node * hours_per_month)
