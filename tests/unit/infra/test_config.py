"""Every invalid stack configuration is rejected before any resource is declared, with one
message naming the key, the value and what is allowed."""

from __future__ import annotations

from typing import Any

import pulumi
import pytest

from infra.config import StackConfigError
from infra.offline import evaluate_config
from tests.helpers.burst import ON_PREM, VPN


def _reject(config: dict[str, Any]) -> str:
    with pytest.raises(StackConfigError) as exc:
        evaluate_config("bad", config)
    message = str(exc.value)
    assert "\n" not in message, "errors are one line"
    return message


def test_example_configs_are_valid(dev_config: dict[str, Any], prod_config: dict[str, Any]) -> None:
    assert evaluate_config("dev", dev_config).config.clusters[0].nodes == 2
    assert evaluate_config("prod", prod_config).config.lustre is not None


def test_fsx_capacity_not_an_increment(dev_config: dict[str, Any]) -> None:
    dev_config["coreburst:lustre"]["storageCapacityGib"] = 3000
    assert _reject(dev_config) == (
        "coreburst:lustre: storageCapacityGib 3000 is not valid for PERSISTENT_2: "
        "use 1200 or a multiple of 2400"
    )


def test_efa_lustre_capacity_follows_its_throughput_tier(prod_config: dict[str, Any]) -> None:
    prod_config["coreburst:lustre"]["storageCapacityGib"] = 9600  # fine at 500, not at 1000
    prod_config["coreburst:lustre"]["perUnitStorageThroughput"] = 250
    assert _reject(prod_config) == (
        "coreburst:lustre: storageCapacityGib 9600 is not valid for an EFA-enabled file "
        "system at 250 MB/s/TiB: use a multiple of 19200"
    )


def test_throughput_outside_allowed_set(dev_config: dict[str, Any]) -> None:
    dev_config["coreburst:lustre"]["perUnitStorageThroughput"] = 200
    assert _reject(dev_config) == (
        "coreburst:lustre: perUnitStorageThroughput 200 is not allowed for PERSISTENT_2: "
        "use one of 125, 250, 500, 1000 MB/s/TiB"
    )


def test_instance_type_missing_from_catalog(dev_config: dict[str, Any]) -> None:
    dev_config["coreburst:clusters"][0]["instanceType"] = "p6.96xlarge"
    message = _reject(dev_config)
    assert message.startswith("clusters[0].instanceType: 'p6.96xlarge' is not in the catalog")
    assert "p5.48xlarge" in message


@pytest.mark.parametrize("model", ["capacity-block", "capacity-reservation"])
def test_reserved_capacity_with_placement_group(prod_config: dict[str, Any], model: str) -> None:
    cluster = prod_config["coreburst:clusters"][0]
    cluster["capacity"]["model"] = model
    cluster["placementGroup"] = True
    assert _reject(prod_config) == (
        f"coreburst:clusters[0]: placementGroup: true cannot be combined with a {model}: "
        "launches into AWS-placed capacity fail with a placement group; remove it"
    )


def test_more_nodes_than_a_capacity_block_holds(prod_config: dict[str, Any]) -> None:
    prod_config["coreburst:clusters"][0]["nodes"] = 65
    assert _reject(prod_config) == (
        "coreburst:clusters[0]: nodes 65 exceeds what a Capacity Block holds (at most 64)"
    )


@pytest.mark.parametrize("asn", [64511, 65535, 4_294_967_295])
def test_amazon_side_asn_out_of_range(prod_config: dict[str, Any], asn: int) -> None:
    prod_config["coreburst:hybridLink"]["amazonSideAsn"] = asn
    assert _reject(prod_config) == (
        f"coreburst:hybridLink.amazonSideAsn: {asn} is out of range: the Amazon-side ASN must "
        "be 64512-65534 or 4200000000-4294967294"
    )


def test_customer_asn_out_of_range(prod_config: dict[str, Any]) -> None:
    prod_config["coreburst:hybridLink"]["customerAsn"] = 0
    assert _reject(prod_config) == (
        "coreburst:hybridLink.customerAsn: 0 is not a valid BGP ASN (1-4294967294)"
    )


