"""The Lustre security group rules meet what the FSx for Lustre user guide requires.

Documents the checker encodes:
- "File system access control with Amazon VPC"
  (https://docs.aws.amazon.com/fsx/latest/LustreGuide/limit-access-security-groups.html):
  the file system's group admits TCP 988 and 1018-1023 from the group itself ("Allows Lustre
  traffic between FSx for Lustre file servers") and from the clients' groups; "If your
  security group doesn't allow all outbound traffic", the same ports outbound to itself and to
  the clients. "Lustre client VPC security group rules": the clients' groups admit and send
  988 and 1018-1023 from/to the clients' groups and the file system's groups.
- Troubleshooting, "Creating an FSx for Lustre file system fails"
  (https://docs.aws.amazon.com/fsx/latest/LustreGuide/troubleshooting.html): "allow inbound
  traffic on ports 988 and 1018-1023 from the security group itself or the full subnet CIDR,
  which is required to allow the file system hosts to communicate with each other", else
  "... do not permit Lustre LNET network traffic on port 988".
- pulumi-aws removes the allow-all egress rule AWS adds to a new group, so no default egress is
  assumed here.

moto's FSx CreateFileSystem does not look at security groups at all (moto/fsx/models.py takes
the ids and stores them), so it cannot stand in for the service's check; moto's EC2 is used to
show the declared rules are accepted by the EC2 API as written and read back as required.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import boto3
import pytest
from moto import mock_aws

from infra.offline import Evaluation

LNET = ((988, 988), (1018, 1023))


@dataclass(frozen=True)
class Rule:
    group: str
    direction: str  # "in" | "out"
    protocol: str  # "tcp" | "-1"
    low: int | None
    high: int | None
    peer: str  # a group id or a CIDR


def _covers(rule: Rule, low: int, high: int) -> bool:
    if rule.protocol == "-1":
        return True
    return (
        rule.protocol == "tcp"
        and rule.low is not None
        and rule.high is not None
        and rule.low <= low
        and high <= rule.high
    )


def lustre_findings(
    rules: Iterable[Rule], fs_groups: set[str], client_groups: set[str], subnet_cidr: str
) -> list[str]:
    """What the user guide requires and the rules do not provide; [] when all is met."""
    rules = list(rules)
    missing = []

    def has(owners: set[str], direction: str, peer_ok: Any, low: int, high: int) -> bool:
        return any(
            r.group in owners and r.direction == direction and _covers(r, low, high) and peer_ok(r)
            for r in rules
        )

    for low, high in LNET:
        ports = f"{low}" if low == high else f"{low}-{high}"
        # server <-> server: from/to the group itself (or the subnet CIDR).
        for direction in ("in", "out"):
            if not has(fs_groups, direction, lambda r: r.peer in (r.group, subnet_cidr), low, high):
                missing.append(f"file system {direction} {ports} self")
        for owners, peers, who in (
            (fs_groups, client_groups, "file system <-> clients"),
            (client_groups, client_groups, "clients <-> clients"),
            (client_groups, fs_groups, "clients <-> file system"),
        ):
            for direction in ("in", "out"):
                if not has(owners, direction, lambda r, p=peers: r.peer in p, low, high):
                    missing.append(f"{who} {direction} {ports}")
    return missing


def _declared(ev: Evaluation) -> list[Rule]:
    out = []
    for r in ev.resources:
        if not r.typ.startswith("aws:vpc/securityGroup"):
            continue
        i = r.inputs
        out.append(
            Rule(
                i["securityGroupId"],
                "in" if "Ingress" in r.typ else "out",
                i["ipProtocol"],
                None if i.get("fromPort") is None else int(i["fromPort"]),
                None if i.get("toPort") is None else int(i["toPort"]),
                i.get("referencedSecurityGroupId") or i.get("cidrIpv4"),
            )
        )
    return out


def _groups(ev: Evaluation) -> tuple[set[str], set[str], str]:
    fs = ev.of_type("aws:fsx/lustreFileSystem:LustreFileSystem")[0].inputs
    (lt, *_) = ev.of_type("aws:ec2/launchTemplate:LaunchTemplate")
    clients = set(lt.inputs["networkInterfaces"][0]["securityGroups"])
    subnet = next(r for r in ev.of_type("aws:ec2/subnet:Subnet") if "private" in r.name)
    return set(fs["securityGroupIds"]), clients, subnet.inputs["cidrBlock"]


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_declared_rules_meet_the_user_guide(stack: str, dev: Evaluation, prod: Evaluation) -> None:
    ev = {"dev": dev, "prod": prod}[stack]
    fs_groups, clients, cidr = _groups(ev)
    assert lustre_findings(_declared(ev), fs_groups, clients, cidr) == []


def test_checker_rejects_the_rules_that_broke_dev() -> None:
    """The rule set before this fix (copied from the old test_program expectation): Lustre
    ports only from the EFA group, client egress only; dev's file system (no EFA) could not
    be created."""
    efa, lustre, node = "sg-efa", "sg-lustre", "sg-node"
    before = [
        Rule(efa, "in", "-1", None, None, efa),
        Rule(efa, "out", "-1", None, None, efa),
        Rule(lustre, "in", "tcp", 988, 988, efa),
        Rule(lustre, "in", "tcp", 1018, 1023, efa),
        Rule(node, "out", "tcp", 988, 988, lustre),
        Rule(node, "out", "tcp", 1018, 1023, lustre),
        Rule(node, "out", "tcp", 443, 443, "0.0.0.0/0"),
    ]
    findings = lustre_findings(before, {lustre}, {efa, node}, "10.64.0.0/18")
    assert "file system in 988 self" in findings
    assert "file system out 1018-1023 self" in findings
    assert "file system <-> clients out 988" in findings


def test_rules_round_trip_through_ec2(dev: Evaluation) -> None:
    """Create the groups and the declared rules in moto's EC2 (default egress revoked, as
    pulumi-aws does), read them back with DescribeSecurityGroupRules, and check that view."""
    fs_groups, clients, cidr = _groups(dev)
    declared = _declared(dev)
    with mock_aws():
        ec2 = boto3.client("ec2", region_name="us-east-1")
        vpc = ec2.create_vpc(CidrBlock="10.64.0.0/16")["Vpc"]["VpcId"]
        ids: dict[str, str] = {}
        for name in sorted({r.group for r in declared} | fs_groups | clients):
            gid = ec2.create_security_group(GroupName=name, Description=name, VpcId=vpc)["GroupId"]
            ec2.revoke_security_group_egress(
                GroupId=gid,
                IpPermissions=[{"IpProtocol": "-1", "IpRanges": [{"CidrIp": "0.0.0.0/0"}]}],
            )
            ids[name] = gid
        for r in declared:
            perm: dict[str, Any] = {"IpProtocol": r.protocol}
            if r.low is not None:
                perm |= {"FromPort": r.low, "ToPort": r.high}
            if r.peer in ids:
                perm["UserIdGroupPairs"] = [{"GroupId": ids[r.peer]}]
            else:
                perm["IpRanges"] = [{"CidrIp": r.peer}]
            call = (
                ec2.authorize_security_group_ingress
                if r.direction == "in"
                else ec2.authorize_security_group_egress
            )
            call(GroupId=ids[r.group], IpPermissions=[perm])
        back = []
        ours = [{"Name": "group-id", "Values": sorted(ids.values())}]
        for r in ec2.describe_security_group_rules(Filters=ours)["SecurityGroupRules"]:
            peer = r.get("ReferencedGroupInfo", {}).get("GroupId") or r.get("CidrIpv4")
            back.append(
                Rule(
                    r["GroupId"],
                    "out" if r["IsEgress"] else "in",
                    r["IpProtocol"],
                    r.get("FromPort") if r.get("FromPort", -1) != -1 else None,
                    r.get("ToPort") if r.get("ToPort", -1) != -1 else None,
                    peer,
                )
            )
    assert len(back) == len(declared)
    assert lustre_findings(back, {ids[g] for g in fs_groups}, {ids[g] for g in clients}, cidr) == []
