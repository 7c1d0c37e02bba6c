"""Against moto server and the loopback Slack receiver: two daemons on one store act once,
and an AWS Budgets notification travels SNS -> SQS -> daemon -> Slack exactly once."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from guardrails.budget_relay import relay_budget_notices
from guardrails.emulator import WebhookReceiver

from .test_daemon_loopback import fleet, step

pytestmark = pytest.mark.integration

BUDGETS_TEXT = """AWS Budget Notification December 02, 2026
AWS Account 123456789012

Budget Name: budget-monthly
Budget Type: Cost
Budgeted Amount: $60,000.00
Alert Type: ACTUAL
Alert Threshold: > $48,000.00
ACTUAL Amount: $48,211.07
"""


def test_two_daemons_on_one_store_act_once(harness: Any, hook: WebhookReceiver) -> None:
    a = harness()
    b = harness()  # same state file: a second daemon, e.g. a Lambda beside a long-running one
    b.daemon.owner_id = "other-host"
    b.clock = a.clock
    b.daemon.clock = a.clock
    n = fleet(a)
    nodes = list(n.values())
    t = a.clock.now() - timedelta(minutes=40)
    step(a, nodes, t)
    rb = b.daemon.run_cycle()
    assert not b.daemon.leader and rb.actions == []
    a.clock.advance(timedelta(minutes=35))
    ra = step(a, nodes, a.clock.now() - timedelta(minutes=35))
    rb = b.daemon.run_cycle()
    assert len(ra.actions) == 3 and rb.actions == []
    done = [r for r in a.state.actions() if r["status"] == "done"]
    assert len(done) == 3
    audit = (a.cfg.state.audit_log).read_text()
    assert '"leader.standby"' in audit


def test_budget_notification_end_to_end(harness: Any, hook: WebhookReceiver) -> None:
    h = harness()
    sns, sqs = h.client("sns"), h.client("sqs")
    topic = sns.create_topic(Name="budget-alerts")["TopicArn"]
    queue = sqs.create_queue(QueueName="budget-events")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=queue_arn)
    sns.publish(TopicArn=topic, Message=BUDGETS_TEXT, Subject="AWS Budgets: budget-monthly")

    n = fleet(h)
    step(h, list(n.values()), h.clock.now() - timedelta(minutes=5))
    before = len(hook.posts)
    assert relay_budget_notices(h.daemon, queue) == 1
    posts = hook.posts[before:]
    (post,) = [p for p in posts if p["blocks"][0]["text"]["text"].startswith("Budget alert")]
    text = json.dumps(post)
    assert "budget-monthly" in text and "$48,211.07" in text
    # Enriched with the live burn from the inventory the cycle just took.
    burn = sum(h.daemon.price(x) or 0.0 for x in h.daemon.nodes)
    assert f"${burn:,.2f}/h" in text
    assert "Top spenders now: owner=" in text
    # The message is gone from the queue, and a re-run sends nothing twice.
    assert sqs.receive_message(QueueUrl=queue).get("Messages", []) == []
    assert relay_budget_notices(h.daemon, queue) == 0
    assert len([p for p in hook.posts if "Budget alert" in json.dumps(p)]) == 1


def test_lambda_handler_runs_one_cycle_on_dynamodb(
    moto: Any, hook: WebhookReceiver, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The deployed entry point: config from the environment, state in DynamoDB, the webhook
    from Secrets Manager; everything on the emulator."""
    import boto3

    from guardrails.lambda_handler import handler
    from guardrails.state_dynamo import DynamoState, create_table

    monkeypatch.setenv("AWS_ENDPOINT_URL", moto.url)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    table = create_table(boto3.resource("dynamodb"), "guardrails-state")
    secret = boto3.client("secretsmanager").create_secret(
        Name="slack-webhook", SecretString=hook.url
    )["ARN"]
    boto3.client("ec2").run_instances(
        ImageId="ami-12c6146b", InstanceType="p5.48xlarge", MinCount=1, MaxCount=1
    )
    config = {
        "regions": ["us-east-1"],
        "aws": {"endpoint_url": moto.url},
        "dry_run": True,
        "state": {"audit_log": str(tmp_path / "audit.jsonl")},
        "safety": {"kill_switch_file": None},
        "metrics_endpoint": {"enabled": False},
        "spend": {
            "cost_explorer": False,
            "spot_price": "catalog-estimate",
            "include_lustre": False,
            "direct_connect_ports": [],
        },
        "egress": {"enabled": False},
    }
    monkeypatch.setenv("COREBURST_CONFIG_JSON", json.dumps(config))
    monkeypatch.setenv("COREBURST_STATE_TABLE", "guardrails-state")
    monkeypatch.setenv("COREBURST_SLACK_WEBHOOK_SECRET_ARN", secret)
    out = handler({}, None)
    assert out["nodes"] >= 1 and out["errors"] == []
    # The invocation took the leader lease in DynamoDB: nobody else may act for now.
    assert not DynamoState(table).acquire_lease("leader", "someone-else", datetime.now(UTC), 60)