def test_prefix_that_is_not_a_cidr(prod_config: dict[str, Any]) -> None:
    prod_config["coreburst:hybridLink"]["onPremPrefixes"] = ["10.0.0.0/14", "10.300.0.0/16"]
    assert _reject(prod_config) == (
        "coreburst:hybridLink.onPremPrefixes[1]: '10.300.0.0/16' is not a CIDR block "
        "(expected e.g. 10.0.0.0/16)"
    )


def test_cluster_az_differs_from_reservation_az(prod_config: dict[str, Any]) -> None:
    prod_config["coreburst:clusters"][0]["capacity"]["availabilityZone"] = "us-east-2a"
    assert _reject(prod_config) == (
        "coreburst: clusters[0].capacity.availabilityZone 'us-east-2a' differs from the "
        "stack's availabilityZone 'us-east-2b': instances must launch in the reservation's AZ"
    )


def test_efa_on_a_type_without_efa(dev_config: dict[str, Any], monkeypatch: Any) -> None:
    from coreburst.common.catalog import IntFigure, load_catalog

    cat = load_catalog()
    p4d = cat.instances["p4d.24xlarge"]
    no_efa = p4d.model_copy(
        update={"efa_interfaces": IntFigure(value=0, as_of="2026-11", source="estimate")}
    )
    monkeypatch.setitem(cat.instances, "p4d.24xlarge", no_efa)
    dev_config["coreburst:clusters"][0]["instanceType"] = "p4d.24xlarge"
    assert _reject(dev_config) == (
        "clusters[0].efa: p4d.24xlarge has no EFA support; set efa: false"
    )


def test_unknown_key_is_named(dev_config: dict[str, Any]) -> None:
    dev_config["coreburst:clusters"][0]["instanceTyp"] = "p5.48xlarge"
    assert _reject(dev_config) == (
        "coreburst:clusters[0].instanceTyp: unknown key; check the spelling against the "
        "documented keys"
    )


def test_capacity_model_outside_allowed_values(dev_config: dict[str, Any]) -> None:
    dev_config["coreburst:clusters"][0]["capacity"]["model"] = "reserved"
    message = _reject(dev_config)
    assert message.startswith("coreburst:clusters[0].capacity.model: 'reserved' is not allowed")
    assert "'capacity-block'" in message


def test_capacity_block_needs_reservation_id(prod_config: dict[str, Any]) -> None:
    del prod_config["coreburst:clusters"][0]["capacity"]["reservationId"]
    assert _reject(prod_config) == (
        "coreburst:clusters[0].capacity: capacity model 'capacity-block' needs reservationId "
        "(cr-...)"
    )


def test_overlapping_dra_paths(prod_config: dict[str, Any]) -> None:
    prod_config["coreburst:lustre"]["dataRepositoryAssociations"][1]["fileSystemPath"] = (
        "/datasets/ckpt"
    )
    assert _reject(prod_config) == (
        "coreburst:lustre: fileSystemPath /datasets/ overlaps /datasets/ckpt/; "
        "DRA paths must not nest"
    ).replace("/datasets/ overlaps /datasets/ckpt/", "/datasets overlaps /datasets/ckpt")


def test_bad_config_declares_nothing(dev_config: dict[str, Any]) -> None:
    """Through the real entry point: RunError with the message, and zero resources."""
    from infra.offline import _as_pulumi_config, _Mocks
    from infra.program import main

    dev_config["coreburst:lustre"]["perUnitStorageThroughput"] = 1
    mocks = _Mocks("us-east-1")
    pulumi.runtime.set_mocks(mocks, project="coreburst", stack="bad", preview=True)
    pulumi.runtime.set_all_config(_as_pulumi_config(dev_config))
    with pytest.raises(pulumi.RunError, match="perUnitStorageThroughput 1 is not allowed"):
        main()
    assert mocks.resources == []


# -- values AWS refuses (issue 12, item 18) ----------------------------------------------------
def _moto_accepts_vpc(vpc_cidr: str, subnets: list[str]) -> bool:
    """Ask moto's EC2 (an implementation of the API we did not write) whether it creates the
    VPC and its subnets."""
    import boto3
    from botocore.exceptions import ClientError
    from moto import mock_aws

    with mock_aws():
        ec2 = boto3.client("ec2", region_name="us-east-1")
        try:
            vpc = ec2.create_vpc(CidrBlock=vpc_cidr)["Vpc"]["VpcId"]
            for cidr in subnets:
                ec2.create_subnet(VpcId=vpc, CidrBlock=cidr, AvailabilityZone="us-east-1a")
        except ClientError:
            return False
    return True


