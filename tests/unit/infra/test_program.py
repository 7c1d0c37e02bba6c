"""The Pulumi program under mocks: the resource graph both example stacks declare."""

from __future__ import annotations

import base64
import collections
import json
from typing import Any

import pytest

from coreburst.common.catalog import load_catalog
from infra.offline import Evaluation, evaluate_config

CAT = load_catalog()
COST_TAGS = {"team", "project", "cost-center", "environment"}


def _counts(ev: Evaluation) -> dict[str, int]:
    return dict(collections.Counter(r.typ.split(":")[-1] for r in ev.resources if r.custom))


def test_dev_graph(dev: Evaluation) -> None:
    counts = _counts(dev)
    assert counts["LaunchTemplate"] == 1
    assert counts["Group"] == 1
    assert counts["PlacementGroup"] == 1  # spot is self-bought capacity
    assert counts["LustreFileSystem"] == 1
    assert counts["DataRepositoryAssociation"] == 1
    assert counts["NatGateway"] == 1
    assert counts["Budget"] == 1
    assert "Connection" not in counts and "Gateway" not in counts
    components = {r.typ for r in dev.resources if not r.custom}
    assert {
        "coreburst:infra:Network",
        "coreburst:infra:GpuCluster",
        "coreburst:infra:Lustre",
        "coreburst:infra:CheckpointStore",
        "coreburst:infra:Budget",
    } <= components
    assert "coreburst:infra:HybridLink" not in components


def test_prod_graph(prod: Evaluation) -> None:
    counts = _counts(prod)
    assert counts["LaunchTemplate"] == 2
    assert counts["Group"] == 2
    assert counts["Connection"] == 2  # redundant: two locations
    assert counts["PrivateVirtualInterface"] == 2
    assert counts["GatewayAssociation"] == 1
    assert counts["DataRepositoryAssociation"] == 2
    # Only the on-demand trn2 cluster gets a placement group; the Capacity Block must not.
    assert counts["PlacementGroup"] == 1
    fs = prod.of_type("aws:fsx/lustreFileSystem:LustreFileSystem")[0].inputs
    assert fs["efaEnabled"] is True
    assert fs["metadataConfiguration"] == {"mode": "USER_PROVISIONED", "iops": 12000}
    assert fs["dataCompressionType"] == "LZ4"
    assert fs["fileSystemTypeVersion"] == "2.15"


def _launch_template(ev: Evaluation, cluster: str) -> dict[str, Any]:
    return ev.named(f"{cluster}-lt").inputs


def _layout(nics: list[dict[str, Any]]) -> list[tuple[int, int, str]]:
    return [
        (n["networkCardIndex"], n["deviceIndex"], n.get("interfaceType", "interface")) for n in nics
    ]


@pytest.mark.parametrize("instance_type", sorted(CAT.instances))
def test_efa_layout_for_every_catalog_type(dev_config: dict[str, Any], instance_type: str) -> None:
    region = next(iter(CAT.instances[instance_type].on_demand_usd_per_hour))
    dev_config["aws:region"] = region
    dev_config["coreburst:availabilityZone"] = f"{region}a"
    dev_config["coreburst:clusters"][0]["instanceType"] = instance_type
    ev = evaluate_config("efa", dev_config)
    nics = _launch_template(ev, "dev-p5")["networkInterfaces"]
    expected = {
        "p5.48xlarge": 32,
        "p5e.48xlarge": 32,
        "p5en.48xlarge": 16,
        "trn2.48xlarge": 16,
        "p4d.24xlarge": 4,
    }[instance_type]
    layout = _layout(nics)
    assert len(layout) == expected + 1  # the EFA devices plus card 0's ENA
    assert layout[0] == (0, 0, "interface")
    assert layout[1] == (0, 1, "efa-only")
    assert all(dev_idx == 0 and kind == "efa-only" for _, dev_idx, kind in layout[2:])
    cards = [card for card, _, _ in layout[1:]]
    assert sorted(cards) == list(range(expected)), "each EFA card used exactly once"
    assert len({n["subnetId"] for n in nics}) == 1
    assert all(n["deleteOnTermination"] == "true" for n in nics)
    assert all(n["associatePublicIpAddress"] == "false" for n in nics)


