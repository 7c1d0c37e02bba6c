"""AWS Budgets notifications, relayed to Slack with what Budgets cannot know: the live burn.

The stack's Budget component publishes to SNS; SNS delivers to an SQS queue; each cycle the
daemon drains the queue, and for each notification queues one Slack alert (deduplicated on the
SNS message id) enriched with the current burn rate and the top spenders. A message is deleted
from the queue only after its alert is stored in the outbox, so a crash in between re-delivers
it and the dedupe key keeps it from being sent twice.
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


def notice_lines(
    notice: BudgetNotice, burn_usd_per_hour: float, top: list[tuple[str, float]]
) -> list[str]:
    if notice.parsed:
        head = (
            f"AWS Budgets: *{notice.budget_name}* {notice.alert_type.lower()} cost "
            f"{notice.amount} crossed {notice.threshold} (budget {notice.budgeted})."
        )
    else:
        head = (
            "AWS Budgets sent a notification coreburst could not parse: "
            + (notice.raw.strip().splitlines() or ["(empty)"])[0][:200]
        )
    lines = [
        head,
        "Budgets data lags 8-24 h; right now the fleet burns "
        f"*${burn_usd_per_hour:,.2f}/h* (${burn_usd_per_hour * 24:,.0f}/day).",
    ]
    if top:
        lines.append("Top spenders now: " + ", ".join(f"{who} ${rate:,.2f}/h" for who, rate in top))
    return lines
