"""The two pricing adapters agree, item by item, to the cent.

:mod:`infra.cost` prices a stack from its config; :mod:`policies.pricing` prices the resources
the program declares for it (the real program run under Pulumi's mocks by
:func:`infra.offline.evaluate_config`, turned into policy resources the way ``coreburst plan``
does). Both call :mod:`coreburst.common.pricing`; these tests check that they also agree on *what*
is
billed: which field gives the node count, which defaults a file system takes, how many AZs an
endpoint is billed in, which resources bill at all. Checked for both example stacks and for
generated stack configs.

What AWS bills, per decision (the pages the code cites):
- instances: the ASG's desired capacity (EC2 Auto Scaling API reference,
  CreateAutoScalingGroup: without DesiredCapacity "the default is the minimum size of the
  group"), https://docs.aws.amazon.com/autoscaling/ec2/APIReference/API_CreateAutoScalingGroup.html
- interface endpoints: "per VPC endpoint per AZ" hour, https://aws.amazon.com/privatelink/pricing/
- public IPv4: every public IPv4 address, the NAT gateway's Elastic IP included, per hour
  (Amazon VPC pricing, Public IPv4 Address), https://aws.amazon.com/vpc/pricing/
- FSx for Lustre: DeploymentType "(Default = SCRATCH_1)" (FSx API reference,
  CreateFileSystemLustreConfiguration),
  https://docs.aws.amazon.com/fsx/latest/APIReference/API_CreateFileSystemLustreConfiguration.html
- transit gateway: per attachment-hour, VPC and Direct Connect gateway attachments alike,
  https://aws.amazon.com/transit-gateway/pricing/
- Secrets Manager: per secret-month, https://aws.amazon.com/secrets-manager/pricing/
- Site-to-Site VPN: per VPN connection-hour, https://aws.amazon.com/vpn/pricing/
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pulumi_policy import PolicyResource

from coreburst.common import pricing
from coreburst.common.catalog import load_catalog
from coreburst.common.pricing import CostLine, UnpricedError
from infra.cost import estimate_stack
from infra.offline import evaluate_config, load_stack_yaml
from policies.common import ASG
from policies.pricing import asg_nodes, price_resources
from policies.runner import default_options
from policies.sources import from_offline

CAT = load_catalog()
MARKETS = ("on-demand", "spot", "capacity-reservation", "capacity-block")


def _by_item(lines: list[CostLine]) -> dict[str, tuple[float, float]]:
    out: dict[str, tuple[float, float]] = {}
    for x in lines:
        assert x.item not in out, f"{x.item} priced twice"
        assert x.source, f"{x.item} has no price source"
        # Each figure names a source listed in the catalog, with its date.
        for part in x.source.split("; "):
            key, as_of = part.split()[:2]
            assert key in CAT.sources and as_of[:4].isdigit(), part
        out[x.item] = (round(x.hourly_usd, 4), round(x.monthly_usd, 2))
    return out


def both(stack: str, config: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(config-priced, resource-priced) lines of one stack config, by item."""
    ev = evaluate_config(stack, config)
    from_config = estimate_stack(ev.config, CAT)
    from_resources = price_resources(from_offline(ev.resources, stack), CAT)
    return _by_item(from_config), _by_item(from_resources)


def assert_agree(stack: str, config: dict[str, Any]) -> dict[str, Any]:
    a, b = both(stack, config)
    assert a == b
    return a


@pytest.mark.parametrize("stack", ["dev", "prod", "burst"])
def test_example_stacks_agree(stack: str) -> None:
    lines = assert_agree(stack, load_stack_yaml(stack))
    # The NAT gateway's Elastic IP bills as a public IPv4 address (every stack has one).
    eip = next(v for k, v in lines.items() if k.startswith("net-nat-eip-"))
    assert eip == (0.005, round(0.005 * 730, 2))


