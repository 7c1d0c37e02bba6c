"""Typed stack configuration, read from Pulumi stack config (namespace ``coreburst``).

Every key of ``Pulumi.<stack>.yaml`` under ``coreburst:`` maps to a field below (camelCase in
YAML). Validation happens before any resource is declared; a bad value raises
:class:`StackConfigError` whose message names the key, the value and what is allowed.

    >>> cfg = StackConfig.model_validate({
    ...     "region": "us-east-1", "availabilityZone": "us-east-1a",
    ...     "tags": {"team": "ml", "project": "llm", "costCenter": "cc-1", "environment": "dev"},
    ...     "budget": {"monthlyUsd": 80000},
    ...     "clusters": [{"name": "train", "instanceType": "p5.48xlarge", "nodes": 2,
    ...                   "capacity": {"model": "spot"}}],
    ... })
    >>> cfg.clusters[0].placement_group
    True
"""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from coreburst.common.catalog import Catalog, load_catalog
from coreburst.common.errors import one_line
from coreburst.common.names import NODE_TAG_KEY
from guardrails.regions import aws_region
from infra.slurm_network import (
    SLURMD_PORT,
    SRUN_PORT_RANGE,
    Flow,
    PortSpan,
    conf_server_ports,
    overlaps,
    parse_span,
    slurm_flows,
    span_text,
)

CAPACITY_BLOCK_MAX_INSTANCES = 64
PERSISTENT_2_THROUGHPUTS = (125, 250, 500, 1000)
# EFA-enabled file systems grow in these steps per throughput tier (GiB).
EFA_LUSTRE_INCREMENT_GIB = {125: 38_400, 250: 19_200, 500: 9_600, 1000: 4_800}
METADATA_IOPS_SMALL = (1500, 3000, 6000, 12000)
METADATA_IOPS_MAX = 192_000
DX_DEDICATED_BANDWIDTHS = ("1Gbps", "10Gbps", "100Gbps", "400Gbps")
MAX_DRAS = 8