def test_launch_template_hardening(dev: Evaluation) -> None:
    lt = _launch_template(dev, "dev-p5")
    assert lt["metadataOptions"]["httpTokens"] == "required"
    ebs = lt["blockDeviceMappings"][0]["ebs"]
    assert (ebs["volumeType"], ebs["encrypted"]) == ("gp3", "true")
    assert lt["imageId"] == "ami-0123456789abcdef0"  # resolved from the SSM parameter
    script = base64.b64decode(lt["userData"]).decode()
    assert "nvidia_gpu" in script and "amazon-cloudwatch-agent-ctl" in script
    assert "mount -t lustre" in script and "@tcp:/abcdefgh" in script


def test_trn2_user_data_publishes_neuron_metrics(prod: Evaluation) -> None:
    script = base64.b64decode(_launch_template(prod, "train-trn2")["userData"]).decode()
    assert "neuron-monitor" in script and "neuroncore_utilization" in script
    assert "nvidia_gpu" not in script


def test_capacity_block_targeting_without_placement_group(prod: Evaluation) -> None:
    lt = _launch_template(prod, "train-p5en")
    assert lt["instanceMarketOptions"] == {"marketType": "capacity-block"}
    target = lt["capacityReservationSpecification"]["capacityReservationTarget"]
    assert target == {"capacityReservationId": "cr-0a1b2c3d4e5f60718"}
    asg = prod.named("train-p5en-asg").inputs
    assert "placementGroup" not in asg
    assert prod.named("train-trn2-asg").inputs["placementGroup"] == "train-trn2-pg-id"


def test_spot_cluster_uses_mixed_instances_policy(dev: Evaluation) -> None:
    asg = dev.named("dev-p5-asg").inputs
    dist = asg["mixedInstancesPolicy"]["instancesDistribution"]
    assert dist["onDemandPercentageAboveBaseCapacity"] == 0
    assert "launchTemplate" not in asg
    assert asg["desiredCapacity"] == 2


def _sg_rules(ev: Evaluation) -> list[dict[str, Any]]:
    rules = []
    for r in ev.resources:
        if r.typ.startswith("aws:vpc/securityGroup"):
            direction = "in" if "Ingress" in r.typ else "out"
            rules.append({"direction": direction, "name": r.name, **r.inputs})
    return rules


def test_security_group_rules_exactly_as_required(dev: Evaluation) -> None:
    efa, lustre, node = "net-efa-id", "net-lustre-id", "net-node-id"
    got = {
        (
            r["securityGroupId"],
            r["direction"],
            r["ipProtocol"],
            r.get("fromPort"),
            r.get("toPort"),
            r.get("referencedSecurityGroupId") or r.get("cidrIpv4"),
        )
        for r in _sg_rules(dev)
    }
    lnet = {
        (owner, direction, "tcp", low, high, peer)
        for owner, peer in ((lustre, lustre), (lustre, node), (node, node), (node, lustre))
        for direction in ("in", "out")
        for low, high in ((988, 988), (1018, 1023))
    }
    assert got == {
        (efa, "in", "-1", None, None, efa),
        (efa, "out", "-1", None, None, efa),
        (node, "out", "tcp", 443, 443, "0.0.0.0/0"),
        *lnet,
    }
    assert not any(r["direction"] == "in" and "cidrIpv4" in r for r in _sg_rules(dev))


