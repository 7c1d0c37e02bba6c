"""Stack validators over hand-built resources linked by property dependencies."""

from __future__ import annotations

from typing import Any

from policies.ec2 import (
    no_placement_group_with_reserved_capacity,
    spot_or_capacity_block_outside_production,
)
from policies.network import efa_security_group_self_referencing, lustre_ports_cluster_only
from policies.stack import accelerator_count_cap, lustre_in_cluster_az, monthly_cost_ceiling
from policies.storage import s3_bucket_guarded

LT = "aws:ec2/launchTemplate:LaunchTemplate"
ASG = "aws:autoscaling/group:Group"
SG = "aws:ec2/securityGroup:SecurityGroup"
IN = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
OUT = "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule"
SUBNET = "aws:ec2/subnet:Subnet"
FSX = "aws:fsx/lustreFileSystem:LustreFileSystem"
CB = {
    "instanceMarketOptions": {"marketType": "capacity-block"},
    "capacityReservationSpecification": {
        "capacityReservationTarget": {"capacityReservationId": "cr-0123456789abcdef0"}
    },
}
SPOT = {
    "instancesDistribution": {
        "onDemandBaseCapacity": 0.0,
        "onDemandPercentageAboveBaseCapacity": 0.0,
    }
}


class Stack:
    """A small passing stack: provider, subnet, EFA + node + Lustre groups, one p5 cluster
    (2 spot nodes), a 1200 GiB PERSISTENT_2 Lustre and its rules."""

    def __init__(self, h: Any, az: str = "us-east-1a") -> None:
        self.h = h
        r = h.res
        self.provider = r(
            "pulumi:providers:aws",
            "aws",
            {"region": "us-east-1", "defaultTags": {"tags": dict(h.TAGS)}},
        )
        self.subnet = r(SUBNET, "private", {"availabilityZone": az})
        self.lustre_subnet = r(SUBNET, "lustre-subnet", {"availabilityZone": az})
        self.efa = r(SG, "efa", {})
        self.node = r(SG, "node", {})
        self.lustre_sg = r(SG, "lustre", {})
        self.rules = [
            r(
                IN,
                "efa-in",
                {"ipProtocol": "-1"},
                securityGroupId=[self.efa],
                referencedSecurityGroupId=[self.efa],
            ),
            r(
                OUT,
                "efa-out",
                {"ipProtocol": "-1"},
                securityGroupId=[self.efa],
                referencedSecurityGroupId=[self.efa],
            ),
            r(
                IN,
                "lustre-988",
                {"ipProtocol": "tcp", "fromPort": 988.0, "toPort": 988.0},
                securityGroupId=[self.lustre_sg],
                referencedSecurityGroupId=[self.efa],
            ),
            r(
                IN,
                "lustre-1018",
                {"ipProtocol": "tcp", "fromPort": 1018.0, "toPort": 1023.0},
                securityGroupId=[self.lustre_sg],
                referencedSecurityGroupId=[self.efa],
            ),
        ]
        self.lt = r(
            LT, "lt", h.launch_template(), networkInterfaces=[self.subnet, self.efa, self.node]
        )
        self.asg_props: dict[str, Any] = {
            "desiredCapacity": 2.0,
            "maxSize": 2.0,
            "minSize": 0.0,
            "mixedInstancesPolicy": dict(SPOT),
            "tags": [{"key": "environment", "value": "dev", "propagateAtLaunch": True}],
        }
        self.fs = r(
            FSX,
            "fs",
            {
                "storageCapacity": 1200.0,
                "deploymentType": "PERSISTENT_2",
                "perUnitStorageThroughput": 125.0,
            },
            subnetIds=[self.lustre_subnet],
            securityGroupIds=[self.lustre_sg],
        )
        self.extra: list[Any] = []

    def asg(self) -> Any:
        return self.h.res(
            ASG,
            "asg",
            self.asg_props,
            mixedInstancesPolicy=[self.lt],
            launchTemplate=[self.lt],
            vpcZoneIdentifiers=[self.subnet],
        )

    def resources(self) -> list[Any]:
        return [
            self.provider,
            self.subnet,
            self.lustre_subnet,
            self.efa,
            self.node,
            self.lustre_sg,
            *self.rules,
            self.lt,
            self.asg(),
            self.fs,
            *self.extra,
        ]

    def check(self, fn: Any, config: dict[str, Any] | None = None) -> list[str]:
        return self.h.violations(fn, self.h.sargs(self.resources(), config))


