"""The controller host's IAM policy (coreburst/burst/iam.py, `coreburst burst iam-policy`): linted
by parliament, and every EC2 call the power programs make (coreburst/burst/launch.py,
ec2io.py) is granted by it and nothing else is.

AWS pages the grants follow: Amazon EC2 API reference, CreateFleet (an ``instant`` fleet, its
TagSpecifications and ClientToken); EC2 User Guide, "EC2 Fleet prerequisites" (an instant
fleet does not use the AWSServiceRoleForEC2Fleet role, which is what holds RunInstances for the
other types); "Example policies to control access to the Amazon EC2 API: Launch instances
(RunInstances)" (``ec2:LaunchTemplate``); "Grant permission to tag Amazon EC2 resources during
creation" (``ec2:CreateAction``); Service Authorization Reference, "Actions, resources, and
condition keys for Amazon EC2" (which resource types each action authorizes; parliament's
database is built from it).
"""

from __future__ import annotations

import copy
import fnmatch
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import botocore.session
import pytest
from moto import mock_aws
from parliament import analyze_policy_string, iam_definition
from typer.testing import CliRunner

from coreburst.burst.cli import app
from coreburst.burst.config import BurstStack, load_burst_stack, parse_burst
from coreburst.burst.iam import controller_policy, partition_of
from coreburst.burst.power import Audit, Power
from tests.helpers.burst import CLUSTERS, stack_map
from tests.helpers.ec2ops import power_operations
from tests.helpers.slurm_fakes import squeue_json

ACCOUNT = "123456789012"
EC2_MODEL = botocore.session.get_session().get_service_model("ec2")
# Granted though power.py never names them: CreateFleet's instant launch is authorized as
# RunInstances on the caller; DescribeLaunchTemplateVersions resolves "$Latest" for an
# operator checking what a launch would use (granted on request, issue 21 item 8).
IMPLIED = {"ec2:RunInstances", "ec2:DescribeLaunchTemplateVersions"}
# Parliament findings we accept, each for a stated reason; anything else fails the test.
KNOWN_FINDINGS = {
    # iam:PassRole is what launching with an instance profile takes (EC2 User Guide, "IAM
    # roles for Amazon EC2"); it is limited to the stack's node roles, passed to EC2 only.
    "PERMISSIONS_MANAGEMENT_ACTIONS",
    # PassRole + RunInstances: the same grant, read as an escalation path. The instances can
    # only come from the stack's launch templates, whose profiles are the node roles.
    "PRIVILEGE_ESCALATION",
}


def _stacks(tmp_path: Path) -> dict[str, BurstStack]:
    block = {
        "name": "cb",
        "instanceType": "p5.48xlarge",
        "nodes": 1,
        "capacity": {"model": "capacity-block", "reservationId": "cr-0fedcba9876543210"},
    }
    return {
        "unit": parse_burst("unit", stack_map([*CLUSTERS, block], {"nodeTagKey": "slurm-node"})),
        "dev": load_burst_stack("dev"),
        "prod": load_burst_stack("prod"),
    }


def _actions(stmt: dict[str, Any]) -> list[str]:
    a = stmt["Action"]
    return a if isinstance(a, list) else [a]


def _allowed(doc: dict[str, Any], action: str) -> bool:
    """An Allow names the action (resources and conditions are checked by parliament and the
    tests below)."""
    return any(
        stmt["Effect"] == "Allow"
        and any(fnmatch.fnmatchcase(action.lower(), a.lower()) for a in _actions(stmt))
        for stmt in doc["Statement"]
    )


def _stmt(doc: dict[str, Any], sid: str) -> dict[str, Any]:
    return next(s for s in doc["Statement"] if s["Sid"] == sid)


def test_power_operations_are_found() -> None:
    """The scan is not vacuous: it sees the calls the module docstring describes."""
    assert {
        "CreateFleet",
        "CreateTags",
        "DescribeInstances",
        "DescribeLaunchTemplates",
        "TerminateInstances",
    } <= power_operations()


@pytest.mark.parametrize("name", ["unit", "dev", "prod"])
@pytest.mark.parametrize("account", [ACCOUNT, "*"])
def test_policy_passes_parliament(tmp_path: Path, name: str, account: str) -> None:
    """parliament (https://github.com/duo-labs/parliament), community auditors on: real actions,
    resources of the right type for each (every required resource type of an action in one
    statement), known condition keys. The only findings are the two PassRole ones, and they go
    when the PassRole statement does."""
    doc = controller_policy(_stacks(tmp_path)[name], account=account)
    findings = analyze_policy_string(json.dumps(doc), include_community_auditors=True).findings
    assert {f.issue for f in findings} == KNOWN_FINDINGS, [(f.issue, f.detail) for f in findings]
    without = copy.deepcopy(doc)
    without["Statement"] = [s for s in doc["Statement"] if s["Sid"] != "PassNodeRoles"]
    rest = analyze_policy_string(json.dumps(without), include_community_auditors=True).findings
    assert [(f.issue, f.detail) for f in rest] == []


