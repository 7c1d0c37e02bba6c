"""The Guardrails component under mocks, and the IAM policy it generates."""

from __future__ import annotations

import copy
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
    # An on-prem daemon's spot_interruption.queue_url and budget_relay.queue_url come from
    # the stack's outputs: the queues the EventBridge rules and the budget topic deliver to.
    sqs = "https://sqs.us-east-2.amazonaws.com/123456789012/"
    assert ev.outputs["guardrailsSpotQueueUrl"] == sqs + "guardrails-spot-events"
    assert ev.outputs["guardrailsBudgetQueueUrl"] == sqs + "guardrails-budget-events"


def test_unknown_guardrail_rule_is_rejected(prod_config: Any) -> None:
    from infra.config import StackConfigError
    from infra.offline import evaluate_config

    prod_config["coreburst:guardrails"]["rules"] = ["idle-reclaim", "gpu-melter"]
    with pytest.raises(StackConfigError, match="unknown rule\\(s\\) gpu-melter"):
        evaluate_config("prod", prod_config)


# -- IAM lint, confused deputy, TTL and the schedule's interval ------------------------------

# ARN formats from the Service Authorization Reference ("Resource types defined by ..." for
# each service), so that ARN-format checks see what AWS would hand back. Made up by us.
REAL_ARNS = {
    "aws:dynamodb/table:Table": "arn:aws:dynamodb:{r}:{a}:table/{n}",
    "aws:secretsmanager/secret:Secret": "arn:aws:secretsmanager:{r}:{a}:secret:{n}-AbCdEf",
    "aws:sqs/queue:Queue": "arn:aws:sqs:{r}:{a}:{n}",
    "aws:cloudwatch/logGroup:LogGroup": "arn:aws:logs:{r}:{a}:log-group:{n}",
    "aws:lambda/function:Function": "arn:aws:lambda:{r}:{a}:function:{n}",
    "aws:iam/role:Role": "arn:aws:iam::{a}:role/{n}",
    "aws:sns/topic:Topic": "arn:aws:sns:{r}:{a}:{n}",
}


class _RealArnMocks(_Mocks):
    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        from infra.offline import FAKE_ACCOUNT

        rid, state = super().new_resource(args)
        fmt = REAL_ARNS.get(args.typ)
        if fmt:
            name = args.inputs.get("name") or args.name
            state["arn"] = fmt.format(r=self.region, a=FAKE_ACCOUNT, n=name)
        return rid, state


def _policies(ev: Any) -> list[tuple[str, str, dict[str, Any]]]:
    """(resource name, input, document) for every policy document the stack declares."""
    out = []
    for r in ev.resources:
        for key in ("policy", "assumeRolePolicy"):
            value = r.inputs.get(key)
            if isinstance(value, str) and '"Statement"' in value:
                out.append((r.name, key, json.loads(value)))
    return out


@pytest.fixture
def prod_stack(prod_config: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    import infra.offline
    from infra.offline import evaluate_config

    monkeypatch.setattr(infra.offline, "_Mocks", _RealArnMocks)
    return evaluate_config("prod", prod_config)


# Parliament findings we accept, each for a stated reason; anything else fails the test.
KNOWN_FALSE_POSITIVES = {
    # Writes on "*" are limited by the aws:ResourceTag/<stack tag> condition on the same
    # statement (checked by _writes_are_tag_scoped); parliament's RESOURCE_STAR check does not
    # read conditions.
    ("guardrails-role-policy", "RESOURCE_STAR"),
    # A trust policy's only action is sts:AssumeRole, which by definition returns credentials
    # to the trusted service principal; that is what the role is for.
    ("*", "CREDENTIALS_EXPOSURE"),
}


def test_every_policy_document_passes_parliament(prod_stack: Any) -> None:
    """Every policy the prod stack generates — the Lambda role policy, both trust policies, the
    Scheduler's invoke policy, the SQS queue policy, the SNS topic policy, the node roles —
    linted by parliament (https://github.com/duo-labs/parliament) with its community auditors.

    Threshold: LOW, i.e. every finding parliament can raise fails the test unless it is listed
    in KNOWN_FALSE_POSITIVES. Parliament does not model trust policies (it reports a statement
    without Resource as MALFORMED); a trust policy is the role's own resource policy, so it is
    linted with the role's ARN as its Resource."""
    from parliament import analyze_policy_string

    from infra.offline import FAKE_ACCOUNT

    docs = _policies(prod_stack)
    names = {n for n, _, _ in docs}
    assert {
        "guardrails-role",
        "guardrails-role-policy",
        "guardrails-scheduler-role",
        "guardrails-scheduler-invoke",
        "guardrails-budget-events-policy",
        "budget-alerts-policy",
    } <= names
    found = []
    for name, key, original in docs:
        doc = copy.deepcopy(original)
        if key == "assumeRolePolicy":
            for stmt in doc["Statement"]:
                stmt["Resource"] = f"arn:aws:iam::{FAKE_ACCOUNT}:role/{name}"
        policy = analyze_policy_string(json.dumps(doc), include_community_auditors=True)
        for f in policy.findings:
            if (name, f.issue) in KNOWN_FALSE_POSITIVES:
                continue
            if key == "assumeRolePolicy" and ("*", f.issue) in KNOWN_FALSE_POSITIVES:
                continue
            found.append((name, f.issue, f.detail))
    assert found == []


def test_parliament_would_catch_what_the_role_used_to_get_wrong() -> None:
    """The lint is live: a resource of the wrong type for an action is a finding (parliament's
    RESOURCE_MISMATCH), as the table grant was with the mocks' made-up ARNs."""
    from parliament import analyze_policy_string

    doc = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Action": "dynamodb:BatchWriteItem",
                "Resource": "arn:aws:sqs:us-east-1:123456789012:q",
            }
        ],
    }
    issues = [f.issue for f in analyze_policy_string(json.dumps(doc)).findings]
    assert "RESOURCE_MISMATCH" in issues


