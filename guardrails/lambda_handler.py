"""AWS Lambda entry point: one guardrail cycle per invocation (EventBridge Scheduler).

Configuration arrives through the function's environment, set by the ``Guardrails`` Pulumi
component: the daemon config as JSON (``COREBURST_CONFIG_JSON``, whose ``interval`` is the
schedule's), the DynamoDB state table, the Slack webhook's Secrets Manager ARN and the
budget-notification queue (``COREBURST_BUDGET_QUEUE_URL``, which becomes the ``budget-relay``
rule's ``budget_relay.queue_url``). An invocation runs one daemon cycle; the relay is a rule of
it like the others.

Each invocation builds a fresh daemon, so what must outlive it is in the state table: the
leader lease, marks, the outbox, and when utilization and egress were last read (the rules
keep ``idle.every`` and ``egress.every`` through the store's kv, not in memory), so an
invocation between reads requests no metrics for them.

Every invocation has its own lease owner (``lambda:<request id>``), so it hands the leader lease
back before it returns; one that dies holding it (timeout, out of memory) blocks the next at most
one schedule interval, because the lease lives no longer than that.

    >>> handler({}, context)  # doctest: +SKIP
    {'nodes': 12, 'alerts_queued': 1, 'budget_notices': 0, 'errors': []}
"""

from __future__ import annotations

import json
import os
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import boto3

from guardrails.clock import Clock
from guardrails.config import GuardrailsConfig
from guardrails.configfile import parse_config
from guardrails.stores.dynamodb import DynamoState

if TYPE_CHECKING:
    from guardrails.actuator import PauseFn


def _webhook(secret_arn: str | None) -> str | None:
    if not secret_arn:
        return None
    value = boto3.client("secretsmanager").get_secret_value(SecretId=secret_arn)
    return str(value.get("SecretString") or "").strip() or None


def lease_ttl(cfg: GuardrailsConfig, context: Any) -> timedelta:
    """How long this invocation's lease may outlive it: one schedule interval, and never
    longer than the invocation itself may still run (Lambda stops it at its timeout)."""
    ttl = cfg.interval
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    if callable(remaining):
        ttl = min(ttl, timedelta(milliseconds=max(1000, int(remaining()))))
    return ttl


def run(
    event: dict[str, Any],
    context: Any,
    *,
    clock: Clock | None = None,
    pause: PauseFn | None = None,
) -> dict[str, Any]:
    """``handler`` with an injectable clock and pause hook (tests move time and stop the
    invocation mid-cycle; Lambda uses the system clock and no pause)."""
    from guardrails.adapters.aws import Aws
    from guardrails.daemon import Daemon

    del event  # the schedule's payload carries nothing the cycle needs
    raw = json.loads(os.environ.get("COREBURST_CONFIG_JSON", "{}"))
    queue = os.environ.get("COREBURST_BUDGET_QUEUE_URL")
    if queue and isinstance(raw, dict):
        raw.setdefault("budget_relay", {})["queue_url"] = queue
    cfg: GuardrailsConfig = parse_config(json.dumps(raw), "lambda env")
    table = boto3.resource("dynamodb").Table(os.environ["COREBURST_STATE_TABLE"])
    state = DynamoState(table, snapshot_retention=cfg.state.snapshot_retention)
    daemon = Daemon(
        cfg,
        Aws(cfg.aws),
        state,
        clock=clock,
        pause=pause,
        webhook_url=_webhook(os.environ.get("COREBURST_SLACK_WEBHOOK_SECRET_ARN")),
        owner_id=f"lambda:{getattr(context, 'aws_request_id', 'local')}",
        lease_ttl=lease_ttl(cfg, context),
    )
    try:
        report = daemon.run_cycle()
    finally:
        # The next invocation has another owner id: it may act only once this one's lease is
        # gone, so hand it back here rather than leave it to expire.
        daemon.release_lease()
        daemon.close()
    return {
        "nodes": report.nodes,
        "alerts_queued": report.alerts_queued,
        "budget_notices": report.budget_notices,
        "errors": report.errors,
    }


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return run(event, context)