def test_parliament_would_catch_a_launch_grant_missing_a_resource(tmp_path: Path) -> None:
    """The lint is live: RunInstances without the subnet it must be allowed on is a finding."""
    doc = controller_policy(_stacks(tmp_path)["unit"], account=ACCOUNT)
    run = _stmt(doc, "RunFromLaunchTemplate")
    run["Resource"] = [r for r in run["Resource"] if ":subnet/" not in r]
    issues = [f.issue for f in analyze_policy_string(json.dumps(doc)).findings]
    assert "RESOURCE_MISMATCH" in issues


def test_every_call_power_makes_is_granted_and_nothing_else(tmp_path: Path) -> None:
    doc = controller_policy(_stacks(tmp_path)["unit"], account=ACCOUNT)
    called = {f"ec2:{op}" for op in power_operations()}
    assert [a for a in sorted(called) if not _allowed(doc, a)] == []
    granted = {a for s in doc["Statement"] if s["Effect"] == "Allow" for a in _actions(s)}
    assert granted - called == IMPLIED | {"iam:PassRole"}


def test_every_action_is_a_real_operation(tmp_path: Path) -> None:
    """EC2 actions are API operations in botocore's ec2 model (no wildcards); iam:PassRole is a
    permission only, known to parliament's IAM database."""
    doc = controller_policy(_stacks(tmp_path)["prod"], account=ACCOUNT)
    iam = next(s for s in iam_definition if s["prefix"] == "iam")
    for action in {a for s in doc["Statement"] for a in _actions(s)}:
        service, _, name = action.partition(":")
        if service == "ec2":
            assert name in EC2_MODEL.operation_names, action
        else:
            assert action == "iam:PassRole"
            assert name in {p["privilege"] for p in iam["privileges"]}


def test_writes_are_scoped_to_the_stack(tmp_path: Path) -> None:
    s = _stacks(tmp_path)["unit"]
    doc = controller_policy(s, account=ACCOUNT)
    ec2 = f"arn:aws:ec2:us-east-1:{ACCOUNT}"
    on_stack = {"aws:ResourceTag/coreburst-stack": "unit"}
    assert _stmt(doc, "TerminateStackInstances")["Condition"] == {"StringEquals": on_stack}
    assert _stmt(doc, "TerminateStackInstances")["Resource"] == f"{ec2}:instance/*"
    deny = _stmt(doc, "OnlyTheStacksTemplatesAndNetwork")
    assert deny["Effect"] == "Deny" and set(deny["Action"]) == {
        "ec2:CreateFleet",
        "ec2:RunInstances",
    }
    assert deny["Condition"] == {"StringNotEquals": on_stack}
    assert set(deny["Resource"]) == {
        f"{ec2}:launch-template/*",
        f"{ec2}:subnet/*",
        f"{ec2}:security-group/*",
    }
    run = _stmt(doc, "RunFromLaunchTemplate")
    assert run["Condition"] == {"ArnLike": {"ec2:LaunchTemplate": f"{ec2}:launch-template/*"}}
    # Exactly the reservations the stack names (a capacity reservation and a Capacity Block).
    assert [r for r in run["Resource"] if ":capacity-reservation/" in r] == [
        f"{ec2}:capacity-reservation/cr-0123456789abcdef0",
        f"{ec2}:capacity-reservation/cr-0fedcba9876543210",
    ]
    node = _stmt(doc, "TagNodeName")
    assert node["Condition"] == {
        "StringEquals": on_stack,
        "ForAllValues:StringEquals": {
            "aws:TagKeys": ["slurm-node", "coreburst-job", "coreburst-user", "coreburst-account"]
        },
    }
    launch = _stmt(doc, "TagOnLaunch")["Condition"]
    assert launch["StringEquals"] == {
        "ec2:CreateAction": ["CreateFleet", "RunInstances"],
        "aws:RequestTag/coreburst-stack": "unit",
    }
    passrole = _stmt(doc, "PassNodeRoles")
    assert passrole["Resource"] == [
        f"arn:aws:iam::{ACCOUNT}:role/{c}-node-role-*" for c in ("od", "sp", "trn", "cb")
    ]
    assert passrole["Condition"] == {"StringEquals": {"iam:PassedToService": ["ec2.amazonaws.com"]}}


