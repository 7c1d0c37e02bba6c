"""Rule ``budget-relay``: AWS Budgets notifications, relayed to Slack with what Budgets cannot
know: the live burn rate and the top spenders.

The stack's Budget component publishes to SNS; SNS delivers to an SQS queue
(``budget_relay.queue_url``; the Lambda sets it from the stack). Each cycle this rule drains
the queue and queues one Slack alert per notification, deduplicated on the SNS message id. A
message is deleted from the queue only after its alert is stored in the outbox, so a crash in
between re-delivers it and the dedupe key keeps it from being sent twice. It runs after
``spend-limit``, whose burn it reports.

    >>> # run(ctx)   # ctx: guardrails.rules.RuleContext
"""

from __future__ import annotations

from datetime import timedelta

from pydantic import Field

from guardrails import messages
from guardrails.adapters.budget_queue import receive
from guardrails.configtypes import StrictModel
from guardrails.rules.base import Rule, RuleContext


# -- params: the ``budget_relay`` section -----------------------------------------------------
class BudgetRelayConfig(StrictModel):
    """``budget_relay``: AWS Budgets notifications (SNS to SQS) relayed to Slack."""

    queue_url: str | None = Field(default=None, pattern=r"^https?://\S+$")
    """The SQS queue AWS Budgets notifications arrive on (SNS -> SQS); unset = nothing to relay. The
    Lambda sets it from COREBURST_BUDGET_QUEUE_URL, which the stack's component writes."""
    max_batches: int = Field(default=5, ge=1, le=100)  # of up to 10 messages each per cycle
    """SQS receives per cycle, of up to 10 messages each."""


def live_burn(ctx: RuleContext) -> tuple[float, list[tuple[str, float]]]:
    """The fleet's current $/h and the top five owners by $/h.

    The total is the account scope's burn the spend rule just recorded (instances, Lustre and
    Direct Connect); only without one is it summed from the inventory here.
    """
    by_owner: dict[str, float] = {}
    for node in ctx.nodes:
        rate = ctx.prices.hourly(node)
        if rate is not None:
            who = ctx.owner(node)
            by_owner[who] = by_owner.get(who, 0.0) + rate
    account = next((s.name for s in ctx.cfg.spend.scopes if s.tag_key is None), None)
    snapshot = ctx.state.last_spend(account) if account else None
    total = float(snapshot["burn"]) if snapshot else sum(by_owner.values())
    top = sorted(by_owner.items(), key=lambda kv: -kv[1])[:5]
    return total, top


def queue_region(queue_url: str, default: str) -> str:
    """``https://sqs.<region>.amazonaws.com/...`` -> region; another form (an emulator's
    endpoint) -> ``default``."""
    return queue_url.split(".")[1] if queue_url.startswith("https://sqs.") else default


def run(ctx: RuleContext) -> None:
    """Drain the budget queue into the outbox; ``report.budget_notices`` counts the relayed."""
    params: BudgetRelayConfig = ctx.cfg.budget_relay
    url = params.queue_url
    if not url:
        return
    sqs = ctx.aws.client("sqs", queue_region(url, ctx.cfg.regions[0]))
    burn, top = live_burn(ctx)
    for receipt, notice in receive(sqs, url, params.max_batches):
        ctx.alert(messages.budget_notice(notice, burn, top), timedelta(0))
        sqs.delete_message(QueueUrl=url, ReceiptHandle=receipt)
        ctx.actuator.audit(
            "budget.relayed", message_id=notice.message_id, budget=notice.budget_name
        )
        ctx.report.budget_notices += 1


RULE = Rule(
    name="budget-relay",
    order=40,
    description=(
        "Relay AWS Budgets notifications (SNS -> SQS) to Slack with the live burn rate and "
        "the top spenders; a message leaves the queue only once its alert is stored."
    ),
    params=BudgetRelayConfig,
    # What ``receive`` and ``run`` call, on the stack's own queue.
    iam_actions=("sqs:ReceiveMessage", "sqs:DeleteMessage"),
    section=lambda c: c.budget_relay,
    enabled=lambda c: c.budget_relay.queue_url is not None,
    run=run,
    example="budget_relay: {queue_url: https://sqs.us-east-1.amazonaws.com/123456789012/q}",
    sections={"budget_relay": BudgetRelayConfig},
)
