"""Every policy over the example stacks' real resources (infra.offline), then bad stacks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from policies.runner import Violation, run_policies

LT = "aws:ec2/launchTemplate:LaunchTemplate"
ASG = "aws:autoscaling/group:Group"
CONFIG_DIR = Path(__file__).resolve().parents[3] / "policies" / "config"


def failed(violations: list[Violation]) -> set[str]:
    return {v.policy for v in violations}


def named(resources: list[Any], name: str) -> Any:
    return next(r for r in resources if r.name == name)


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_example_stacks_pass_every_policy(h: Any, stack: str) -> None:
    config = json.loads((CONFIG_DIR / f"{stack}.json").read_text())
    assert run_policies(h.stack_resources(stack), config) == []
    assert run_policies(h.stack_resources(stack)) == []


def test_dependencies_are_resolved_so_stack_policies_really_look(h: Any) -> None:
    resources = h.stack_resources("prod")
    lt = named(resources, "train-p5en-lt")
    assert {d.name for d in lt.property_dependencies["networkInterfaces"]} == {
        "net-private-us-east-2b",
        "net-efa",
        "net-node",
    }
    assert lt.provider is not None and lt.provider.props["region"] == "us-east-2"


def test_missing_tags(h: Any) -> None:
    resources = h.stack_resources("dev")
    provider = named(resources, "aws")
    tags = json.loads(provider.props["defaultTags"])
    del tags["tags"]["cost-center"]
    provider.props["defaultTags"] = json.dumps(tags)
    for r in resources:  # every resource under it sees the same provider object
        if r.provider is not None:
            r.provider.props["defaultTags"] = provider.props["defaultTags"]
    found = run_policies(resources)
    assert failed(found) == {"required-cost-tags"}
    assert "provider aws defaultTags is missing cost tags: cost-center" in {
        v.message for v in found
    }
    assert "aws:ec2/vpc:Vpc net-vpc is missing cost tags: cost-center" in {v.message for v in found}


def test_public_ssh(h: Any) -> None:
    resources = h.stack_resources("dev")
    rule = named(resources, "net-efa-in-self")
    rule.props.update(
        {"ipProtocol": "tcp", "fromPort": 22.0, "toPort": 22.0, "cidrIpv4": "0.0.0.0/0"}
    )
    rule.property_dependencies.pop("referencedSecurityGroupId")
    found = run_policies(resources)
    assert failed(found) == {"no-public-ingress", "efa-security-group-self-referencing"}
    assert (
        Violation(
            "no-public-ingress",
            "mandatory",
            "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule net-efa-in-self allows "
            "ingress from 0.0.0.0/0 on tcp 22",
            rule.urn,
        )
        in found
    )


def test_p5_with_8_efa_interfaces(h: Any) -> None:
    resources = h.stack_resources("dev")
    lt = named(resources, "dev-p5-lt")
    lt.props["networkInterfaces"] = lt.props["networkInterfaces"][:9]
    found = run_policies(resources)
    assert failed(found) == {"efa-interface-layout"}
    assert [v.message for v in found] == [
        f"{LT} dev-p5-lt: 8 EFA interfaces for p5.48xlarge; the catalog says 32 "
        "(one per EFA-capable network card)"
    ]


def test_capacity_block_plus_placement_group(h: Any) -> None:
    resources = h.stack_resources("prod")
    asg = named(resources, "train-p5en-asg")
    pg = named(resources, "train-trn2-pg")
    asg.props["placementGroup"] = "train-trn2-pg-id"
    asg.property_dependencies["placementGroup"] = [pg]
    found = run_policies(resources)
    assert failed(found) == {"no-placement-group-with-reserved-capacity"}
    assert [v.message for v in found] == [
        f"{ASG} train-p5en-asg sets placementGroup but its launch template train-p5en-lt "
        "targets capacity-block cr-0a1b2c3d4e5f60718; remove the placement group"
    ]


def test_prod_over_its_budget(h: Any) -> None:
    # 16 p5en Capacity Block 45.22 * 16 * 730 = 528,169.60; 4 trn2 on-demand 35.76 * 4 * 730
    # = 104,419.20; Lustre 38,400 * 0.60 = 23,040; 2 DX 100G 22.50 * 730 * 2 = 32,850;
    # EBS 20 * 1024 * 0.08 = 1,638.40; NAT 32.85 + its Elastic IP 3.65; 5 endpoints 36.50;
    # the guardrails' secret 0.40 -> 690,190.60
    resources = h.config_resources(
        "prod", budget={"monthlyUsd": 600_000, "thresholdsPercent": [100]}
    )
    found = run_policies(resources)
    assert failed(found) == {"monthly-cost-ceiling"}
    assert [v.message for v in found] == [
        "estimated monthly cost $690,191 exceeds the ceiling $600,000 (budget budget-monthly) "
        "by $90,191; top cost lines: train-p5en-asg $528,170, train-trn2-asg $104,419, "
        "lustre-fs $23,040"
    ]


def test_policy_config_ceiling_and_enforcement(h: Any) -> None:
    config = {"monthly-cost-ceiling": {"enforcementLevel": "advisory", "monthlyCeilingUsd": 1}}
    found = run_policies(h.stack_resources("dev"), config)
    assert [(v.policy, v.enforcement) for v in found] == [("monthly-cost-ceiling", "advisory")]
    assert run_policies(h.stack_resources("dev"), {"monthly-cost-ceiling": "disabled"}) == []
