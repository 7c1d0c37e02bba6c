"""Resource validators: a passing resource, then one changed field per failure."""

from __future__ import annotations

from typing import Any

import pytest

from policies.ec2 import accelerated_instance_allowlist, efa_interface_layout, imdsv2_required
from policies.network import no_public_ingress
from policies.storage import (
    ebs_encrypted,
    fsx_lustre_encrypted,
    s3_encrypted,
    s3_public_access_blocked,
)
from policies.tags import required_cost_tags, taggable

LT = "aws:ec2/launchTemplate:LaunchTemplate"
ASG = "aws:autoscaling/group:Group"
VPC = "aws:ec2/vpc:Vpc"
INGRESS = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
SG = "aws:ec2/securityGroup:SecurityGroup"


# -- required-cost-tags ------------------------------------------------------------------------
def test_taggable_follows_the_provider_schema() -> None:
    assert taggable(VPC)
    assert taggable("aws:fsx/lustreFileSystem:LustreFileSystem")
    assert not taggable("aws:ec2/route:Route")
    assert not taggable("aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock")
    assert not taggable("coreburst:infra:Network")


def test_default_tags_satisfy_a_taggable_resource(h: Any) -> None:
    assert h.violations(required_cost_tags, h.rargs(VPC, {"cidrBlock": "10.0.0.0/16"})) == []


def test_missing_default_tag_is_reported(h: Any) -> None:
    tags = {k: v for k, v in h.TAGS.items() if k != "team"}
    args = h.rargs(VPC, {}, name="net-vpc", prov=h.provider(tags))
    assert h.violations(required_cost_tags, args) == [
        "aws:ec2/vpc:Vpc net-vpc is missing cost tags: team"
    ]


def test_resource_tags_and_tags_all_count(h: Any) -> None:
    bare = h.provider({"other": "x"})
    args = h.rargs(VPC, {"tags": {"team": "ml"}, "tagsAll": {**h.TAGS, "team": ""}}, prov=bare)
    assert h.violations(required_cost_tags, args) == []


def test_environment_outside_the_allowed_values(h: Any) -> None:
    args = h.rargs(VPC, {"tags": {"environment": "qa"}}, name="v")
    assert h.violations(required_cost_tags, args) == [
        "aws:ec2/vpc:Vpc v has environment='qa'; allowed: dev, staging, prod"
    ]


def test_provider_default_tags_checked(h: Any) -> None:
    props = {"region": "us-east-1", "defaultTags": '{"tags": {"team": "ml"}}'}
    args = h.rargs("pulumi:providers:aws", props, name="aws")
    assert h.violations(required_cost_tags, args) == [
        "provider aws defaultTags is missing cost tags: project, cost-center, environment"
    ]


def test_launch_template_tag_specifications(h: Any) -> None:
    lt = h.launch_template()
    assert h.violations(required_cost_tags, h.rargs(LT, lt, name="lt")) == []
    lt["tagSpecifications"][1]["tags"].pop("cost-center")
    lt["tagSpecifications"].pop(0)
    assert h.violations(required_cost_tags, h.rargs(LT, lt, name="lt")) == [
        f"{LT} lt has no tagSpecifications for instance",
        f"{LT} lt tagSpecifications[volume] is missing cost tags: cost-center",
    ]


def test_asg_tags_must_propagate(h: Any) -> None:
    tags = [{"key": k, "value": v, "propagateAtLaunch": True} for k, v in h.TAGS.items()]
    assert h.violations(required_cost_tags, h.rargs(ASG, {"tags": tags}, name="asg")) == []
    tags[0]["propagateAtLaunch"] = False
    assert h.violations(required_cost_tags, h.rargs(ASG, {"tags": tags}, name="asg")) == [
        f"{ASG} asg tags (propagateAtLaunch) is missing cost tags: team"
    ]


def test_required_keys_are_configurable(h: Any) -> None:
    args = h.rargs(VPC, {}, name="v", config={"requiredKeys": ["team", "owner"]})
    assert h.violations(required_cost_tags, args) == [
        "aws:ec2/vpc:Vpc v is missing cost tags: owner"
    ]


# -- accelerated-instance-allowlist ------------------------------------------------------------
def test_catalog_types_are_allowed_by_default(h: Any) -> None:
    assert h.violations(accelerated_instance_allowlist, h.rargs(LT, h.launch_template())) == []