ALL = (
    no_placement_group_with_reserved_capacity,
    spot_or_capacity_block_outside_production,
    efa_security_group_self_referencing,
    lustre_ports_cluster_only,
    accelerator_count_cap,
    lustre_in_cluster_az,
    monthly_cost_ceiling,
    s3_bucket_guarded,
)


def test_the_base_stack_passes_every_stack_policy(h: Any) -> None:
    s = Stack(h)
    assert {fn.__name__: s.check(fn, {"monthlyCeilingUsd": 40_000}) for fn in ALL} == {
        fn.__name__: [] for fn in ALL
    }


def test_capacity_block_with_placement_group(h: Any) -> None:
    s = Stack(h)
    s.lt.props.update(CB)
    s.asg_props.pop("mixedInstancesPolicy")
    s.asg_props["placementGroup"] = "pg-id"
    assert s.check(no_placement_group_with_reserved_capacity) == [
        f"{ASG} asg sets placementGroup but its launch template lt targets capacity-block "
        "cr-0123456789abcdef0; remove the placement group"
    ]
    s.asg_props.pop("placementGroup")
    assert s.check(no_placement_group_with_reserved_capacity) == []


def test_on_demand_outside_production(h: Any) -> None:
    s = Stack(h)
    s.asg_props.pop("mixedInstancesPolicy")
    assert s.check(spot_or_capacity_block_outside_production) == [
        f"{ASG} asg runs p5.48xlarge on-demand in environment 'dev'; outside prod use spot or "
        "a Capacity Block"
    ]
    s.asg_props["tags"][0]["value"] = "prod"
    assert s.check(spot_or_capacity_block_outside_production) == []


def test_efa_group_needs_both_directions(h: Any) -> None:
    s = Stack(h)
    s.rules = [x for x in s.rules if x.name != "efa-out"]
    assert s.check(efa_security_group_self_referencing) == [
        f"{LT} lt has EFA interfaces but none of its security groups (efa, node) allows all "
        "traffic to itself (egress); OS-bypass traffic would fail"
    ]


def test_efa_rule_to_another_group_is_not_self_referencing(h: Any) -> None:
    s = Stack(h)
    s.rules[0].property_dependencies["referencedSecurityGroupId"] = [s.node]
    assert s.check(efa_security_group_self_referencing) == [
        f"{LT} lt has EFA interfaces but none of its security groups (efa, node) allows all "
        "traffic from itself (ingress); OS-bypass traffic would fail"
    ]


def test_lustre_port_open_to_a_cidr(h: Any) -> None:
    s = Stack(h)
    s.rules.append(
        h.res(
            IN,
            "lustre-any",
            {"ipProtocol": "tcp", "fromPort": 988.0, "toPort": 988.0, "cidrIpv4": "10.0.0.0/8"},
            securityGroupId=[s.lustre_sg],
        )
    )
    assert s.check(lustre_ports_cluster_only) == [
        f"{FSX} fs: rule lustre-any opens tcp 988 to 10.0.0.0/8; allow the cluster's security "
        "group instead"
    ]


