"""AWS Lambda entry point: one guardrail cycle per invocation (EventBridge Scheduler).

Configuration arrives through the function's environment, set by the ``Guardrails`` Pulumi
component: the daemon config as JSON (``COREBURST_CONFIG_JSON``), the DynamoDB state table,
the Slack webhook's Secrets Manager ARN and the budget-notification queue.
"""

from __future__ import annotations

import json
import os
from typing import Any

import boto3

from guardrails.budget_relay import relay_budget_notices
from guardrails.config import GuardrailsConfig, parse_config
from guardrails.state_dynamo import DynamoState


def _webhook(secret_arn: str | None) -> str | None:
    if not secret_arn:
        return None
    value = boto3.client("secretsmanager").get_secret_value(SecretId=secret_arn)
    return str(value.get("SecretString") or "").strip() or None


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    from guardrails.aws import Aws
    from guardrails.daemon import Daemon

    cfg: GuardrailsConfig = parse_config(
        json.dumps(json.loads(os.environ.get("COREBURST_CONFIG_JSON", "{}"))), "lambda env"
    )
    table = boto3.resource("dynamodb").Table(os.environ["COREBURST_STATE_TABLE"])
    state = DynamoState(table)
    daemon = Daemon(
        cfg,
        Aws(cfg.aws),
        state,  # type: ignore[arg-type]
        webhook_url=_webhook(os.environ.get("COREBURST_SLACK_WEBHOOK_SECRET_ARN")),
        owner_id=f"lambda:{getattr(context, 'aws_request_id', 'local')}",
    )
    try:
        report = daemon.run_cycle()
        queue = os.environ.get("COREBURST_BUDGET_QUEUE_URL")
        relayed = relay_budget_notices(daemon, queue) if queue else 0
    finally:
        daemon.close()
    return {
        "nodes": report.nodes,
        "alerts_queued": report.alerts_queued,
        "budget_notices": relayed,
        "errors": report.errors,
    }