def test_accelerated_type_outside_the_allowlist(h: Any) -> None:
    lt = h.launch_template()
    lt["instanceType"] = "p4de.24xlarge"
    args = h.rargs(LT, lt, name="lt", config={"allowedInstanceTypes": ["p5.48xlarge"]})
    assert h.violations(accelerated_instance_allowlist, args) == [
        f"{LT} lt uses p4de.24xlarge, which is not in allowedInstanceTypes (p5.48xlarge)"
    ]


def test_non_accelerated_types_are_not_this_policys_business(h: Any) -> None:
    args = h.rargs(LT, {"instanceType": "m7i.large"}, config={"allowedInstanceTypes": []})
    assert h.violations(accelerated_instance_allowlist, args) == []


# -- efa-interface-layout ------------------------------------------------------------------------
def test_catalog_layout_passes(h: Any) -> None:
    assert h.violations(efa_interface_layout, h.rargs(LT, h.launch_template())) == []
    p5en = h.launch_template("p5en.48xlarge", 16)
    assert h.violations(efa_interface_layout, h.rargs(LT, p5en)) == []


def test_p5_with_8_efa_interfaces(h: Any) -> None:
    args = h.rargs(LT, h.launch_template(efa=8), name="lt")
    assert h.violations(efa_interface_layout, args) == [
        f"{LT} lt: 8 EFA interfaces for p5.48xlarge; the catalog says 32 "
        "(one per EFA-capable network card)"
    ]


def test_card_zero_must_start_with_ena(h: Any) -> None:
    lt = h.launch_template()
    lt["networkInterfaces"][0]["interfaceType"] = "efa"
    assert h.violations(efa_interface_layout, h.rargs(LT, lt, name="lt")) == [
        f"{LT} lt: 33 EFA interfaces for p5.48xlarge; the catalog says 32 "
        "(one per EFA-capable network card)",
        f"{LT} lt: card 0 device 0 must be a plain ENA interface, found efa",
        f"{LT} lt: network card 0 carries 2 EFA interfaces; use one per card",
    ]


def test_other_cards_efa_only_at_device_zero(h: Any) -> None:
    lt = h.launch_template()
    lt["networkInterfaces"][5]["interfaceType"] = "efa"
    assert h.violations(efa_interface_layout, h.rargs(LT, lt, name="lt")) == [
        f"{LT} lt: card 4 device 0 must be efa-only, found efa"
    ]


def test_card_used_twice(h: Any) -> None:
    lt = h.launch_template()
    lt["networkInterfaces"][3]["networkCardIndex"] = 1.0  # card 2 -> card 1, device 0 again
    found = h.violations(efa_interface_layout, h.rargs(LT, lt, name="lt"))
    assert found == [
        f"{LT} lt: network card 1 device 0 is used 2 times",
        f"{LT} lt: network card 1 carries 2 EFA interfaces; use one per card",
    ]


def test_each_card_its_own_device_index_fails(h: Any) -> None:
    lt = h.launch_template()
    lt["networkInterfaces"][2]["deviceIndex"] = 2.0
    assert h.violations(efa_interface_layout, h.rargs(LT, lt, name="lt")) == [
        f"{LT} lt: card 1 device 2: a card holds at most devices 0 and 1"
    ]


def test_interfaces_in_two_subnets(h: Any) -> None:
    lt = h.launch_template()
    lt["networkInterfaces"][-1]["subnetId"] = "subnet-other"
    assert h.violations(efa_interface_layout, h.rargs(LT, lt, name="lt")) == [
        f"{LT} lt: interfaces span 2 subnets; EFA needs one subnet (one AZ) for all"
    ]


def test_no_efa_interfaces_is_not_an_efa_layout(h: Any) -> None:
    assert h.violations(efa_interface_layout, h.rargs(LT, h.launch_template(efa=0))) == []


# -- imdsv2-required ---------------------------------------------------------------------------
def test_imdsv2(h: Any) -> None:
    lt = h.launch_template()
    assert h.violations(imdsv2_required, h.rargs(LT, lt)) == []
    lt["metadataOptions"]["httpTokens"] = "optional"
    assert h.violations(imdsv2_required, h.rargs(LT, lt, name="lt")) == [
        f'{LT} lt allows IMDSv1: set metadataOptions.httpTokens to "required" (is optional)'
    ]
    del lt["metadataOptions"]
    assert h.violations(imdsv2_required, h.rargs(LT, lt, name="lt")) == [
        f'{LT} lt allows IMDSv1: set metadataOptions.httpTokens to "required" (is unset)'
    ]