def test_trust_and_resource_policies_name_their_source(prod_stack: Any) -> None:
    """Against the confused-deputy problem (IAM User Guide, https://docs.aws.amazon.com/IAM/
    latest/UserGuide/confused-deputy.html): the Scheduler may assume its role only for this
    account's schedule group (EventBridge Scheduler User Guide, "Set up the execution role",
    https://docs.aws.amazon.com/scheduler/latest/UserGuide/setting-up.html), and SNS may send to
    the budget queue only from the budget topic (SNS Developer Guide, "Subscribing an Amazon SQS
    queue to an Amazon SNS topic", https://docs.aws.amazon.com/sns/latest/dg/
    subscribe-sqs-queue-to-sns-topic.html)."""
    from infra.offline import FAKE_ACCOUNT

    region = prod_stack.config.region
    docs = {n: d for n, _, d in _policies(prod_stack)}
    (trust,) = docs["guardrails-scheduler-role"]["Statement"]
    assert trust["Principal"] == {"Service": "scheduler.amazonaws.com"}
    assert trust["Condition"] == {
        "StringEquals": {"aws:SourceAccount": FAKE_ACCOUNT},
        "ArnEquals": {
            "aws:SourceArn": f"arn:aws:scheduler:{region}:{FAKE_ACCOUNT}:schedule-group/default"
        },
    }
    sched = prod_stack.named("guardrails-cycle").inputs
    assert sched.get("groupName", "default") == "default"
    (send,) = docs["guardrails-budget-events-policy"]["Statement"]
    assert send["Principal"] == {"Service": "sns.amazonaws.com"}
    assert send["Condition"]["ArnEquals"]["aws:SourceArn"] == (
        f"arn:aws:sns:{region}:{FAKE_ACCOUNT}:budget-alerts"
    )
    # AWS Budgets may publish to the topic only for this account's budgets (AWS Cost
    # Management User Guide, "Creating an Amazon SNS topic for budget notifications",
    # https://docs.aws.amazon.com/cost-management/latest/userguide/budgets-sns-policy.html).
    (publish,) = docs["budget-alerts-policy"]["Statement"]
    assert publish["Principal"] == {"Service": "budgets.amazonaws.com"}
    assert publish["Condition"] == {
        "StringEquals": {"aws:SourceAccount": FAKE_ACCOUNT},
        "ArnLike": {"aws:SourceArn": f"arn:aws:budgets::{FAKE_ACCOUNT}:*"},
    }


def test_state_table_expires_snapshots_and_the_role_may_prune(prod_stack: Any) -> None:
    from guardrails.stores.dynamodb import TTL_ATTRIBUTE

    table = prod_stack.named("guardrails-state").inputs
    assert table["ttl"] == {"attributeName": TTL_ATTRIBUTE, "enabled": True}
    policy = json.loads(prod_stack.named("guardrails-role-policy").inputs["policy"])
    (own,) = [s for s in policy["Statement"] if any(":table/" in r for r in s["Resource"])]
    assert "dynamodb:BatchWriteItem" in own["Action"]


@pytest.mark.parametrize(
    ("expression", "seconds"),
    [
        ("rate(1 minute)", 60),
        ("rate(5 minutes)", 300),
        ("rate(2 hours)", 7200),
        ("rate(1 day)", 86400),
        ("cron(0/5 * * * ? *)", 60),  # no fixed interval: the finest cron granularity
    ],
)
def test_schedule_interval(expression: str, seconds: int) -> None:
    """Rate expressions as the EventBridge Scheduler User Guide defines them ("Schedule types
    on EventBridge Scheduler", https://docs.aws.amazon.com/scheduler/latest/UserGuide/
    schedule-types.html)."""
    from infra.components.guardrails import schedule_interval_s

    assert schedule_interval_s(expression) == seconds


def test_the_daemon_runs_at_the_schedules_interval(prod_config: Any) -> None:
    """The Lambda's daemon config carries the schedule's interval: its leader lease lasts no
    longer, so a crashed invocation blocks at most the next one."""
    from infra.offline import evaluate_config

    prod_config["coreburst:guardrails"]["schedule"] = "rate(5 minutes)"
    ev = evaluate_config("prod", prod_config)
    env = ev.named("guardrails-daemon").inputs["environment"]["variables"]
    assert json.loads(env["COREBURST_CONFIG_JSON"])["interval"] == "300s"
    assert ev.named("guardrails-cycle").inputs["scheduleExpression"] == "rate(5 minutes)"