def test_lustre_ports_partly_closed_or_open_to_strangers(h: Any) -> None:
    s = Stack(h)
    stranger = h.res(SG, "stranger", {})
    s.rules[3].property_dependencies["referencedSecurityGroupId"] = [stranger]
    assert s.check(lustre_ports_cluster_only) == [
        f"{FSX} fs: rule lustre-1018 opens tcp 1018-1023 to stranger, which no cluster node uses",
        f"{FSX} fs: Lustre port(s) 1018, 1019, 1020, 1021, 1022, 1023 are not open to the "
        "cluster; open TCP 988 and 1018-1023 from the cluster's group",
    ]


def test_lustre_group_may_admit_its_own_file_servers(h: Any) -> None:
    """The FSx for Lustre user guide ("File system access control with Amazon VPC") requires
    988 and 1018-1023 from the file system's own group; that is not a stranger."""
    s = Stack(h)
    for low, high in ((988.0, 988.0), (1018.0, 1023.0)):
        s.rules.append(
            h.res(
                IN,
                f"lustre-self-{int(low)}",
                {"ipProtocol": "tcp", "fromPort": low, "toPort": high},
                securityGroupId=[s.lustre_sg],
                referencedSecurityGroupId=[s.lustre_sg],
            )
        )
    assert s.check(lustre_ports_cluster_only) == []
    # Open only among the file servers, the ports are still closed to the cluster.
    s.rules = [r for r in s.rules if not r.name.startswith("lustre-1018")]
    assert s.check(lustre_ports_cluster_only) == [
        f"{FSX} fs: Lustre port(s) 1018, 1019, 1020, 1021, 1022, 1023 are not open to the "
        "cluster; open TCP 988 and 1018-1023 from the cluster's group",
    ]


def test_lustre_in_another_az(h: Any) -> None:
    s = Stack(h)
    s.lustre_subnet.props["availabilityZone"] = "us-east-1b"
    assert s.check(lustre_in_cluster_az) == [
        f"{FSX} fs is in us-east-1b but cluster asg runs in us-east-1a"
    ]


def test_accelerator_cap(h: Any) -> None:
    s = Stack(h)
    assert s.check(accelerator_count_cap, {"maxAccelerators": 16}) == []
    s.asg_props["maxSize"] = 4.0
    assert s.check(accelerator_count_cap, {"maxAccelerators": 16}) == [
        "the stack can reach 32 accelerators (asg 32), above maxAccelerators 16"
    ]


def test_cost_ceiling_names_the_top_lines(h: Any) -> None:
    # 2 x p5 spot: 55.04 * 0.45 * 2 * 730 = 36,161.28; 2 x 512 GiB gp3 * 0.08 = 81.92;
    # Lustre 1200 GiB * 0.145 = 174.00 -> 36,417.20
    s = Stack(h)
    assert s.check(monthly_cost_ceiling, {"monthlyCeilingUsd": 30_000, "topLines": 2}) == [
        "estimated monthly cost $36,417 exceeds the ceiling $30,000 (monthlyCeilingUsd) by "
        "$6,417; top cost lines: asg $36,161, fs $174"
    ]


def test_cost_ceiling_defaults_to_the_stacks_budget(h: Any) -> None:
    s = Stack(h)
    s.extra.append(
        h.res(
            "aws:budgets/budget:Budget",
            "budget-monthly",
            {"budgetType": "COST", "limitAmount": "20000"},
        )
    )
    assert s.check(monthly_cost_ceiling) == [
        "estimated monthly cost $36,417 exceeds the ceiling $20,000 (budget budget-monthly) by "
        "$16,417; top cost lines: asg $36,161, fs $174, asg/volumes $82"
    ]


def test_bucket_without_guards(h: Any) -> None:
    s = Stack(h)
    bucket = h.res("aws:s3/bucket:Bucket", "logs", {})
    s.extra.append(bucket)
    assert s.check(s3_bucket_guarded) == [
        "aws:s3/bucket:Bucket logs has no BucketPublicAccessBlock; add one with all four flags",
        "aws:s3/bucket:Bucket logs has no server-side encryption configuration",
    ]
