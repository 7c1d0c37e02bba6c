"""The deployed guardrails entry point (guardrails.lambda_handler) recreated on a moto server:
what the Guardrails component deploys, the context Lambda hands the handler, and one
invocation. The ``lambda_stack`` fixture (tests/integration/guardrails/conftest.py) deploys it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import boto3

from coreburst.sandbox.clocks import FakeClock
from coreburst.sandbox.emulator import FleetNode, launch, publish
from tests.helpers.guardrails_loopback import METRICS

BUDGETS_TEXT = """AWS Budget Notification December 02, 2026
AWS Account 123456789012

Budget Name: budget-monthly
Budget Type: Cost
Budgeted Amount: $60,000.00
Alert Type: ACTUAL
Alert Threshold: > $48,000.00
ACTUAL Amount: $48,211.07
"""


@dataclass
class LambdaContext:
    """The context attributes the handler reads, as Lambda's Python runtime provides them
    ("Using the Lambda context object to retrieve Python function information",
    https://docs.aws.amazon.com/lambda/latest/dg/python-context.html). Made up by us."""

    aws_request_id: str
    timeout_s: float = 120.0

    def get_remaining_time_in_millis(self) -> int:
        return int(self.timeout_s * 1000)


@dataclass
class LambdaStack:
    """What the Guardrails component deploys, recreated on the emulator: the state table, the
    webhook secret, the budget queue behind its SNS topic, and the function's environment."""

    endpoint: str
    table: Any
    queue_url: str
    topic_arn: str
    env: dict[str, str]

    def ec2(self) -> Any:
        return boto3.client("ec2", endpoint_url=self.endpoint)

    def cw(self) -> Any:
        return boto3.client("cloudwatch", endpoint_url=self.endpoint)

    def idle_node(self, at: datetime, tags: dict[str, str] | None = None) -> FleetNode:
        """A p5 whose eight GPUs have been idle for the 40 minutes before ``at``."""
        iid = launch(self.ec2(), "p5.48xlarge", {"owner": "alice", **(tags or {})})[0]
        node = FleetNode(iid, "us-east-1", "nvidia", 8, "idle")
        self.publish([node], at - timedelta(minutes=40), at + timedelta(minutes=30))
        return node

    def publish(self, nodes: list[FleetNode], start: datetime, end: datetime) -> None:
        publish({"us-east-1": self.cw()}, nodes, start, end, metric_defs=METRICS)

    def tags(self, iid: str) -> dict[str, str]:
        r = self.ec2().describe_instances(InstanceIds=[iid])["Reservations"][0]["Instances"][0]
        return {t["Key"]: t["Value"] for t in r.get("Tags", [])}

    def instance_state(self, iid: str) -> str:
        r = self.ec2().describe_instances(InstanceIds=[iid])["Reservations"][0]["Instances"][0]
        return str(r["State"]["Name"])


def lambda_config(endpoint: str, tmp: Path, **over: Any) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "regions": ["us-east-1"],
        "aws": {"endpoint_url": endpoint, "max_attempts": 2},
        "dry_run": False,
        "interval": "60s",  # what the component derives from rate(1 minute)
        "idle": {"window": "30m", "max_gap": "5m"},
        "reclaim": {"grace": "20m"},
        "state": {"audit_log": str(tmp / "audit.jsonl")},
        "safety": {"kill_switch_file": None},
        "metrics_endpoint": {"enabled": False},
        "slack": {"backoff_base": "1s"},
        "spend": {
            "cost_explorer": False,
            "spot_price": "catalog-estimate",
            "include_lustre": False,
            "direct_connect_ports": [],
            "scopes": [{"name": "account"}],
        },
        "egress": {"enabled": False},
    }
    cfg.update(over)
    return cfg


def invoke(at: datetime, request_id: str) -> dict[str, Any]:
    from guardrails.lambda_handler import run

    return run({}, LambdaContext(request_id), clock=FakeClock(at))