def test_lustre_and_cluster_share_a_subnet(prod: Evaluation) -> None:
    fs = prod.of_type("aws:fsx/lustreFileSystem:LustreFileSystem")[0].inputs
    assert fs["subnetIds"] == "net-private-us-east-2b-id"
    for asg in prod.of_type("aws:autoscaling/group:Group"):
        assert asg.inputs["vpcZoneIdentifiers"] == ["net-private-us-east-2b-id"]
    subnet = prod.named("net-private-us-east-2b").inputs
    assert subnet["availabilityZone"] == "us-east-2b"
    # EFA-enabled Lustre joins the cluster's EFA group.
    assert fs["securityGroupIds"] == ["net-lustre-id", "net-efa-id"]


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_every_taggable_resource_carries_cost_tags(
    stack: str, dev: Evaluation, prod: Evaluation
) -> None:
    ev = {"dev": dev, "prod": prod}[stack]
    (provider,) = ev.of_type("pulumi:providers:aws")
    default_tags = json.loads(provider.inputs["defaultTags"])["tags"]
    assert set(default_tags) >= COST_TAGS
    assert default_tags["coreburst-stack"] == stack
    for r in ev.resources:
        if r.custom and r.typ != "pulumi:providers:aws":
            assert r.provider and r.provider.endswith("$pulumi:providers:aws::aws::aws-id"), (
                f"{r.name} does not use the tagging provider"
            )
    # Instances launched by an ASG get no default tags: the launch template and the ASG tag them.
    for lt in ev.of_type("aws:ec2/launchTemplate:LaunchTemplate"):
        for spec in lt.inputs["tagSpecifications"]:
            assert set(spec["tags"]) >= COST_TAGS
    for asg in ev.of_type("aws:autoscaling/group:Group"):
        tags = {t["key"] for t in asg.inputs["tags"] if t["propagateAtLaunch"]}
        assert tags >= COST_TAGS


def test_gateway_association_is_protected_and_slow(prod: Evaluation) -> None:
    assoc = prod.named("link-dxgw-assoc")
    assert assoc.inputs["allowedPrefixes"] == ["10.80.0.0/16"]


def test_budget_filters_on_stack_tag(prod: Evaluation) -> None:
    budget = prod.named("budget-monthly").inputs
    assert budget["limitAmount"] == "1200000.00"
    assert budget["costFilters"] == [
        {"name": "TagKeyValue", "values": ["user:coreburst-stack$prod"]}
    ]
    thresholds = sorted(
        n["threshold"] for n in budget["notifications"] if n["notificationType"] == "ACTUAL"
    )
    assert thresholds == [50, 80, 100]


def test_checkpoint_bucket_private_encrypted_versioned(dev: Evaluation) -> None:
    pab = dev.named("checkpoints-public-access").inputs
    assert all(
        pab[k]
        for k in (
            "blockPublicAcls",
            "blockPublicPolicy",
            "ignorePublicAcls",
            "restrictPublicBuckets",
        )
    )
    sse = dev.named("checkpoints-sse").inputs["rules"][0]
    assert sse["applyServerSideEncryptionByDefault"]["sseAlgorithm"] == "aws:kms"
    assert dev.named("checkpoints-versioning").inputs["versioningConfiguration"] == {
        "status": "Enabled"
    }


def test_instance_profile_is_least_privilege(dev: Evaluation) -> None:
    attached = {
        r.inputs["policyArn"]
        for r in dev.of_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment")
    }
    assert attached == {
        "arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore",
        "arn:aws:iam::aws:policy/CloudWatchAgentServerPolicy",
    }
    doc = json.loads(dev.named("dev-p5-node-checkpoints").inputs["policy"])
    resources = {s["Resource"] for s in doc["Statement"]}
    assert resources == {"arn:aws:s3:::checkpoints-bucket", "arn:aws:s3:::checkpoints-bucket/*"}
    actions = {a for s in doc["Statement"] for a in s["Action"]}
    assert not any("*" in a for a in actions)


def test_stack_outputs(dev: Evaluation, prod: Evaluation) -> None:
    assert dev.outputs["asgNames"] == {"dev-p5": "dev-p5-asg"}
    assert dev.outputs["lustreMountName"] == "abcdefgh"
    assert prod.outputs["directConnectConnectionIds"] == ["link-dx-eqdc2-id", "link-dx-csva1-id"]
    # 2 spot p5 at the catalog's estimate, computed here independently of infra.cost.
    p5 = CAT.instances["p5.48xlarge"].on_demand_usd_per_hour["us-east-1"].value
    spot = p5 * CAT.spot_fraction_of_on_demand.value
    ebs = 2 * 512 * CAT.ebs_gp3_usd_per_gb_month.value / 730
    lustre = 1200 * 0.145 / 730
    nat = CAT.nat_gateway.usd_per_hour.value
    eip = 0.005  # its Elastic IP: $0.005 per public IPv4 address-hour (aws.amazon.com/vpc/pricing/)
    assert dev.outputs["estimatedCostPerHourUsd"] == round(2 * spot + ebs + lustre + nat + eip, 2)