def automatic_metadata_iops(storage_capacity_gib: int) -> int:
    """The Metadata IOPS that AUTOMATIC mode provisions for an SSD file system of this size.

    FSx for Lustre user guide, "Amazon FSx for Lustre performance", section "File system
    metadata performance" (docs.aws.amazon.com/fsx/latest/LustreGuide/performance.html):
    1200 GiB -> 1500, 2400 GiB -> 3000, 4800-9600 GiB -> 6000, 12000-45600 GiB -> 12000, then
    12000 per 24000 GiB (at most 192000). USER_PROVISIONED may not go below this ("You can't
    provision fewer Metadata IOPS than AUTOMATIC mode provisions", CreateFileSystem API).

    >>> automatic_metadata_iops(2400), automatic_metadata_iops(72000)
    (3000, 36000)
    """
    cap = storage_capacity_gib
    if cap < 2400:
        return 1500
    if cap < 4800:
        return 3000
    if cap < 12000:
        return 6000
    if cap < 48000:
        return 12000
    return min(12_000 * (cap // 24_000), METADATA_IOPS_MAX)


class StackConfigError(ValueError):
    """Invalid stack configuration; the message is one line meant for the user."""


# Amazon VPC user guide, "VPC CIDR blocks" and "Subnet CIDR blocks": an IPv4 block for a VPC
# or a subnet is between /16 (65,536 addresses) and /28 (16 addresses).
VPC_PREFIX_MIN, VPC_PREFIX_MAX = 16, 28


def _cidr(value: str) -> str:
    try:
        return str(ipaddress.ip_network(value, strict=True))
    except ValueError:
        raise ValueError(f"{value!r} is not a CIDR block (expected e.g. 10.0.0.0/16)") from None


def _vpc_cidr(value: str) -> str:
    net = ipaddress.ip_network(_cidr(value))
    if net.version != 4 or not VPC_PREFIX_MIN <= net.prefixlen <= VPC_PREFIX_MAX:
        raise ValueError(
            f"{value!r} is not allowed: an IPv4 VPC or subnet CIDR block must be between "
            f"/{VPC_PREFIX_MIN} and /{VPC_PREFIX_MAX} (e.g. 10.64.0.0/16)"
        )
    return str(net)


# The broadest on-prem block a Slurm rule may name: a /8 is a whole private range already;
# anything wider (0.0.0.0/0 above all) would open Slurm's ports to the internet.
ON_PREM_PREFIX_MIN = 8


def _on_prem_cidr(value: str) -> str:
    net = ipaddress.ip_network(_cidr(value))
    if net.version != 4 or net.prefixlen < ON_PREM_PREFIX_MIN:
        raise ValueError(
            f"{value!r} is broader than an on-prem network: list the IPv4 blocks of the hosts "
            f"themselves, /{ON_PREM_PREFIX_MIN} or narrower (e.g. 10.20.0.10/32)"
        )
    return str(net)


def _srun_port_range(value: str) -> str:
    return span_text(parse_span(value, single=False))


def _port_or_range(value: str) -> str:
    return span_text(parse_span(value))


def _int_as_text(value: Any) -> Any:
    # YAML reads `slurmctldPort: 6817` as a number; the key also takes "6817-6818".
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


Cidr = Annotated[str, AfterValidator(_cidr)]
VpcCidr = Annotated[str, AfterValidator(_vpc_cidr)]
OnPremCidr = Annotated[str, AfterValidator(_on_prem_cidr)]


def _asn_private_or_public(value: int) -> int:
    if not 1 <= value <= 4_294_967_294:
        raise ValueError(f"{value} is not a valid BGP ASN (1-4294967294)")
    return value


def _amazon_side_asn(value: int) -> int:
    if not (64_512 <= value <= 65_534 or 4_200_000_000 <= value <= 4_294_967_294):
        raise ValueError(
            f"{value} is out of range: the Amazon-side ASN must be 64512-65534 or "
            "4200000000-4294967294"
        )
    return value


class _Model(BaseModel):
    # allow_inf_nan=False: YAML's .inf/.nan are floats; no amount of money or size is infinite.
    model_config = ConfigDict(
        extra="forbid",
        alias_generator=to_camel,
        populate_by_name=True,
        frozen=True,
        allow_inf_nan=False,
        # Each field's docstring is its description: docs/reference/config.md is generated
        # from them (python -m coreburst.docs_keys).
        use_attribute_docstrings=True,
    )


class CostTags(_Model):
    """``coreburst:tags``: the cost allocation tags put on every resource (cost-center, team,
    project, environment)."""

    team: str = Field(min_length=1)
    """The team that owns the stack (tag team)."""
    project: str = Field(min_length=1)
    """The project it serves (tag project)."""
    cost_center: str = Field(min_length=1)
    """The cost center billed (tag cost-center)."""
    environment: Literal["dev", "staging", "prod"]
    """The environment (tag environment)."""

    def as_aws_tags(self) -> dict[str, str]:
        return {
            "team": self.team,
            "project": self.project,
            "cost-center": self.cost_center,
            "environment": self.environment,
        }


class Capacity(_Model):
    """How a cluster's instances are bought: on-demand, spot, an On-Demand Capacity Reservation or a
    Capacity Block."""

    model: Literal["on-demand", "spot", "capacity-reservation", "capacity-block"]
    """The capacity model; capacity-reservation and capacity-block need reservationId."""
    reservation_id: str | None = None
    """The capacity reservation's id (cr- and 8-17 hex digits), for capacity-reservation and
    capacity-block only."""
    availability_zone: str | None = None
    """The AZ the reservation/block lives in, when the config states it: it must match the cluster's
    AZ, or every launch fails."""
    reserved_count: int | None = Field(default=None, gt=0)
    """Capacity Blocks hold at most 64 instances; a reservation's size is given here when known."""

    @model_validator(mode="after")
    def _reservation_id(self) -> Capacity:
        needs_id = self.model in ("capacity-reservation", "capacity-block")
        if needs_id and not self.reservation_id:
            raise ValueError(f"capacity model {self.model!r} needs reservationId (cr-...)")
        if not needs_id and self.reservation_id:
            raise ValueError(
                f"reservationId is only valid with capacity-reservation or capacity-block, "
                f"not {self.model!r}"
            )
        if self.reservation_id and not re.fullmatch(r"cr-[0-9a-f]{8,17}", self.reservation_id):
            raise ValueError(
                f"reservationId {self.reservation_id!r} is not a capacity reservation id "
                "(cr- followed by 8-17 hex digits)"
            )
        return self

    @property
    def self_bought(self) -> bool:
        """On-demand or spot capacity that EC2 places for us (placement groups allowed)."""
        return self.model in ("on-demand", "spot")


class Cluster(_Model):
    """One cluster: its instance type, how many nodes and the capacity they run on."""

    name: Annotated[str, Field(pattern=r"^[a-z][a-z0-9-]{0,30}$")]
    """The cluster's name: resource names, the Slurm pool and node names (<name>-<n>)."""
    instance_type: str
    """An instance type of the catalog (coreburst/common/data/catalog.yaml)."""
    nodes: int = Field(ge=0, le=1000)
    """How many instances the cluster runs (on a burst stack: how many Slurm cloud nodes it
    declares)."""
    capacity: Capacity
    """Where the instances' capacity comes from."""
    fallback_instance_types: list[str] = []
    """Types the burst resume program may launch instead, in order, when EC2 has no capacity for
    ``instanceType`` (CreateFleet Overrides). Same accelerator and count, so one Slurm node
    definition fits all (check_against_catalog); e.g. p5.48xlarge -> p5e, p5en."""
    zones: list[str] | None = None
    """Availability Zones the cluster may launch in, in order (None: the stack's zone). Each other
    zone needs a subnet in vpc.extraZones. A multi-node job stays in one zone."""
    placement_group: bool | None = None
    """None = decide from the capacity model (yes for self-bought capacity, never otherwise)."""
    efa: bool = True
    """Attach EFA interfaces (the instance type's layout from the catalog); needs an EFA-capable
    type."""
    ami_ssm_parameter: str | None = None
    """The SSM parameter holding the AMI id (default: the catalog's parameter for the accelerator
    kind, the AWS Deep Learning AMI)."""
    root_volume_gib: int = Field(default=512, ge=100, le=16_384)
    """The gp3 root volume of each instance."""
    ssm_access: bool = True
    """Attach AmazonSSMManagedInstanceCore to the node role (Session Manager, no SSH)."""
    per_device_metrics: bool = False
    """perDeviceMetrics: nodes also publish every GPU's / NeuronCore's own utilization series (for
    `coreburst guardrails explain`), 8 more custom metrics per p5 and 64 per trn2; by default
    only the per-instance rollup the guardrails decide from (coreburst plan prices it)."""

    @model_validator(mode="after")
    def _placement(self) -> Cluster:
        if self.placement_group and not self.capacity.self_bought:
            raise ValueError(
                f"placementGroup: true cannot be combined with a {self.capacity.model}: "
                "launches into AWS-placed capacity fail with a placement group; remove it"
            )
        zones = len(self.zones or [])
        if self.placement_group and zones > 1:
            raise ValueError(
                "placementGroup: true needs one zone (a cluster placement group cannot span "
                "Availability Zones); list one zone or remove placementGroup"
            )
        if self.placement_group is None:
            object.__setattr__(self, "placement_group", self.capacity.self_bought and zones <= 1)
        if self.capacity.model == "capacity-block" and self.nodes > CAPACITY_BLOCK_MAX_INSTANCES:
            raise ValueError(
                f"nodes {self.nodes} exceeds what a Capacity Block holds "
                f"(at most {CAPACITY_BLOCK_MAX_INSTANCES})"
            )
        reserved = self.capacity.reserved_count
        if reserved is not None and self.nodes > reserved:
            raise ValueError(f"nodes {self.nodes} exceeds the reserved count {reserved}")
        if self.instance_type in self.fallback_instance_types or len(
            set(self.fallback_instance_types)
        ) != len(self.fallback_instance_types):
            raise ValueError(
                "fallbackInstanceTypes repeats a type (or instanceType): list each type once"
            )
        reserved_model = self.capacity.model in ("capacity-reservation", "capacity-block")
        if reserved_model and (self.fallback_instance_types or len(self.zones or []) > 1):
            raise ValueError(
                f"a {self.capacity.model} holds one instance type in one zone: remove "
                "fallbackInstanceTypes and extra zones (make another cluster for other capacity)"
            )
        if self.zones is not None and (not self.zones or len(set(self.zones)) != len(self.zones)):
            raise ValueError("zones must list each Availability Zone once (or be left out)")
        return self

    @property
    def instance_types(self) -> list[str]:
        """``instanceType`` then the fallbacks, in the order the resume program tries them."""
        return [self.instance_type, *self.fallback_instance_types]


class Metadata(_Model):
    """``coreburst:lustre.metadata``: how Metadata IOPS are provisioned."""

    mode: Literal["AUTOMATIC", "USER_PROVISIONED"] = "AUTOMATIC"
    """AUTOMATIC sizes Metadata IOPS from the storage capacity; USER_PROVISIONED uses iops."""
    iops: int | None = None
    """USER_PROVISIONED only: 1500, 3000, 6000, 12000 or a multiple of 12000 up to 192000, not below
    what AUTOMATIC would give."""

    @model_validator(mode="after")
    def _iops(self) -> Metadata:
        if self.mode == "AUTOMATIC":
            if self.iops is not None:
                raise ValueError("iops is only allowed with mode USER_PROVISIONED")
            return self
        iops = self.iops
        ok = iops is not None and (
            iops in METADATA_IOPS_SMALL
            or (iops % 12_000 == 0 and 12_000 <= iops <= METADATA_IOPS_MAX)
        )
        if not ok:
            raise ValueError(
                f"iops {iops} is not allowed: use 1500, 3000, 6000, 12000 or a multiple of "
                "12000 up to 192000"
            )
        return self


class DataRepositoryAssociation(_Model):
    """A link between a file system path and an S3 prefix (automatic import, and export when
    ``export``)."""

    file_system_path: Annotated[str, Field(pattern=r"^/[A-Za-z0-9._/-]*$")]
    """The path in the file system (starts with /)."""
    data_repository_path: str
    """s3://bucket/prefix, or "checkpoints" for the stack's own checkpoint bucket."""
    events: list[Literal["NEW", "CHANGED", "DELETED"]] = ["NEW", "CHANGED", "DELETED"]
    """The S3 events imported (and exported when export is true)."""
    export: bool = True
    """Also export changes from the file system to S3."""

    @field_validator("data_repository_path")
    @classmethod
    def _s3(cls, value: str) -> str:
        if value != "checkpoints" and not re.fullmatch(
            r"s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/.*)?", value
        ):
            raise ValueError(
                f"{value!r} is not an S3 path: use s3://bucket/prefix or 'checkpoints'"
            )
        return value

    @property
    def bucket(self) -> str:
        if self.data_repository_path == "checkpoints":
            return "checkpoints"
        return self.data_repository_path.removeprefix("s3://").split("/", 1)[0]


class Lustre(_Model):
    """``coreburst:lustre``: an FSx for Lustre file system, its throughput, metadata and S3
    links."""

    storage_capacity_gib: int = Field(gt=0)
    """Storage capacity: 1200 or a multiple of 2400 (an EFA-enabled PERSISTENT_2: a multiple of its
    tier's increment)."""
    deployment_type: Literal["SCRATCH_2", "PERSISTENT_2"] = "PERSISTENT_2"
    """SCRATCH_2 (no replication) or PERSISTENT_2."""
    per_unit_storage_throughput: int | None = None
    """PERSISTENT_2 only, and required there: 125, 250, 500 or 1000."""
    efa_enabled: bool = False
    """PERSISTENT_2 only: clients reach the file system over EFA (EFA-capable clusters mount it
    so)."""
    metadata: Metadata | None = None
    """PERSISTENT_2 only: the metadata configuration (default: AUTOMATIC)."""
    data_repository_associations: list[DataRepositoryAssociation] = []
    """PERSISTENT_2 only: S3 links (at most 8, one per bucket, paths not nested)."""

    @model_validator(mode="after")
    def _rules(self) -> Lustre:
        tput = self.per_unit_storage_throughput
        cap = self.storage_capacity_gib
        if self.deployment_type == "PERSISTENT_2":
            if tput not in PERSISTENT_2_THROUGHPUTS:
                raise ValueError(
                    f"perUnitStorageThroughput {tput} is not allowed for PERSISTENT_2: "
                    f"use one of {', '.join(map(str, PERSISTENT_2_THROUGHPUTS))} MB/s/TiB"
                )
            if self.metadata is None:
                object.__setattr__(self, "metadata", Metadata())
            assert self.metadata is not None
            floor = automatic_metadata_iops(cap)
            iops = self.metadata.iops
            if self.metadata.mode == "USER_PROVISIONED" and iops is not None and iops < floor:
                raise ValueError(
                    f"metadata.iops {iops} is below the {floor} Metadata IOPS that AUTOMATIC "
                    f"mode provisions for storageCapacityGib {cap}: use at least {floor} "
                    "(or mode AUTOMATIC)"
                )
        else:
            if tput is not None:
                raise ValueError("perUnitStorageThroughput is only set for PERSISTENT_2")
            if self.metadata is not None or self.efa_enabled:
                raise ValueError("metadata and efaEnabled need deploymentType PERSISTENT_2")
            if self.data_repository_associations:
                raise ValueError("dataRepositoryAssociations need deploymentType PERSISTENT_2")
        if self.efa_enabled:
            assert tput is not None
            step = EFA_LUSTRE_INCREMENT_GIB[tput]
            if cap % step:
                raise ValueError(
                    f"storageCapacityGib {cap} is not valid for an EFA-enabled file system at "
                    f"{tput} MB/s/TiB: use a multiple of {step}"
                )
        elif not (cap == 1200 or cap % 2400 == 0):
            raise ValueError(
                f"storageCapacityGib {cap} is not valid for {self.deployment_type}: "
                "use 1200 or a multiple of 2400"
            )
        self._check_dras()
        return self

    def _check_dras(self) -> None:
        dras = self.data_repository_associations
        if len(dras) > MAX_DRAS:
            raise ValueError(f"{len(dras)} data repository associations; at most {MAX_DRAS}")
        buckets = [d.bucket for d in dras]
        for bucket in set(buckets):
            if buckets.count(bucket) > 1:
                raise ValueError(f"bucket {bucket!r} is linked more than once; link it once")
        paths = [d.file_system_path.rstrip("/") + "/" for d in dras]
        for i, a in enumerate(paths):
            for b in paths[i + 1 :]:
                if a.startswith(b) or b.startswith(a):
                    raise ValueError(
                        f"fileSystemPath {a.rstrip('/')} overlaps {b.rstrip('/')}; "
                        "DRA paths must not nest"
                    )


class DxConnection(_Model):
    """One dedicated Direct Connect connection."""

    location: str = Field(min_length=3)
    """The Direct Connect location code (e.g. EqDC2)."""
    bandwidth: Literal["1Gbps", "10Gbps", "100Gbps", "400Gbps"]
    """The connection's port speed."""
    vlan: int = Field(ge=1, le=4094)
    """The virtual interface's VLAN on this connection."""


class HybridLink(_Model):
    """``coreburst:hybridLink``: Direct Connect connections, a Direct Connect gateway and a private
    or transit virtual interface per connection, BGP to on-prem."""

    connections: list[DxConnection] = Field(min_length=1)
    """The dedicated connections, one per location (two locations for redundancy)."""
    customer_asn: Annotated[int, AfterValidator(_asn_private_or_public)]
    """The on-prem router's BGP ASN."""
    amazon_side_asn: Annotated[int, AfterValidator(_amazon_side_asn)] = 64_512
    """The Direct Connect gateway's ASN: 64512-65534 or 4200000000-4294967294."""
    on_prem_prefixes: list[Cidr] = Field(min_length=1)
    """The on-prem blocks reached over the link (none may overlap vpc.cidr)."""
    vif_type: Literal["private", "transit"] = "private"
    """private: a virtual private gateway on the VPC; transit: a transit gateway."""
    mtu: int | None = None
    """The virtual interfaces' MTU: 1500 or 9001 (private), 1500 or 8500 (transit); none: AWS's
    default 1500."""
    macsec: bool = False
    """Request MACsec on the connections and require encryption."""
    protect_association: bool = True
    """Replacing the gateway association cuts traffic to the data centre: protect it unless the
    operator opts out deliberately."""

    @model_validator(mode="after")
    def _rules(self) -> HybridLink:
        locations = [c.location for c in self.connections]
        if len(set(locations)) != len(locations):
            raise ValueError(
                "connections repeat a location; redundancy needs one connection at each of "
                "two locations"
            )
        allowed_mtu = (1500, 8500) if self.vif_type == "transit" else (1500, 9001)
        if self.mtu is not None and self.mtu not in allowed_mtu:
            raise ValueError(
                f"mtu {self.mtu} is not allowed for a {self.vif_type} VIF: use "
                f"{' or '.join(map(str, allowed_mtu))}"
            )
        return self

    @property
    def redundant(self) -> bool:
        return len(self.connections) >= 2


# Addresses a VPN device cannot use towards a virtual private gateway: its tunnels run over the
# internet (AWS Site-to-Site VPN user guide, "Customer gateway options": a static, internet-
# routable IP address; a private one is only for a transit gateway's private IP VPN).
_NOT_INTERNET = tuple(
    ipaddress.ip_network(n)
    for n in (
        "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16",
        "172.16.0.0/12", "192.168.0.0/16", "224.0.0.0/3",
    )
)  # fmt: skip


def _gateway_ip(value: str) -> str:
    try:
        ip = ipaddress.ip_address(value)
    except ValueError:
        raise ValueError(f"{value!r} is not an IPv4 address (e.g. 203.0.113.10)") from None
    if ip.version != 4 or any(ip in net for net in _NOT_INTERNET):
        raise ValueError(
            f"{value} is not an internet address: give the public IPv4 address of the "
            "on-prem VPN device (its tunnels to AWS run over the internet)"
        )
    return str(ip)


class SiteToSiteVpn(_Model):
    """``coreburst:vpn``: an AWS Site-to-Site VPN (two IPsec tunnels) from a virtual private
    gateway to the on-prem VPN device, with static routes: the smaller option next to
    ``hybridLink`` (Direct Connect). Up to 1.25 Gbps per tunnel (AWS Site-to-Site VPN user
    guide, "Site-to-Site VPN quotas"): enough for Slurm's control traffic and modest data."""

    customer_gateway_ip: Annotated[str, AfterValidator(_gateway_ip)]
    """The public IPv4 address of the on-prem VPN device."""
    customer_asn: int = Field(default=65_000, ge=1, le=2_147_483_647)
    """CreateCustomerGateway needs an ASN even for static routing; AWS's default is 65000."""
    amazon_side_asn: Annotated[int, AfterValidator(_amazon_side_asn)] | None = None
    """The virtual private gateway's ASN (none: AWS's default)."""
    on_prem_prefixes: list[OnPremCidr] = Field(min_length=1)
    """The on-prem blocks behind the device: one static route each, in the VPN connection and in the
    private route table."""

    @model_validator(mode="after")
    def _distinct(self) -> SiteToSiteVpn:
        nets = [ipaddress.ip_network(p) for p in self.on_prem_prefixes]
        for i, a in enumerate(nets):
            for b in nets[i + 1 :]:
                if a.overlaps(b):
                    raise ValueError(
                        f"onPremPrefixes {a} overlaps {b}: list each on-prem block once"
                    )
        return self


class ZoneSubnet(_Model):
    """A private subnet in another Availability Zone, for clusters that list that zone."""

    availability_zone: str
    """Another zone of the stack's region (not availabilityZone itself)."""
    private_subnet_cidr: VpcCidr
    """The private subnet's block in that zone, inside vpc.cidr and overlapping no other subnet."""


class Vpc(_Model):
    """``coreburst:vpc``: the stack's VPC, one private subnet (the nodes, the file system) and one
    public subnet (the NAT gateway) in ``availabilityZone``, plus private subnets in
    ``extraZones``."""

    cidr: VpcCidr = "10.64.0.0/16"
    """The VPC's IPv4 block, /16 to /28."""
    private_subnet_cidr: VpcCidr = "10.64.0.0/18"
    """The private subnet in availabilityZone (nodes, file system), inside cidr."""
    public_subnet_cidr: VpcCidr = "10.64.192.0/24"
    """The public subnet holding the NAT gateway, inside cidr."""
    extra_zones: list[ZoneSubnet] = []
    """Private subnets in other zones (burst capacity fallback across zones, Cluster.zones)."""
    nat_gateway: bool = True
    """A NAT gateway for the private subnets' outbound internet access (package installs, AWS APIs
    without endpoints)."""
    interface_endpoints: bool = False
    """SSM and CloudWatch interface endpoints, so nodes are reachable and report metrics without a
    NAT path."""

    @model_validator(mode="after")
    def _inside(self) -> Vpc:
        vpc = ipaddress.ip_network(self.cidr)
        subnets = [
            ("privateSubnetCidr", self.private_subnet_cidr),
            ("publicSubnetCidr", self.public_subnet_cidr),
            *(
                (f"extraZones[{i}].privateSubnetCidr", z.private_subnet_cidr)
                for i, z in enumerate(self.extra_zones)
            ),
        ]
        for key, sub in subnets:
            if not ipaddress.ip_network(sub).subnet_of(vpc):  # type: ignore[arg-type]
                raise ValueError(f"{key} {sub} is not inside the VPC CIDR {self.cidr}")
        for i, (key, sub) in enumerate(subnets):
            for key2, sub2 in subnets[i + 1 :]:
                if ipaddress.ip_network(sub).overlaps(ipaddress.ip_network(sub2)):
                    raise ValueError(
                        f"{key} {sub} overlaps {key2} {sub2}; subnets of a VPC must not overlap"
                    )
        zones = [z.availability_zone for z in self.extra_zones]
        if len(set(zones)) != len(zones):
            raise ValueError(f"extraZones repeats a zone ({', '.join(zones)}); one subnet each")
        return self


class Budget(_Model):
    """``coreburst:budget``: a monthly AWS Budget filtered by the stack's cost tags, with
    actual-spend alerts and a forecast alert."""

    monthly_usd: float = Field(gt=0)
    """The monthly budget."""
    thresholds_percent: list[Annotated[float, Field(gt=0, le=1000)]] = [50, 80, 100]
    """Actual-spend alerts at these percentages of monthlyUsd (an SNS topic and notifyEmails)."""
    notify_emails: list[Annotated[str, Field(pattern=r"^[^@\s]+@[^@\s]+$")]] = []
    """Addresses AWS Budgets emails at each threshold (besides the SNS topic)."""


class CheckpointStore(_Model):
    """``coreburst:checkpoints``: the stack's versioned S3 bucket for checkpoints."""

    noncurrent_version_days: int = Field(default=30, ge=1)
    """Delete a checkpoint's older versions this many days after a newer one replaced them."""
    expire_after_days: int | None = Field(default=None, ge=1)
    """Delete checkpoints this many days after they were written (none: keep them)."""


class GuardrailsDeploy(_Model):
    """The guardrail daemon deployed into the stack as a scheduled Lambda."""

    enabled: bool = False
    """Deploy the daemon (a Lambda run on schedule; its role gets exactly the rules'
    permissions)."""
    schedule: str = Field(default="rate(1 minute)", pattern=r"^(rate|cron)\(.+\)$")
    """How often the Lambda runs: an EventBridge Scheduler rate() or cron() expression."""
    rules: list[str] | None = None
    """Rules the deployed daemon runs and its role gets permissions for (one list for both); None =
    every registered rule. ``inventory`` is always included."""
    dry_run: bool = True
    """The deployed daemon only reports what it would do."""


def _conf_server(value: str) -> str:
    # slurmd(8) --conf-server: "Comma-separated list of controllers, the first being the
    # primary slurmctld. A port can (optionally) be specified for each controller."
    host = r"[A-Za-z0-9](?:[A-Za-z0-9.-]{0,252}[A-Za-z0-9])?(?::\d{1,5})?"
    if not re.fullmatch(f"{host}(?:,{host})*", value):
        raise ValueError(
            f"{value!r} is not a Slurm conf server: use host[:port], comma-separated for a "
            "backup controller (e.g. slurmctl.corp.example:6817)"
        )
    bad = [p for p in conf_server_ports(value) if not 1 <= p <= 65535]
    if bad:
        raise ValueError(f"{value!r} names port {bad[0]}: a TCP port is 1-65535 (e.g. 6817)")
    return value


def _arn(service: str, resource: str) -> Any:
    pattern = re.compile(
        rf"arn:aws[a-z-]*:{service}:[a-z0-9-]+:\d{{12}}:{resource}[A-Za-z0-9/_+=.@!-]+"
    )

    def check(value: str) -> str:
        if not pattern.fullmatch(value):
            raise ValueError(
                f"{value!r} is not a {service} {resource.rstrip(':/')} ARN "
                f"(arn:aws:{service}:<region>:<account>:{resource}...)"
            )
        return value

    return AfterValidator(check)


class BurstNode(_Model):
    """``coreburst:burst.node``: how a burst node joins the on-prem Slurm controller over the
    hybrid link. The munge key comes from Secrets Manager (SecretBinary), the Slurm
    configuration from SSM Parameter Store, the node name from the instance's tag."""

    conf_mode: Literal["configless", "file"] = "configless"
    """configless: slurmd fetches slurm.conf, gres.conf, ... from slurmctld (slurmd --conf-server;
    the controller's SlurmctldParameters needs enable_configless). file: the parameter holds the
    whole slurm.conf (standard parameters hold 4 KB, advanced 8 KB; configless has no such
    limit)."""
    conf_server: Annotated[str, AfterValidator(_conf_server)] | None = None
    """configless: the stack declares a String parameter with this value."""
    slurm_conf_parameter_arn: Annotated[str, _arn("ssm", "parameter/")] | None = None
    """An existing parameter instead (its value: the conf server, or slurm.conf in file mode)."""
    munge_key_secret_arn: Annotated[str, _arn("secretsmanager", "secret:")] | None = None
    """An existing secret with the munge key; None: the stack declares an empty one (put the key
    with `aws secretsmanager put-secret-value --secret-binary fileb:///etc/munge/munge.key`)."""
    tag_wait_seconds: int = Field(default=600, ge=10, le=3600)
    """The resume program tags an instance after CreateFleet returns: wait this long for it."""
    health_gate: bool = True
    """The health gate (coreburst/burst/node_gate.py, written into the user data, run by the
    image's python3): slurmd starts only after the node's GPUs (nvidia-smi) and EFA devices
    (fi_info) match the catalog. NVIDIA clusters only; false skips the gate."""
    health_gate_dcgm: bool = False
    """Also run `dcgmi diag -r 1 -j` in the gate. Off by default: the default image carries DCGM
    4, whose JSON layout the gate does not read (it reads DCGM 3's, and fails the node on any
    other); turn on with an image that carries DCGM 3."""
    install_packages: bool = True
    """Install slurmd and munge with apt-get when the image has none (the packaged Slurm must be
    within the controller's supported versions; bake them into the AMI to pin one)."""

    @model_validator(mode="after")
    def _source(self) -> BurstNode:
        if self.conf_server and self.slurm_conf_parameter_arn:
            raise ValueError("set confServer or slurmConfParameterArn, not both")
        if self.conf_mode == "file" and not self.slurm_conf_parameter_arn:
            raise ValueError(
                "confMode file needs slurmConfParameterArn: the SSM parameter holding slurm.conf"
            )
        if self.conf_mode == "configless" and not (
            self.conf_server or self.slurm_conf_parameter_arn
        ):
            raise ValueError(
                "confServer is missing: the slurmctld host[:port] burst nodes fetch their "
                "configuration from (or slurmConfParameterArn holding it)"
            )
        return self


class OnPrem(_Model):
    """``coreburst:burst.onPrem``: where the on-prem Slurm is, as burst nodes reach it over the
    hybrid link. The burst nodes' security group opens Slurm's ports to these blocks and no
    others (docs/burst.md lists each flow)."""

    controller_cidrs: list[OnPremCidr] = Field(min_length=1)
    """The slurmctld hosts, primary and backup: slurmctld connects to slurmd and to an srun on a
    burst node; slurmd, slurmstepd and srun on a burst node connect to slurmctld."""
    core_cidrs: list[OnPremCidr] = []
    """The hosts where users run srun or salloc for burst jobs (login nodes, core nodes): srun
    connects to slurmd on the burst nodes, their slurmstepd connects back to srun's ports."""

    @model_validator(mode="after")
    def _distinct(self) -> OnPrem:
        for key, cidrs in (
            ("controllerCidrs", self.controller_cidrs),
            ("coreCidrs", self.core_cidrs),
        ):
            nets = [ipaddress.ip_network(c) for c in cidrs]
            for i, a in enumerate(nets):
                for b in nets[i + 1 :]:
                    if a.overlaps(b):
                        raise ValueError(f"{key}: {a} overlaps {b}; list each block once")
        return self


class SlurmNetwork(_Model):
    """The settings the rendered slurm.conf fragment (``coreburst burst slurm-conf``) and the
    burst nodes' security groups are both derived from, so the ports Slurm uses are the ports
    that are open. ``coreburst:burst`` holds them; infra reads them through :class:`BurstSection`,
    coreburst/burst/config.py through ``BurstSettings`` (both subclass this)."""

    node: BurstNode | None = None
    """How a burst node joins this controller (the user data reads it)."""
    on_prem: OnPrem | None = None
    srun_port_range: Annotated[str, AfterValidator(_srun_port_range)] = SRUN_PORT_RANGE
    """Rendered as SrunPortRange=: the ports srun listens on, on every host that runs it."""
    slurmd_port: int = Field(default=SLURMD_PORT, ge=1024, le=65535)
    """The port slurmd on a burst node listens on. Slurm's default; set the site's SlurmdPort here
    if it has another (the fragment then gives each burst node Port=<it>)."""
    slurmd_port_base: int | None = Field(default=None, ge=1024, le=65000)
    """Only for several slurmd on one machine (a lab): one Port= per cloud node from here."""
    slurmctld_port: (
        Annotated[str, BeforeValidator(_int_as_text), AfterValidator(_port_or_range)] | None
    ) = None
    """The site's SlurmctldPort (a port or LOW-HIGH); default: the ports node.confServer names (6817
    where it names none)."""

    @model_validator(mode="after")
    def _ports(self) -> SlurmNetwork:
        if self.slurmd_port_base is not None and self.slurmd_port != SLURMD_PORT:
            raise ValueError(
                "set slurmdPort or slurmdPortBase, not both (slurmdPortBase gives each node "
                "its own port)"
            )
        conf = self.node.conf_server if self.node else None
        if self.slurmctld_port is not None and conf:
            low, high = parse_span(self.slurmctld_port)
            outside = [p for p in conf_server_ports(conf) if not low <= p <= high]
            if outside:
                raise ValueError(
                    f"slurmctldPort {self.slurmctld_port} does not include port "
                    f"{outside[0]} of node.confServer {conf!r}: make them agree"
                )
        return self

    @property
    def srun_span(self) -> PortSpan:
        return parse_span(self.srun_port_range)

    @property
    def slurmctld_spans(self) -> list[PortSpan]:
        if self.slurmctld_port is not None:
            return [parse_span(self.slurmctld_port)]
        conf = self.node.conf_server if self.node else None
        return [(p, p) for p in conf_server_ports(conf or "")]

    def slurmd_span(self, node_count: int) -> PortSpan | None:
        """The ports slurmd listens on across ``node_count`` burst nodes (None: no node)."""
        if node_count <= 0:
            return None
        if self.slurmd_port_base is not None:
            return self.slurmd_port_base, self.slurmd_port_base + node_count - 1
        return self.slurmd_port, self.slurmd_port

    def port_conflict(self, node_count: int) -> str | None:
        """Why these ports cannot work together, in one line (None when they can)."""
        slurmd = self.slurmd_span(node_count)
        if slurmd is not None and slurmd[1] > 65535:
            return (
                f"slurmdPortBase {self.slurmd_port_base} + {node_count} burst nodes runs past "
                "port 65535: lower slurmdPortBase"
            )
        srun = self.srun_span
        taken = [("slurmctld", s) for s in self.slurmctld_spans]
        if slurmd is not None:
            taken.append(("slurmd", slurmd))
        for daemon, span in taken:
            if overlaps(srun, span):
                return (
                    f"srunPortRange {self.srun_port_range} overlaps {daemon}'s port "
                    f"{span_text(span)}: srun would take the daemon's port; move the range "
                    "(e.g. 60001-63000)"
                )
        return None

    def flows(self, node_count: int) -> list[Flow]:
        """The security-group flows for ``node_count`` burst nodes ([] without onPrem)."""
        if self.on_prem is None:
            return []
        return slurm_flows(
            controller_cidrs=self.on_prem.controller_cidrs,
            core_cidrs=self.on_prem.core_cidrs,
            slurmd=self.slurmd_span(node_count),
            slurmctld=self.slurmctld_spans,
            srun=self.srun_span,
        )


class BurstSection(SlurmNetwork):
    """``coreburst:burst``. coreburst/burst/config.py validates the controller side (``coreburst
    burst slurm-conf``); the Pulumi program reads what a burst node needs to join and the
    network settings (:class:`SlurmNetwork`) its security group is derived from."""

    model_config = ConfigDict(
        extra="allow",
        alias_generator=to_camel,
        populate_by_name=True,
        frozen=True,
        allow_inf_nan=False,
        # Each field's docstring is its description: docs/reference/config.md is generated
        # from them (python -m coreburst.docs_keys).
        use_attribute_docstrings=True,
    )

    node_tag_key: Annotated[str, Field(pattern=r"^[A-Za-z0-9+\-=._:@]{1,128}$")] = NODE_TAG_KEY
    """Instance tag holding the Slurm node name (the resume program sets it)."""

    @model_validator(mode="after")
    def _node(self) -> BurstSection:
        if self.node is None:
            raise ValueError(
                "node is missing: burst nodes must join the on-prem controller; set "
                "node.confServer: <slurmctld host[:port]> (see infra/config.py BurstNode)"
            )
        if self.on_prem is None:
            raise ValueError(
                "onPrem is missing: burst nodes reach slurmctld over the hybrid link only where "
                "the stack knows the on-prem blocks; set onPrem.controllerCidrs (and coreCidrs "
                "for login and core nodes)"
            )
        return self


class StackConfig(_Model):
    region: Annotated[str, AfterValidator(aws_region)]
    availability_zone: str
    """The Availability Zone of the private subnet, the clusters and the file system: the region's
    name plus one letter."""
    vpc: Vpc = Vpc()
    clusters: list[Cluster] = Field(min_length=1)
    """The GPU/accelerator clusters: each one an Auto Scaling group and launch template (on a burst
    stack, a pool of Slurm cloud nodes)."""
    lustre: Lustre | None = None
    """An FSx for Lustre file system in availabilityZone (none: no shared file system)."""
    hybrid_link: HybridLink | None = None
    """A Direct Connect link to on-prem (one of hybridLink and vpn, not both)."""
    vpn: SiteToSiteVpn | None = None
    """The smaller hybrid link: a Site-to-Site VPN with static routes (one of the two, not both)."""
    tags: CostTags
    """The cost allocation tags every resource carries."""
    budget: Budget
    """The stack's AWS Budget and its alerts."""
    checkpoints: CheckpointStore = CheckpointStore()
    """The checkpoint bucket's lifecycle."""
    guardrails: GuardrailsDeploy = GuardrailsDeploy()
    """The guardrails daemon deployed into the stack as a scheduled Lambda."""
    burst: BurstSection | None = None
    """`coreburst:burst`: how the on-prem Slurm reaches the burst nodes (coreburst/burst/config.py)
    and how a burst node joins it (`node`: user data, its secret, parameter and IAM grants)."""

    @model_validator(mode="after")
    def _cross_checks(self) -> StackConfig:
        # EC2 user guide, "Regions and Zones": an AZ's name is its region's code followed by a
        # letter (us-east-1a); a prefix match would accept us-east-10a for us-east-1.
        if not re.fullmatch(re.escape(self.region) + "[a-z]", self.availability_zone):
            raise ValueError(
                f"availabilityZone {self.availability_zone!r} is not in region {self.region}: "
                f"use the region name plus one letter (e.g. {self.region}a)"
            )
        names = [c.name for c in self.clusters]
        if len(set(names)) != len(names):
            raise ValueError(f"cluster names repeat: {names}; each cluster needs its own name")
        known = [self.availability_zone, *(z.availability_zone for z in self.vpc.extra_zones)]
        for z in self.vpc.extra_zones:
            if not re.fullmatch(re.escape(self.region) + "[a-z]", z.availability_zone):
                raise ValueError(
                    f"vpc.extraZones: {z.availability_zone!r} is not in region {self.region}"
                )
            if z.availability_zone == self.availability_zone:
                raise ValueError(
                    f"vpc.extraZones: {z.availability_zone} is the stack's own zone "
                    "(its subnet is privateSubnetCidr); list other zones only"
                )
        for i, c in enumerate(self.clusters):
            missing = [z for z in c.zones or [] if z not in known]
            if missing:
                raise ValueError(
                    f"clusters[{i}].zones: no subnet in {', '.join(missing)}; add it to "
                    f"vpc.extraZones (availabilityZone + privateSubnetCidr) or remove it"
                )
        for i, c in enumerate(self.clusters):
            az = c.capacity.availability_zone
            if az is not None and az != self.availability_zone:
                raise ValueError(
                    f"clusters[{i}].capacity.availabilityZone {az!r} differs from the stack's "
                    f"availabilityZone {self.availability_zone!r}: instances must launch in the "
                    "reservation's AZ"
                )
        if self.hybrid_link and self.vpn:
            raise ValueError(
                "set hybridLink (Direct Connect) or vpn (Site-to-Site VPN), not both: the "
                "private routes to on-prem go over one link"
            )
        vpc = ipaddress.ip_network(self.vpc.cidr)
        link_key, prefixes = self.link_prefixes
        for p in prefixes:
            if ipaddress.ip_network(p).overlaps(vpc):
                raise ValueError(f"{link_key}.onPremPrefixes {p} overlaps the VPC CIDR {vpc}")
        if self.burst is not None:
            self._check_burst_network(self.burst, vpc, link_key, prefixes)
        return self

    def _check_burst_network(
        self, burst: BurstSection, vpc: Any, link_key: str, prefixes: list[str]
    ) -> None:
        conflict = burst.port_conflict(self.burst_node_count)
        if conflict:
            raise ValueError(f"burst: {conflict}")
        if burst.on_prem is None:
            return
        if not prefixes:
            raise ValueError(
                "burst.onPrem needs a hybrid link to reach: declare vpn (Site-to-Site VPN: "
                "customerGatewayIp, onPremPrefixes) or hybridLink (Direct Connect)"
            )
        nets = [ipaddress.ip_network(p) for p in prefixes]
        on_prem = burst.on_prem
        for key, cidrs in (
            ("controllerCidrs", on_prem.controller_cidrs),
            ("coreCidrs", on_prem.core_cidrs),
        ):
            for i, c in enumerate(cidrs):
                net = ipaddress.ip_network(c)
                where = f"burst.onPrem.{key}[{i}] {c}"
                if net.overlaps(vpc):
                    raise ValueError(f"{where} overlaps the VPC CIDR {vpc}: it is not on-prem")
                if not any(net.subnet_of(n) for n in nets):  # type: ignore[arg-type]
                    raise ValueError(
                        f"{where} is not inside {link_key}.onPremPrefixes "
                        f"({', '.join(prefixes)}): no route would take burst nodes there; "
                        "add its block to onPremPrefixes"
                    )

    @property
    def link_prefixes(self) -> tuple[str, list[str]]:
        """(config key, on-prem prefixes) of the stack's hybrid link; ("", []) without one."""
        if self.vpn is not None:
            return "vpn", list(self.vpn.on_prem_prefixes)
        if self.hybrid_link is not None:
            return "hybridLink", list(self.hybrid_link.on_prem_prefixes)
        return "", []

    @property
    def burst_node_count(self) -> int:
        """Burst nodes the rendered slurm.conf declares: one per cluster node."""
        return sum(c.nodes for c in self.clusters)

    def slurm_flows(self) -> list[Flow]:
        """The burst nodes' Slurm flows to and from on-prem ([] on a stack without burst)."""
        if self.burst is None:
            return []
        return self.burst.flows(self.burst_node_count)

    def check_against_catalog(self, catalog: Catalog) -> None:
        """Rules that need instance facts; raises StackConfigError."""
        self._check_instances(catalog)
        self._check_burst_boot(catalog)
        self._check_user_data(catalog)

    def _check_burst_boot(self, catalog: Catalog) -> None:
        """A burst node must be able to run its user data: refuse what cannot (docs/burst.md,
        "How a burst node boots")."""
        node = self.burst.node if self.burst is not None else None
        if node is None:
            return
        for i, c in enumerate(self.clusters):
            acc = catalog.instances[c.instance_type].accelerator
            default_image = c.ami_ssm_parameter is None
            if node.health_gate and acc.kind != "nvidia":
                raise StackConfigError(
                    f"burst.node.healthGate: clusters[{i}] ({c.instance_type}) has {acc.model} "
                    f"({acc.kind}) accelerators and the gate checks NVIDIA GPUs only; set "
                    "healthGate: false or make it an NVIDIA cluster"
                )
            if not node.install_packages and default_image:
                raise StackConfigError(
                    f"burst.node.installPackages: false, but clusters[{i}] boots the default "
                    "image (Deep Learning Base AMI), which has no slurmd or munge; set "
                    "installPackages: true or amiSsmParameter to an image that carries them"
                )
            if node.health_gate_dcgm and default_image:
                raise StackConfigError(
                    f"burst.node.healthGateDcgm: clusters[{i}] boots the default image, whose "
                    "DCGM 4 prints dcgmi diag JSON the gate does not read (every node would "
                    "fail); leave healthGateDcgm off or set amiSsmParameter to an image with DCGM 3"
                )
        if node.health_gate_dcgm and not node.health_gate:
            raise StackConfigError(
                "burst.node.healthGateDcgm: true needs healthGate: true (DCGM runs in the gate)"
            )

    def _check_user_data(self, catalog: Catalog) -> None:
        """Every cluster's user data fits EC2's 16 KB, rendered with stand-ins of the length
        of the ARNs and names the deploy fills in."""
        from infra.userdata import lustre_efa_client_supported, render_user_data, slurm_join_for

        node = self.burst.node if self.burst is not None else None
        account = f"{self.region}:123456789012"
        for i, c in enumerate(self.clusters):
            kind = catalog.instances[c.instance_type].accelerator.kind
            join = None
            if node is not None:
                join = slurm_join_for(
                    node,
                    c,
                    catalog,
                    region=self.region,
                    node_tag_key=self.burst.node_tag_key if self.burst else "",
                    munge_key_secret_arn=node.munge_key_secret_arn
                    or f"arn:aws:secretsmanager:{account}:secret:slurm-munge-key-0123456-AbCdEf",
                    slurm_conf_parameter_arn=node.slurm_conf_parameter_arn
                    or f"arn:aws:ssm:{account}:parameter/coreburst/stack/slurm/conf-server",
                )
            lustre = self.lustre
            try:
                render_user_data(
                    kind,
                    f"fs-0123456789abcdef0.fsx.{self.region}.amazonaws.com" if lustre else None,
                    "abcdefgh" if lustre else None,
                    lustre_efa=bool(lustre and lustre.efa_enabled and c.efa)
                    and lustre_efa_client_supported(c.instance_type),
                    slurm_join=join,
                    per_device_metrics=c.per_device_metrics,
                )
            except ValueError as exc:
                raise StackConfigError(
                    f"clusters[{i}] ({c.instance_type}): {exc}; "
                    + (
                        "a Neuron burst node's publisher and Slurm join do not fit together "
                        "yet: keep Trainium clusters on a stack without burst"
                        if kind == "neuron" and join is not None
                        else "remove what the node need not do at boot"
                    )
                ) from None

    def _check_instances(self, catalog: Catalog) -> None:
        for i, c in enumerate(self.clusters):
            key = f"clusters[{i}].instanceType"
            if c.instance_type not in catalog.instances:
                raise StackConfigError(
                    f"{key}: {c.instance_type!r} is not in the catalog; allowed: "
                    f"{', '.join(sorted(catalog.instances))}"
                )
            facts = catalog.instances[c.instance_type]
            if c.efa and not facts.efa_supported:
                raise StackConfigError(
                    f"clusters[{i}].efa: {c.instance_type} has no EFA support; set efa: false"
                )
            try:
                catalog.hourly_price(c.instance_type, self.region, c.capacity.model)
            except ValueError as exc:
                raise StackConfigError(f"{key}: {exc}") from None
            for j, alt in enumerate(c.fallback_instance_types):
                akey = f"clusters[{i}].fallbackInstanceTypes[{j}]"
                other = catalog.instances.get(alt)
                if other is None:
                    raise StackConfigError(
                        f"{akey}: {alt!r} is not in the catalog; allowed: "
                        f"{', '.join(sorted(catalog.instances))}"
                    )
                a, b = facts.accelerator, other.accelerator
                if (a.kind, a.count) != (b.kind, b.count) or (c.efa and not other.efa_supported):
                    raise StackConfigError(
                        f"{akey}: {alt} ({b.count} {b.kind}) cannot stand in for "
                        f"{c.instance_type} ({a.count} {a.kind}{', EFA' if c.efa else ''}): "
                        "one Slurm node definition must fit every type; make another cluster"
                    )
                mine, theirs = facts.efa_interfaces.value, other.efa_interfaces.value
                if c.efa and mine != theirs:
                    raise StackConfigError(
                        f"{akey}: {alt} has {theirs} EFA interfaces, {c.instance_type} {mine}: "
                        "the cluster's launch template has one EFA layout; make another "
                        "cluster for it"
                    )
                try:
                    catalog.hourly_price(alt, self.region, c.capacity.model)
                except ValueError as exc:
                    raise StackConfigError(f"{akey}: {exc}") from None


def _format_error(exc: ValidationError) -> str:
    # Pulumi config keys: `coreburst:clusters[0].instanceType`, the value before the message.
    return one_line(
        exc,
        "coreburst",
        sep=":",
        root="",
        path="brackets",
        value="before",
        more=False,
        messages={"extra_forbidden": "unknown key; check the spelling against the documented keys"},
    )


def parse_stack_config(raw: dict[str, Any], catalog: Catalog | None = None) -> StackConfig:
    """Validate a plain mapping (Pulumi config namespace ``coreburst``) into a StackConfig."""
    try:
        cfg = StackConfig.model_validate(raw)
    except ValidationError as exc:
        raise StackConfigError(_format_error(exc)) from None
    cfg.check_against_catalog(catalog or load_catalog())
    return cfg