def test_a_site_to_site_vpn_bills_per_connection_hour() -> None:
    """AWS VPN pricing (https://aws.amazon.com/vpn/pricing/): each Site-to-Site VPN connection
    per connection-hour; the virtual private and customer gateways have no charge of their own."""
    lines = assert_agree("burst", load_stack_yaml("burst"))
    fig = CAT.site_to_site_vpn_connection_usd_per_hour
    assert fig is not None
    assert lines["vpn-connection"] == (fig.value, round(fig.value * 730, 2))
    assert not [k for k in lines if k.startswith(("vpn-vgw", "vpn-cgw", "vpn-route", "vpn-onprem"))]


# -- generated stacks --------------------------------------------------------------------------
def _types_for(region: str, market: str) -> list[str]:
    out = []
    for name, facts in CAT.instances.items():
        prices = (
            facts.capacity_block_usd_per_hour
            if market == "capacity-block"
            else facts.on_demand_usd_per_hour
        )
        if region in prices:
            out.append(name)
    return sorted(out)


@st.composite
def clusters(draw: st.DrawFn, region: str) -> list[dict[str, Any]]:
    out = []
    for i in range(draw(st.integers(1, 3))):
        market = draw(st.sampled_from(MARKETS))
        types = _types_for(region, market)
        if not types:
            market, types = "on-demand", _types_for(region, "on-demand")
        capacity: dict[str, Any] = {"model": market}
        if market in ("capacity-reservation", "capacity-block"):
            capacity["reservationId"] = "cr-0123456789abcdef0"
        out.append(
            {
                "name": f"c{i}",
                "instanceType": draw(st.sampled_from(types)),
                "nodes": draw(st.integers(0, 64)),
                "capacity": capacity,
                "rootVolumeGib": draw(st.integers(100, 4096)),
            }
        )
    return out


@st.composite
def lustres(draw: st.DrawFn) -> dict[str, Any] | None:
    kind = draw(st.sampled_from(["none", "SCRATCH_2", "PERSISTENT_2", "PERSISTENT_2-efa"]))
    if kind == "none":
        return None
    if kind == "SCRATCH_2":
        cap = draw(st.sampled_from([1200, 2400 * draw(st.integers(1, 40))]))
        return {"storageCapacityGib": cap, "deploymentType": "SCRATCH_2"}
    tput = draw(st.sampled_from([125, 250, 500, 1000]))
    lu: dict[str, Any] = {"deploymentType": "PERSISTENT_2", "perUnitStorageThroughput": tput}
    if kind.endswith("efa"):
        step = {125: 38_400, 250: 19_200, 500: 9_600, 1000: 4_800}[tput]
        lu |= {"efaEnabled": True, "storageCapacityGib": step * draw(st.integers(1, 4))}
    else:
        lu["storageCapacityGib"] = draw(st.sampled_from([1200, 2400 * draw(st.integers(1, 40))]))
    return lu


@st.composite
def stack_configs(draw: st.DrawFn) -> dict[str, Any]:
    region = draw(st.sampled_from(["us-east-1", "us-east-2", "us-west-2"]))
    cfg: dict[str, Any] = {
        "aws:region": region,
        "coreburst:availabilityZone": f"{region}{draw(st.sampled_from('abc'))}",
        "coreburst:tags": {
            "team": "t",
            "project": "p",
            "costCenter": "cc-1",
            "environment": "dev",
        },
        "coreburst:budget": {"monthlyUsd": 100_000},
        "coreburst:vpc": {
            "natGateway": draw(st.booleans()),
            "interfaceEndpoints": draw(st.booleans()),
        },
        "coreburst:clusters": draw(clusters(region)),
        "coreburst:guardrails": {"enabled": draw(st.booleans())},
    }
    lustre = draw(lustres())
    if lustre:
        cfg["coreburst:lustre"] = lustre
    if draw(st.booleans()):
        locations = draw(
            st.lists(
                st.sampled_from(["EqDC2", "CSVA1", "Eq LD5 / London"]),
                min_size=1,
                max_size=2,
                unique=True,
            )
        )
        cfg["coreburst:hybridLink"] = {
            "connections": [
                {
                    "location": loc,
                    "bandwidth": draw(st.sampled_from(["1Gbps", "10Gbps", "100Gbps", "400Gbps"])),
                    "vlan": 100 + i,
                }
                for i, loc in enumerate(locations)
            ],
            "customerAsn": 65010,
            "onPremPrefixes": ["10.0.0.0/14"],
            "vifType": draw(st.sampled_from(["private", "transit"])),
        }
    return cfg