def test_partition_and_unknown_account() -> None:
    assert [partition_of(r) for r in ("us-east-2", "cn-north-1", "us-gov-west-1")] == [
        "aws",
        "aws-cn",
        "aws-us-gov",
    ]
    s = parse_burst("unit", stack_map(CLUSTERS[:1]))
    doc = controller_policy(s, region="cn-north-1")
    assert _stmt(doc, "TerminateStackInstances")["Resource"] == (
        "arn:aws-cn:ec2:cn-north-1:*:instance/*"
    )
    with pytest.raises(ValueError, match="12-digit"):
        controller_policy(s, account="1234")


# -- the requests power.py sends fit the policy's conditions (moto, in process) ------------
class _Slurm:
    def scontrol(self, *args: str) -> str:
        return ""

    def squeue(self, *args: str) -> str:
        return squeue_json()  # no job listed


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, list[tuple[str, Any]]]]:
    for var in ("AWS_ENDPOINT_URL", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    calls: list[tuple[str, Any]] = []

    def record(params: dict[str, Any], model: Any, **_: Any) -> None:
        calls.append((model.name, copy.deepcopy(params)))

    with mock_aws():
        ec2 = boto3.client("ec2", region_name="us-east-2")
        ec2.meta.events.register("before-parameter-build.ec2", record)
        yield ec2, calls


def test_resume_and_suspend_requests_fit_the_conditions(
    recorded: tuple[Any, list[tuple[str, Any]]], stack: BurstStack, tmp_path: Path
) -> None:
    """Resume and suspend on moto, every request recorded (botocore's before-parameter-build
    event): each operation is granted, CreateFleet tags only keys TagOnLaunch allows and
    carries coreburst-stack=<stack> (its aws:RequestTag condition), the node tag is the one key
    TagNodeName allows."""
    ec2, calls = recorded
    for c in ("od", "sp"):
        ec2.create_launch_template(
            LaunchTemplateName=f"{c}-lt-0a1b2c3",
            LaunchTemplateData={"ImageId": "ami-12c6146b", "InstanceType": "p5.48xlarge"},
            TagSpecifications=[
                {
                    "ResourceType": "launch-template",
                    "Tags": [{"Key": "coreburst-stack", "Value": stack.name}],
                }
            ],
        )
    calls.clear()
    power = Power(stack, ec2, _Slurm(), Audit(tmp_path / "audit.jsonl"))
    result = power.resume("od-[1-2],sp-1", None)
    assert sorted(result.launched) == ["od-1", "od-2", "sp-1"], result
    power.terminate("od-1", "suspend")
    doc = controller_policy(stack, account=ACCOUNT, region="us-east-2")
    ops = {op for op, _ in calls}
    assert {"CreateFleet", "CreateTags", "DescribeInstances", "TerminateInstances"} <= ops
    assert [op for op in sorted(ops) if not _allowed(doc, f"ec2:{op}")] == []
    keys = "ForAllValues:StringEquals"
    on_launch = set(_stmt(doc, "TagOnLaunch")["Condition"][keys]["aws:TagKeys"])
    node_keys = _stmt(doc, "TagNodeName")["Condition"][keys]["aws:TagKeys"]
    for op, params in calls:
        if op == "CreateFleet":
            for spec in params["TagSpecifications"]:
                tags = {t["Key"]: t["Value"] for t in spec["Tags"]}
                assert set(tags) <= on_launch and tags["coreburst-stack"] == stack.name
        if op == "CreateTags":  # the node name, and who the instance was launched for
            assert {t["Key"] for t in params["Tags"]} <= set(node_keys)


def test_cli_prints_the_policy(stack_dir: Path, stack: BurstStack) -> None:
    runner = CliRunner()
    args = ["iam-policy", "--stack", "t", "--stack-dir", str(stack_dir)]
    out = runner.invoke(app, [*args, "--account", ACCOUNT])
    assert out.exit_code == 0, out.output
    assert json.loads(out.output) == controller_policy(stack, account=ACCOUNT)
    out = runner.invoke(app, args)
    assert out.exit_code == 0 and ":*:instance/*" in out.output
    out = runner.invoke(app, [*args, "--account", "12-34"])
    assert out.exit_code == 2
    assert out.output == "error: --account: '12-34' is not a 12-digit AWS account id (or *)\n"