@pytest.mark.parametrize(
    ("vpc", "message"),
    [
        (
            {"cidr": "10.0.0.0/8", "privateSubnetCidr": "10.0.0.0/18"},
            "coreburst:vpc.cidr: '10.0.0.0/8' is not allowed: an IPv4 VPC or subnet CIDR block "
            "must be between /16 and /28",
        ),
        (
            {"cidr": "10.64.0.0/16", "privateSubnetCidr": "10.64.0.0/29"},
            "coreburst:vpc.privateSubnetCidr: '10.64.0.0/29' is not allowed",
        ),
        (
            {"cidr": "10.64.0.0/16", "privateSubnetCidr": "10.64.0.0/16"},
            "privateSubnetCidr 10.64.0.0/16 overlaps publicSubnetCidr 10.64.192.0/24",
        ),
        (
            {"cidr": "10.64.0.0/16", "privateSubnetCidr": "10.64.192.0/25"},
            "privateSubnetCidr 10.64.192.0/25 overlaps publicSubnetCidr 10.64.192.0/24",
        ),
        (
            {"cidr": "10.64.0.0/16", "privateSubnetCidr": "10.65.0.0/18"},
            "privateSubnetCidr 10.65.0.0/18 is not inside the VPC CIDR 10.64.0.0/16",
        ),
    ],
)
def test_vpc_layouts_aws_refuses(
    dev_config: dict[str, Any], vpc: dict[str, Any], message: str
) -> None:
    """Amazon VPC user guide, "VPC CIDR blocks" (docs.aws.amazon.com/vpc/latest/userguide/
    vpc-cidr-blocks.html): an IPv4 VPC block is /16 to /28; "Subnet CIDR blocks": a subnet's
    block is /16 to /28, inside the VPC's, and subnets of a VPC must not overlap. moto's
    CreateVpc/CreateSubnet refuse each of these too (InvalidVpc.Range, InvalidSubnet.Conflict,
    InvalidSubnet.Range)."""
    full = {"publicSubnetCidr": "10.64.192.0/24", **vpc}
    dev_config["coreburst:vpc"] = {**dev_config.get("coreburst:vpc", {}), **full}
    assert message in _reject(dev_config)
    if "/29" not in full["privateSubnetCidr"]:  # moto does not check subnet sizes; AWS does
        assert not _moto_accepts_vpc(
            full["cidr"], [full["privateSubnetCidr"], full["publicSubnetCidr"]]
        )


@pytest.mark.parametrize("prefix", [15, 16, 20, 28, 29])
def test_vpc_prefix_bounds_agree_with_moto(prefix: int) -> None:
    from pydantic import TypeAdapter

    from infra.config import VpcCidr

    cidr = f"10.0.0.0/{prefix}"
    try:
        TypeAdapter(VpcCidr).validate_python(cidr)
        ours = True
    except ValueError:
        ours = False
    assert ours == _moto_accepts_vpc(cidr, []) == (16 <= prefix <= 28)


def test_az_must_be_the_region_plus_one_letter(dev_config: dict[str, Any]) -> None:
    """EC2 user guide, "Regions and Zones" (docs.aws.amazon.com/AWSEC2/latest/UserGuide/
    using-regions-availability-zones.html): an AZ is named by its Region code followed by a
    letter identifier (us-east-1a). us-east-10a only shares a prefix with us-east-1; moto's EC2
    lists the region's zones and refuses a subnet there."""
    import boto3
    from moto import mock_aws

    dev_config["coreburst:availabilityZone"] = "us-east-10a"
    assert _reject(dev_config) == (
        "coreburst: availabilityZone 'us-east-10a' is not in region us-east-1: use the region "
        "name plus one letter (e.g. us-east-1a)"
    )
    with mock_aws():
        zones = boto3.client("ec2", region_name="us-east-1").describe_availability_zones()
    names = [z["ZoneName"] for z in zones["AvailabilityZones"]]
    assert "us-east-10a" not in names
    for az in names:  # every real zone of the region passes
        dev_config["coreburst:availabilityZone"] = az
        assert evaluate_config("dev", dev_config).config.availability_zone == az


