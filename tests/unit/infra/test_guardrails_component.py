"""The Guardrails component under mocks, and the IAM policy it generates."""

from __future__ import annotations

import json
from typing import Any

import pulumi
import pytest

from infra.components.guardrails import Guardrails, GuardrailsArgs
from infra.guardrails_iam import is_read_action, policy_document
from infra.offline import _Mocks

RULES = {
    "idle-gpu": [
        "ec2:DescribeInstances",
        "cloudwatch:GetMetricData",
        "ec2:StopInstances",
        "ec2:TerminateInstances",
        "ec2:CreateTags",
        "autoscaling:TerminateInstanceInAutoScalingGroup",
    ],
    "spend-limit": ["ce:GetCostAndUsage", "autoscaling:SetDesiredCapacity"],
}


def _writes_are_tag_scoped(doc: dict[str, Any], tag_key: str) -> None:
    for stmt in doc["Statement"]:
        actions = stmt["Action"] if isinstance(stmt["Action"], list) else [stmt["Action"]]
        writes = [a for a in actions if not is_read_action(a)]
        if writes and stmt["Resource"] == "*":
            cond = stmt["Condition"]["StringEquals"]
            assert f"aws:ResourceTag/{tag_key}" in cond, stmt


def test_policy_document_splits_reads_and_tag_scoped_writes() -> None:
    doc = policy_document(RULES, "coreburst-stack", "prod")
    reads, writes = doc["Statement"]
    assert reads["Action"] == [
        "ce:GetCostAndUsage",
        "cloudwatch:GetMetricData",
        "ec2:DescribeInstances",
    ]
    assert "Condition" not in reads
    assert writes["Action"] == [
        "autoscaling:SetDesiredCapacity",
        "autoscaling:TerminateInstanceInAutoScalingGroup",
        "ec2:CreateTags",
        "ec2:StopInstances",
        "ec2:TerminateInstances",
    ]
    assert writes["Condition"] == {"StringEquals": {"aws:ResourceTag/coreburst-stack": "prod"}}
    _writes_are_tag_scoped(doc, "coreburst-stack")


def test_bad_action_is_rejected() -> None:
    with pytest.raises(ValueError, match="not an IAM action"):
        policy_document({"x": ["StopInstances"]}, "k", "v")


def test_component_resources_and_role_policy() -> None:
    mocks = _Mocks("us-east-1")
    pulumi.runtime.set_mocks(mocks, project="coreburst", stack="prod", preview=False)
    captured: dict[str, Any] = {}

    @pulumi.runtime.test
    def run() -> pulumi.Output[Any]:
        g = Guardrails(
            "guardrails",
            GuardrailsArgs(
                code=pulumi.AssetArchive({"x.py": pulumi.StringAsset("")}),
                rule_actions=RULES,
                tag_key="coreburst-stack",
                tag_value="prod",
                budget_topic_arn="arn:aws:sns:us-east-1:123456789012:budget",
                daemon_config={"dry_run": True},
            ),
        )
        return g.policy.apply(lambda p: captured.update(policy=json.loads(p)))

    run()
    types = sorted(r.typ.split(":")[-1] for r in mocks.resources if r.custom)
    assert types == sorted(
        [
            "Table",
            "Secret",
            "Queue",
            "QueuePolicy",
            "TopicSubscription",
            "LogGroup",
            "Role",
            "RolePolicy",
            "Function",
            "Role",
            "RolePolicy",
            "Schedule",
        ]
    )
    by_name = {r.name: r for r in mocks.resources}
    fn = by_name["guardrails-daemon"].inputs
    assert fn["handler"] == "guardrails.lambda_handler.handler"
    assert fn["reservedConcurrentExecutions"] == 1
    assert fn["environment"]["variables"]["COREBURST_STATE_TABLE"] == "guardrails-state"
    assert "hooks.slack.com" not in json.dumps(fn["environment"])  # never in state
    sched = by_name["guardrails-cycle"].inputs
    assert sched["scheduleExpression"] == "rate(1 minute)"
    assert sched["target"]["arn"] == fn.get("arn", sched["target"]["arn"])
    sub = by_name["guardrails-budget-to-queue"].inputs
    assert sub["protocol"] == "sqs"

    doc = captured["policy"]
    _writes_are_tag_scoped(doc, "coreburst-stack")
    own = [s for s in doc["Statement"] if s["Sid"].startswith("GuardrailOwnResource")]
    assert own and all(s["Resource"] != "*" for s in own)


def test_prod_stack_deploys_guardrails_with_registry_permissions(prod_config: Any) -> None:
    from guardrails.rules import REGISTRY
    from infra.offline import evaluate_config

    ev = evaluate_config("prod", prod_config)
    fn = ev.named("guardrails-daemon").inputs
    cfg = json.loads(fn["environment"]["variables"]["COREBURST_CONFIG_JSON"])
    assert cfg["dry_run"] is False and cfg["regions"] == ["us-east-2"]
    policy = json.loads(ev.named("guardrails-role-policy").inputs["policy"])
    granted = {a for s in policy["Statement"] for a in s["Action"]}
    declared = {a for rule in REGISTRY.values() for a in rule.iam_actions}
    assert declared <= granted
    _writes_are_tag_scoped(policy, "coreburst-stack")
    assert ev.outputs["guardrailsFunction"] == "guardrails-daemon"


def test_unknown_guardrail_rule_is_rejected(prod_config: Any) -> None:
    from infra.config import StackConfigError
    from infra.offline import evaluate_config

    prod_config["coreburst:guardrails"]["rules"] = ["idle-reclaim", "gpu-melter"]
    with pytest.raises(StackConfigError, match="unknown rule\\(s\\) gpu-melter"):
        evaluate_config("prod", prod_config)
