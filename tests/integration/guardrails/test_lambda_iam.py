"""Every AWS operation the deployed Lambda makes is allowed by the role the stack generates.

The Lambda handler runs end to end on moto server — Secrets Manager for the webhook, DynamoDB
state (transactions, snapshot pruning), the budget relay from SQS, idle marking and reclaim,
spend enforcement, egress — while every operation any botocore client makes is recorded through
botocore's own event system (``before-parameter-build``). Each is mapped to its IAM action:
the service's IAM prefix and the operation's name, both checked against parliament's database
of IAM actions (an independent source), and compared with the role policy that
``infra.program`` generates for the prod stack.
"""

from __future__ import annotations

import copy
import fnmatch
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any
from unittest import mock

import boto3
import botocore.session
import pytest
from parliament import iam_definition

from coreburst.sandbox.emulator import FleetNode, WebhookReceiver, launch, launch_asg
from guardrails.stores.dynamodb import DynamoState
from tests.helpers.guardrails_lambda import BUDGETS_TEXT, LambdaStack, invoke

pytestmark = pytest.mark.integration

IAM_PRIVILEGES = {s["prefix"]: {p["privilege"] for p in s["privileges"]} for s in iam_definition}

# DynamoDB transactions have no IAM action of their own: each item is authorized as the single-
# item operation it performs ("Using IAM with DynamoDB transactions", https://docs.aws.amazon.com/
# amazondynamodb/latest/developerguide/transaction-apis-iam.html).
TRANSACT_ITEM_ACTION = {
    "Put": "PutItem",
    "Update": "UpdateItem",
    "Delete": "DeleteItem",
    "ConditionCheck": "ConditionCheckItem",
    "Get": "GetItem",
}

Call = tuple[Any, str, dict[str, Any]]


@contextmanager
def recorded_calls() -> Iterator[list[Call]]:
    """Every (service model, operation name, request parameters) any botocore client created
    meanwhile is asked for, in order."""
    calls: list[Call] = []
    create = botocore.session.Session.create_client

    def record(params: dict[str, Any], model: Any, **_: Any) -> None:
        calls.append((model.service_model, model.name, params))

    def create_client(self: Any, *args: Any, **kwargs: Any) -> Any:
        client = create(self, *args, **kwargs)
        client.meta.events.register("before-parameter-build", record)
        return client

    with mock.patch.object(botocore.session.Session, "create_client", create_client):
        yield calls


def iam_actions(service: Any, operation: str, params: dict[str, Any]) -> list[str]:
    """The IAM actions one API call needs.

    The IAM prefix is the service's signing name where IAM knows it (``dynamodb``, ``ec2``,
    ``sqs``…); CloudWatch signs as ``monitoring`` but its IAM prefix is ``cloudwatch``, its
    botocore service name, so each candidate is tried against parliament's database."""
    names = [operation]
    if (service.service_name, operation) == ("dynamodb", "TransactWriteItems"):
        names = sorted({TRANSACT_ITEM_ACTION[k] for item in params["TransactItems"] for k in item})
    out = []
    for name in names:
        candidates = [
            service.signing_name,
            service.metadata.get("endpointPrefix"),
            service.service_name,
        ]
        prefix = next((c for c in candidates if name in IAM_PRIVILEGES.get(c or "", ())), None)
        assert prefix, f"no IAM action known for {service.service_name}:{name}"
        out.append(f"{prefix}:{name}")
    return out


def granted(policy: dict[str, Any], action: str) -> bool:
    for stmt in policy["Statement"]:
        if stmt["Effect"] != "Allow":
            continue
        acts = stmt["Action"] if isinstance(stmt["Action"], list) else [stmt["Action"]]
        if any(fnmatch.fnmatchcase(action.lower(), a.lower()) for a in acts):
            return True
    return False


def prod_role_policy() -> dict[str, Any]:
    from infra.offline import evaluate_config, load_stack_yaml

    ev = evaluate_config("prod", copy.deepcopy(load_stack_yaml("prod")))
    doc: dict[str, Any] = json.loads(ev.named("guardrails-role-policy").inputs["policy"])
    return doc


def test_every_operation_the_lambda_makes_is_granted(
    lambda_stack: Callable[..., LambdaStack],
    moto: Any,
    hook: WebhookReceiver,
    t0: datetime,
) -> None:
    stack = lambda_stack(
        spend={
            "cost_explorer": True,
            "spot_price": "live",
            "include_lustre": True,
            "direct_connect_ports": None,
            "scopes": [{"name": "account", "daily_limit_usd": 1.0, "enforce": True}],
        },
        egress={"enabled": True, "include_nat": True},
        safety={"kill_switch_file": None, "max_actions_per_cycle": 10},
    )
    ec2 = stack.ec2()
    spot = launch(ec2, "p5.48xlarge", {"owner": "bob"}, spot=True)[0]
    asg = launch_asg(ec2, boto3.client("autoscaling"), "burst", "p5.48xlarge", {"owner": "ci"})
    idle = stack.idle_node(t0)  # publishes its own data (once: twice reads as two publishers)
    stack.publish(
        [
            FleetNode(spot, "us-east-1", "nvidia", 8, "busy"),
            FleetNode(asg, "us-east-1", "nvidia", 8, "busy"),
        ],
        t0 - timedelta(minutes=40),
        t0 + timedelta(minutes=30),
    )
    # Old snapshots, so the hourly prune has something to delete (BatchWriteItem).
    old = DynamoState(stack.table)
    for d in range(40, 45):
        old.add_spend(t0 - timedelta(days=d), "account", burn=1, today=1, mtd=1, proj=1)
    boto3.client("sns").publish(TopicArn=stack.topic_arn, Message=BUDGETS_TEXT)

    with recorded_calls() as calls:
        first = invoke(t0, "req-1")  # marks, relays the budget notice, prunes
        second = invoke(t0 + timedelta(minutes=21), "req-2")  # reclaims, enforces the limit
    assert first["budget_notices"] == 1
    assert ec2.describe_instances(InstanceIds=[idle.instance_id])["Reservations"][0]["Instances"][
        0
    ]["State"]["Name"] in ("stopping", "stopped")
    assert first["errors"] == [] and second["errors"] == []

    needed = sorted({a for service, op, params in calls for a in iam_actions(service, op, params)})
    # The run reached every kind of call the brief names: without these the check is empty.
    for must in (
        "secretsmanager:GetSecretValue",
        "dynamodb:GetItem",
        "dynamodb:PutItem",
        "dynamodb:UpdateItem",
        "dynamodb:Query",
        "dynamodb:BatchWriteItem",
        "dynamodb:BatchGetItem",
        "dynamodb:DeleteItem",
        "sqs:ReceiveMessage",
        "sqs:DeleteMessage",
        "ec2:DescribeInstances",
        "ec2:CreateTags",
        "ec2:StopInstances",
        "cloudwatch:GetMetricData",
    ):
        assert must in needed, (must, needed)
    policy = prod_role_policy()
    missing = [a for a in needed if not granted(policy, a)]
    assert missing == [], f"the Lambda role lacks {missing}"