# -- encryption ---------------------------------------------------------------------------------
def test_ebs_encrypted(h: Any) -> None:
    lt = h.launch_template()
    assert h.violations(ebs_encrypted, h.rargs(LT, lt)) == []
    lt["blockDeviceMappings"][0]["ebs"]["encrypted"] = "false"
    assert h.violations(ebs_encrypted, h.rargs(LT, lt, name="lt")) == [
        f"{LT} lt block device /dev/sda1 is not encrypted: set ebs.encrypted to true"
    ]
    vol = h.rargs("aws:ebs/volume:Volume", {"size": 10.0}, name="v")
    assert h.violations(ebs_encrypted, vol) == [
        "aws:ebs/volume:Volume v is not encrypted: set encrypted to true"
    ]


def test_fsx_lustre_encrypted(h: Any) -> None:
    typ = "aws:fsx/lustreFileSystem:LustreFileSystem"
    fs = {"deploymentType": "PERSISTENT_2", "storageCapacity": 1200.0}
    assert h.violations(fsx_lustre_encrypted, h.rargs(typ, fs)) == []
    assert h.violations(
        fsx_lustre_encrypted, h.rargs(typ, {**fs, "deploymentType": "SCRATCH_1"}, name="fs")
    ) == [
        f"{typ} fs uses SCRATCH_1, which does not encrypt data in transit; "
        "use SCRATCH_2 or PERSISTENT_2"
    ]
    cmk = h.rargs(typ, fs, name="fs", config={"requireCustomerManagedKey": True})
    assert h.violations(fsx_lustre_encrypted, cmk) == [
        f"{typ} fs has no kmsKeyId: a customer managed key is required"
    ]


def test_s3_encrypted(h: Any) -> None:
    typ = "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration"
    rules = [{"applyServerSideEncryptionByDefault": {"sseAlgorithm": "aws:kms"}}]
    assert h.violations(s3_encrypted, h.rargs(typ, {"rules": rules})) == []
    assert h.violations(s3_encrypted, h.rargs(typ, {"rules": []}, name="sse")) == [
        f"{typ} sse has no default encryption rule (sseAlgorithm aws:kms or aws:kms:dsse or AES256)"
    ]


def test_s3_public_access_blocked(h: Any) -> None:
    typ = "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock"
    flags = dict.fromkeys(
        ("blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls", "restrictPublicBuckets"),
        True,
    )
    assert h.violations(s3_public_access_blocked, h.rargs(typ, flags)) == []
    flags["blockPublicPolicy"] = False
    assert h.violations(s3_public_access_blocked, h.rargs(typ, flags, name="pab")) == [
        f"{typ} pab leaves public access open: blockPublicPolicy"
    ]
    bucket = h.rargs("aws:s3/bucket:Bucket", {"acl": "public-read"}, name="b")
    assert h.violations(s3_public_access_blocked, bucket) == [
        "aws:s3/bucket:Bucket b has public ACL public-read"
    ]


# -- no-public-ingress -------------------------------------------------------------------------
SSH = {"ipProtocol": "tcp", "fromPort": 22.0, "toPort": 22.0, "cidrIpv4": "10.0.0.0/8"}


def test_private_ingress_passes(h: Any) -> None:
    assert h.violations(no_public_ingress, h.rargs(INGRESS, SSH)) == []


@pytest.mark.parametrize(
    ("field", "cidr"), [("cidrIpv4", "0.0.0.0/0"), ("cidrIpv6", "::/0")], ids=["v4", "v6"]
)
def test_public_ssh(h: Any, field: str, cidr: str) -> None:
    props = {**SSH, "cidrIpv4": None, field: cidr}
    assert h.violations(no_public_ingress, h.rargs(INGRESS, props, name="ssh")) == [
        f"{INGRESS} ssh allows ingress from {cidr} on tcp 22"
    ]


def test_inline_security_group_ingress(h: Any) -> None:
    props = {"ingress": [{"protocol": "-1", "cidrBlocks": ["0.0.0.0/0"]}]}
    assert h.violations(no_public_ingress, h.rargs(SG, props, name="sg")) == [
        f"{SG} sg allows ingress from 0.0.0.0/0 on all traffic"
    ]


def test_public_ingress_when_explicitly_allowed(h: Any) -> None:
    props = {**SSH, "cidrIpv4": "0.0.0.0/0"}
    args = h.rargs(INGRESS, props, config={"allowPublicIngress": True})
    assert h.violations(no_public_ingress, args) == []
