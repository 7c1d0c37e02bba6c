"""The guardrail daemon's IAM policy, generated from what its rules declare they need (pure).

Reads are allowed broadly (inventory, metrics and prices have no resource-level scoping worth
having). Every write action — stop, terminate, tag, scale — is allowed only on resources that
carry the stack's managed tag, through the ``aws:ResourceTag`` condition key; a write action
on ``*`` without that condition is never generated.

    >>> doc = policy_document({"idle-gpu": ["ec2:DescribeInstances", "ec2:StopInstances"]},
    ...                       "coreburst-stack", "prod")
    >>> [s["Sid"] for s in doc["Statement"]]
    ['GuardrailReads', 'GuardrailWritesOnManagedResources']
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

READ_VERBS = ("Describe", "Get", "List", "Lookup", "BatchGet", "Search")

# What guardrails.stores.dynamodb does to its table. BatchWriteItem is the snapshot prune;
# BatchGetItem reads the pending outbox rows through their refs. The outbox's
# TransactWriteItems needs no action of its own: each Put, Update or Delete in it is authorized
# as dynamodb:PutItem, UpdateItem or DeleteItem ("Using IAM with DynamoDB transactions", https://docs.aws.amazon.com/
# amazondynamodb/latest/developerguide/transaction-apis-iam.html).
# tests/integration/guardrails/test_lambda_iam.py records every call the Lambda makes and
# fails if one is not granted.
STATE_TABLE_ACTIONS = (
    "dynamodb:BatchGetItem",
    "dynamodb:BatchWriteItem",
    "dynamodb:DeleteItem",
    "dynamodb:GetItem",
    "dynamodb:PutItem",
    "dynamodb:Query",
    "dynamodb:UpdateItem",
)


def is_read_action(action: str) -> bool:
    service, _, verb = action.partition(":")
    if not service or not verb:
        raise ValueError(f"{action!r} is not an IAM action (service:Action)")
    return verb.startswith(READ_VERBS)


def policy_document(
    rule_actions: Mapping[str, Iterable[str]],
    tag_key: str,
    tag_value: str,
    own_resources: Mapping[str, Iterable[str]] | None = None,
) -> dict[str, Any]:
    """IAM policy for the daemon.

    ``rule_actions`` maps each enabled rule to the actions it declares. ``own_resources``
    maps the daemon's own resource ARNs (state table, secret, queue, log group) to the actions
    it needs on each one; those are scoped to the ARN itself, and a rule action among them
    (``budget-relay``'s ``sqs:ReceiveMessage``) is granted only there.

    >>> doc = policy_document({"budget-relay": ["sqs:ReceiveMessage"]}, "k", "v",
    ...                       {"arn:aws:sqs:us-east-1:1:q": ["sqs:ReceiveMessage"]})
    >>> [(s["Sid"], s["Action"]) for s in doc["Statement"]]
    [('GuardrailOwnResource0', ['sqs:ReceiveMessage'])]
    """
    own = {arn: set(acts) for arn, acts in (own_resources or {}).items() if acts}
    # A rule action the daemon's own resources are granted (the budget relay's SQS calls, on
    # the stack's queue) is allowed there only, not on every tagged resource as well.
    on_own = set().union(*own.values()) if own else set()
    actions = {a for acts in rule_actions.values() for a in acts} - on_own
    reads = sorted(a for a in actions if is_read_action(a))
    writes = sorted(a for a in actions if not is_read_action(a))
    statements: list[dict[str, Any]] = []
    if reads:
        statements.append(
            {"Sid": "GuardrailReads", "Effect": "Allow", "Action": reads, "Resource": "*"}
        )
    if writes:
        statements.append(
            {
                "Sid": "GuardrailWritesOnManagedResources",
                "Effect": "Allow",
                "Action": writes,
                "Resource": "*",
                "Condition": {"StringEquals": {f"aws:ResourceTag/{tag_key}": tag_value}},
            }
        )
    for i, (arn, acts) in enumerate(sorted(own.items())):
        statements.append(
            {
                "Sid": f"GuardrailOwnResource{i}",
                "Effect": "Allow",
                "Action": sorted(acts),
                "Resource": [arn, f"{arn}/*"] if ":log-group:" not in arn else f"{arn}:*",
            }
        )
    return {"Version": "2012-10-17", "Statement": statements}