@settings(
    max_examples=30,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(stack_configs())
def test_generated_stacks_agree(config: dict[str, Any]) -> None:
    lines = assert_agree("gen", config)
    clusters = config["coreburst:clusters"]
    # Every cluster has its instance line; volumes bill only while instances run.
    for c in clusters:
        assert f"{c['name']}-asg" in lines
        assert (f"{c['name']}-asg/volumes" in lines) == (c["nodes"] > 0)


# -- the decisions, each against the page it follows ---------------------------------------------
def _asg(props: dict[str, Any]) -> PolicyResource:
    return PolicyResource(ASG, props, "urn:asg", "asg", default_options(), None, None, [], {})


def test_node_count_is_the_desired_capacity_then_min_size() -> None:
    """CreateAutoScalingGroup: an ASG runs DesiredCapacity; absent, it starts at MinSize.
    https://docs.aws.amazon.com/autoscaling/ec2/APIReference/API_CreateAutoScalingGroup.html"""
    assert asg_nodes(_asg({"minSize": 0, "maxSize": 8, "desiredCapacity": 2}))[0] == 2
    assert asg_nodes(_asg({"minSize": 3, "maxSize": 8}))[0] == 3
    unknown = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"
    assert asg_nodes(_asg({"minSize": 0, "maxSize": 8, "desiredCapacity": unknown}))[0] == 8
    with pytest.raises(UnpricedError, match="asg"):
        asg_nodes(_asg({"desiredCapacity": unknown}))


def test_zero_node_cluster_is_priced_at_zero_instances_not_max_size() -> None:
    # GpuCluster sets maxSize max(nodes, 1); nodes 0 runs nothing and bills nothing.
    config = copy.deepcopy(load_stack_yaml("dev"))
    config["coreburst:clusters"][0]["nodes"] = 0
    lines = assert_agree("dev", config)
    assert lines["dev-p5-asg"] == (0.0, 0.0)
    assert "dev-p5-asg/volumes" not in lines


def test_lustre_defaults_follow_the_api() -> None:
    """No DeploymentType is SCRATCH_1, no StorageType is SSD (FSx API reference,
    CreateFileSystemLustreConfiguration / CreateFileSystem)."""
    line = pricing.lustre(CAT, "fs", 1200)
    assert line.detail.startswith("1200 GiB SCRATCH_1 @")
    assert line.monthly_usd == pytest.approx(1200 * 0.14)
    with pytest.raises(UnpricedError, match="fs: PERSISTENT_2 needs perUnitStorageThroughput"):
        pricing.lustre(CAT, "fs", 1200, deployment_type="PERSISTENT_2")
    with pytest.raises(UnpricedError, match="fs: the catalog prices SSD Lustre, not HDD"):
        pricing.lustre(
            CAT, "fs", 1200, deployment_type="PERSISTENT_1", throughput=12, storage_type="HDD"
        )


def test_interface_endpoints_bill_per_az() -> None:
    """https://aws.amazon.com/privatelink/pricing/: per VPC endpoint per AZ, per hour."""
    config = copy.deepcopy(load_stack_yaml("prod"))
    lines = assert_agree("prod", config)
    endpoints = {k: v for k, v in lines.items() if k in {f"net-{s}" for s in ("ssm", "logs")}}
    assert endpoints == {"net-ssm": (0.01, 7.3), "net-logs": (0.01, 7.3)}
    assert pricing.interface_endpoint(CAT, "e", azs=3).hourly_usd == pytest.approx(0.03)


def test_transit_vif_bills_two_attachments() -> None:
    config = copy.deepcopy(load_stack_yaml("prod"))
    config["coreburst:hybridLink"]["vifType"] = "transit"
    config["coreburst:hybridLink"]["mtu"] = 8500
    lines = assert_agree("prod", config)
    assert lines["link-tgw-vpc"] == lines["link-dxgw-assoc"] == (0.05, 36.5)


def test_unknown_prices_are_never_zero() -> None:
    missing = CAT.model_copy(update={"public_ipv4_usd_per_hour": None})
    with pytest.raises(UnpricedError, match=r"cannot price net-nat-eip: .*public IPv4"):
        pricing.public_ipv4(missing, "net-nat-eip")
    with pytest.raises(UnpricedError, match="v: the catalog prices gp3, not io2"):
        pricing.ebs_volumes(CAT, "v", 100, 1, "io2")
    with pytest.raises(UnpricedError, match="dx: no Direct Connect port price for '3Gbps'"):
        pricing.dx_port(CAT, "dx", "3Gbps")


# -- resource properties a preview may leave out or know only after apply ------------------------
UNKNOWN = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"  # `pulumi preview --json`'s unknown value
LT_TYPE = "aws:ec2/launchTemplate:LaunchTemplate"
FSX = "aws:fsx/lustreFileSystem:LustreFileSystem"


def _res(typ: str, name: str, props: dict[str, Any], **deps: PolicyResource) -> PolicyResource:
    return PolicyResource(
        typ,
        props,
        f"urn:{name}",
        name,
        default_options(),
        None,
        None,
        list(deps.values()),
        {k: [v] for k, v in deps.items()},
    )


def _lt(**props: Any) -> PolicyResource:
    base: dict[str, Any] = {
        "instanceType": "p5.48xlarge",
        "blockDeviceMappings": [{"ebs": {"volumeSize": 512, "volumeType": "gp3"}}],
    }
    return _res(LT_TYPE, "lt", base | props)


def test_desired_capacity_unknown_until_apply_is_priced_at_max_size_not_zero() -> None:
    lt = _lt()
    asg = _res(
        ASG, "asg", {"minSize": 0, "maxSize": 4, "desiredCapacity": UNKNOWN}, launchTemplate=lt
    )
    lines = _by_item(price_resources([asg, lt], CAT))
    rate = CAT.on_demand_price("p5.48xlarge", "us-east-1")
    assert lines["asg"] == (round(4 * rate, 4), round(4 * rate * 730, 2))


def test_what_cannot_be_priced_is_named_not_zero() -> None:
    asg = _res(ASG, "lonely-asg", {"desiredCapacity": 2})
    with pytest.raises(UnpricedError, match="cannot price lonely-asg: it has no launch template"):
        price_resources([asg], CAT)
    lt = _lt(blockDeviceMappings=[])
    asg = _res(ASG, "asg", {"desiredCapacity": 2}, launchTemplate=lt)
    with pytest.raises(UnpricedError, match="asg/volumes: the root volume's size comes from"):
        price_resources([asg, lt], CAT)
    fs = _res(FSX, "fs", {"deploymentType": "SCRATCH_2", "storageCapacity": UNKNOWN})
    with pytest.raises(UnpricedError, match="cannot price fs: its size or type is unknown"):
        price_resources([fs], CAT)


def test_a_file_system_without_deployment_type_is_scratch_1() -> None:
    """FSx API reference, CreateFileSystemLustreConfiguration: "(Default = SCRATCH_1)"."""
    fs = _res(FSX, "fs", {"storageCapacity": 2400})
    (line,) = price_resources([fs], CAT)
    assert line.detail == "2400 GiB SCRATCH_1 @ $0.14/GB-month"
    assert line.monthly_usd == pytest.approx(2400 * 0.14)