@pytest.mark.parametrize(
    "region",
    [
        "日本-east-1",
        "us-east-1\n",
        "us-east-1x",
        "US-EAST-1",
        "us-EAST-1",
        "mars-north-1",
        "us-east",
    ],
)
def test_region_must_be_an_aws_region_name(dev_config: dict[str, Any], region: str) -> None:
    """Region names per botocore's endpoints.json: each partition's regionRegex (read from
    botocore's own data by the config and by this test)."""
    import botocore.loaders

    dev_config["aws:region"] = region
    message = _reject(dev_config)
    assert message.startswith(f"coreburst:region: {region!r} is not an AWS region name")
    partitions = botocore.loaders.Loader().load_data("endpoints")["partitions"]
    assert all(region not in p["regions"] for p in partitions)


def test_every_botocore_region_is_accepted() -> None:
    import botocore.loaders

    from guardrails.regions import aws_region

    partitions = botocore.loaders.Loader().load_data("endpoints")["partitions"]
    regions = [r for p in partitions for r in p["regions"]]
    assert len(regions) > 30
    for r in regions:
        assert aws_region(r) == r


# -- non-finite numbers (item 17) ---------------------------------------------------------------
@pytest.mark.parametrize("value", [".inf", "-.inf", ".nan"])
def test_non_finite_budget_is_refused(dev_config: dict[str, Any], value: str) -> None:
    """YAML 1.1's .inf/.nan (yaml.org/type/float.html) load as Python floats."""
    import yaml

    dev_config["coreburst:budget"]["monthlyUsd"] = yaml.safe_load(value)
    assert _reject(dev_config).startswith("coreburst:budget.monthlyUsd: ")


def test_every_float_field_of_the_stack_config_is_finite() -> None:
    """Walk the model: each float field, wherever it sits, refuses infinity and NaN."""
    import typing

    from pydantic import BaseModel

    from infra.config import StackConfig

    def floats(annotation: Any) -> bool:
        if annotation is float:
            return True
        return any(floats(a) for a in typing.get_args(annotation))

    def models(annotation: Any) -> list[type[BaseModel]]:
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            return [annotation]
        return [m for a in typing.get_args(annotation) for m in models(a)]

    seen: set[type[BaseModel]] = set()
    todo: list[type[BaseModel]] = [StackConfig]
    checked = []
    while todo:
        cls = todo.pop()
        if cls in seen:
            continue
        seen.add(cls)
        for name, field in cls.model_fields.items():
            todo += models(field.annotation)
            if floats(field.annotation):
                assert cls.model_config.get("allow_inf_nan") is False, f"{cls.__name__}.{name}"
                checked.append(f"{cls.__name__}.{name}")
    assert "Budget.monthly_usd" in checked and "Budget.thresholds_percent" in checked


def test_a_burst_section_is_accepted_and_declares_only_the_node_join(
    dev_config: dict[str, Any],
) -> None:
    """`coreburst:burst` belongs to `coreburst burst slurm-conf` (coreburst/burst/config.py), except
    `node` (infra/config.py BurstNode) and the network keys (SlurmNetwork): `pulumi up` passes
    the controller-side keys through and declares only what burst nodes read to join Slurm
    (tests/unit/infra/test_userdata_burst.py) and the security group that lets them reach it
    (tests/unit/infra/test_slurm_network.py)."""
    dev_config["coreburst:vpn"] = VPN
    plain = evaluate_config("dev", dev_config)
    dev_config["coreburst:burst"] = {
        "coreNodes": "dgx[01-04]",
        "node": {"confServer": "slurmctl.corp.example"},
        "onPrem": ON_PREM,
    }
    with_burst = evaluate_config("dev", dev_config)
    assert with_burst.config.burst is not None
    assert with_burst.config.burst.model_extra == {"coreNodes": "dgx[01-04]"}
    added = {r.name for r in with_burst.resources} - {r.name for r in plain.resources}
    network = {n for n in added if n.startswith("net-slurm")}
    assert "net-slurm" in network
    spot = {
        n for n in added if n.startswith("guardrails-spot")
    }  # tests/unit/infra/test_spot_events.py
    assert added - network - spot == {
        "slurm-munge-key",
        "slurm-conf-server",
        "dev-p5-node-slurm-join",
    }
