"""Parsing AWS Budgets notifications as they arrive through SNS and SQS."""

from __future__ import annotations

import json

from guardrails.adapters.budget_queue import parse_notice
from guardrails.messages import budget_notice_lines as notice_lines

# The shape AWS Budgets publishes to SNS (text body; figures made up).
BUDGETS_TEXT = """AWS Budget Notification December 02, 2026
AWS Account 123456789012

Dear AWS Customer,

You requested that we alert you when the ACTUAL Cost associated with your budget-monthly
budget is greater than $960,000.00 for the current month.

Budget Name: budget-monthly
Budget Type: Cost
Budgeted Amount: $1,200,000.00
Alert Type: ACTUAL
Alert Threshold: > $960,000.00
ACTUAL Amount: $985,112.33
"""


def test_sns_envelope_is_unwrapped() -> None:
    body = json.dumps({"Type": "Notification", "MessageId": "m-42", "Message": BUDGETS_TEXT})
    n = parse_notice(body, "sqs-id")
    assert (n.message_id, n.budget_name, n.alert_type) == ("m-42", "budget-monthly", "ACTUAL")
    assert (n.threshold, n.amount, n.budgeted) == (
        "> $960,000.00",
        "$985,112.33",
        "$1,200,000.00",
    )


def test_raw_delivery_uses_the_sqs_message_id() -> None:
    n = parse_notice(BUDGETS_TEXT, "sqs-id")
    assert n.message_id == "sqs-id" and n.parsed


def test_lines_carry_live_burn_and_top_spenders() -> None:
    n = parse_notice(BUDGETS_TEXT, "x")
    lines = notice_lines(n, 1012.736, [("team=fm", 880.0), ("team=ml", 132.74)])
    assert lines[0] == (
        "AWS Budgets: *budget-monthly* actual cost $985,112.33 crossed > $960,000.00 "
        "(budget $1,200,000.00)."
    )
    assert "*$1,012.74/h* ($24,306/day)" in lines[1]
    assert lines[2] == "Top spenders now: team=fm $880.00/h, team=ml $132.74/h"


def test_unparseable_notice_is_forwarded_not_dropped() -> None:
    n = parse_notice("something else entirely\nsecond line", "sqs-9")
    assert not n.parsed
    assert notice_lines(n, 0.0, [])[0].endswith("could not parse: something else entirely")
