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
from datetime import timedelta
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


def live_burn(daemon: Any) -> tuple[float, list[tuple[str, float]]]:
    """The fleet's current $/h and the top five owners by $/h.

    The total is the account scope's burn the spend rule just recorded (instances, Lustre and
    Direct Connect); only without one is it summed from the inventory here.
    """
    by_owner: dict[str, float] = {}
    for node in daemon.nodes:
        rate = daemon.price(node)
        if rate is not None:
            who = daemon.owner(node)
            by_owner[who] = by_owner.get(who, 0.0) + rate
    account = next((s.name for s in daemon.cfg.spend.scopes if s.tag_key is None), None)
    snapshot = daemon.state.last_spend(account) if account else None
    total = float(snapshot["burn"]) if snapshot else sum(by_owner.values())
    top = sorted(by_owner.items(), key=lambda kv: -kv[1])[:5]
    return total, top


def relay_budget_notices(daemon: Any, queue_url: str) -> int:
    """Drain the budget queue into the outbox after a cycle; returns notices relayed.

    Each message is deleted only once its alert is stored (or known), so nothing is lost and
    nothing is sent twice.
    """
    from guardrails.slack import Alert

    region = queue_url.split(".")[1] if queue_url.startswith("https://sqs.") else None
    sqs = daemon.aws.client("sqs", region or daemon.cfg.regions[0])
    burn, top = live_burn(daemon)
    relayed = 0
    for receipt, notice in receive(sqs, queue_url):
        daemon.alert(
            Alert(
                dedupe_key=f"budget:{notice.message_id}",
                alert_key=f"budget:{notice.budget_name}:{notice.alert_type}:{notice.threshold}",
                title=f"Budget alert: {notice.budget_name}",
                lines=notice_lines(notice, burn, top),
                severity="critical" if notice.alert_type == "ACTUAL" else "warning",
            ),
            cooldown=timedelta(0),
        )
        sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=receipt)
        daemon.audit("budget.relayed", message_id=notice.message_id, budget=notice.budget_name)
        relayed += 1
    if relayed and daemon.leader:  # one sender per store; a standby leaves it to the leader
        daemon.outbox.flush()
    return relayed
