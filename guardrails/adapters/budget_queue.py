"""AWS Budgets notifications as they arrive on the stack's SQS queue: the parser (pure) and
the queue reader (an AWS adapter).

The stack's Budget component publishes to SNS; SNS delivers to an SQS queue; the
``budget-relay`` rule (``guardrails.rules.budget_relay``, the relay's one home: what it reads,
adds and sends) drains it each cycle through :func:`receive` and relays each notice to Slack
with the live burn (wording: ``guardrails.messages.budget_notice``).

    >>> parse_notice("Budget Name: team\\nAlert Type: ACTUAL", "m-1").budget_name
    'team'
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

_FIELD = re.compile(
    r"^(Budget Name|Budgeted Amount|Alert Type|Alert Threshold|"
    r"ACTUAL Amount|FORECASTED Amount):\s*(.+?)\s*$",
    re.M,
)


@dataclass(frozen=True)
class BudgetNotice:
    message_id: str
    budget_name: str
    alert_type: str  # ACTUAL | FORECASTED | unknown
    threshold: str
    amount: str
    budgeted: str
    raw: str = field(repr=False, default="")

    @property
    def parsed(self) -> bool:
        return self.budget_name != "unknown"


def parse_notice(body: str, fallback_id: str) -> BudgetNotice:
    """One SQS message body: an SNS envelope (raw delivery off) or the bare Budgets text."""
    message_id, text = fallback_id, body
    try:
        envelope = json.loads(body)
    except json.JSONDecodeError:
        envelope = None
    if isinstance(envelope, dict) and "Message" in envelope:
        message_id = str(envelope.get("MessageId", fallback_id))
        text = str(envelope["Message"])
    found = dict(_FIELD.findall(text))
    alert_type = found.get("Alert Type", "unknown").upper()
    amount = found.get(f"{alert_type} Amount") or found.get("ACTUAL Amount") or "unknown"
    return BudgetNotice(
        message_id=message_id,
        budget_name=found.get("Budget Name", "unknown"),
        alert_type=alert_type,
        threshold=found.get("Alert Threshold", "unknown"),
        amount=amount,
        budgeted=found.get("Budgeted Amount", "unknown"),
        raw=text,
    )


def receive(sqs: Any, queue_url: str, max_batches: int = 5) -> list[tuple[str, BudgetNotice]]:
    """Up to ``max_batches`` x 10 notifications, with their receipt handles (not yet deleted)."""
    out: list[tuple[str, BudgetNotice]] = []
    for _ in range(max_batches):
        resp = sqs.receive_message(
            QueueUrl=queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=0, VisibilityTimeout=120
        )
        msgs = resp.get("Messages", [])
        for m in msgs:
            out.append((m["ReceiptHandle"], parse_notice(m["Body"], m["MessageId"])))
        if len(msgs) < 10:
            break
    return out
