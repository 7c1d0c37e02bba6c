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


# The stack's queues (infra/components/spot_events.py, infra/components/guardrails.py): Pulumi
# names each <logical name>-<7 hex digits>, so the ARN ends in a wildcard.
SPOT_QUEUE = "guardrails-spot-events"
BUDGET_QUEUE = "guardrails-budget-events"


def onprem_policy_document(
    rule_actions: Mapping[str, Iterable[str]],
    tag_key: str,
    tag_value: str,
    *,
    region: str = "*",
    account: str = "*",
    partition: str = "aws",
) -> dict[str, Any]:
    """IAM policy for a guardrails daemon that runs on-prem (on the Slurm controller, where
    the spot-interruption, burst-reconcile and burst-health rules find scontrol), with an IAM
    user's or role's credentials. Its state is SQLite and its Slack webhook comes from the
    environment or a file, so it needs no DynamoDB, Secrets Manager or CloudWatch Logs grant
    (the Lambda's own resources); it reads the stack's spot events queue (and the budget queue,
    with budget-relay) and nothing else of SQS. Same rules as :func:`policy_document`: reads on
    ``*``, writes only on resources tagged ``tag_key=tag_value``.

    >>> doc = onprem_policy_document({"spot-interruption": ["ec2:DescribeInstances",
    ...     "sqs:ReceiveMessage"]}, "coreburst-stack", "burst", region="us-east-1")
    >>> [s["Resource"] for s in doc["Statement"]][1]
    ['arn:aws:sqs:us-east-1:*:guardrails-spot-events-*']
    """
    if account != "*" and not (account.isdigit() and len(account) == 12):
        raise ValueError(f"{account!r} is not a 12-digit AWS account id (or *)")

    def queue(name: str) -> str:
        return f"arn:{partition}:sqs:{region}:{account}:{name}-*"

    own: dict[str, list[str]] = {}
    spot = [a for a in rule_actions.get("spot-interruption", ()) if a.startswith("sqs:")]
    if spot:
        own[queue(SPOT_QUEUE)] = spot
    budget = [a for a in rule_actions.get("budget-relay", ()) if a.startswith("sqs:")]
    if budget:
        own[queue(BUDGET_QUEUE)] = budget
    doc = policy_document(rule_actions, tag_key, tag_value, own)
    for stmt in doc["Statement"]:  # a queue ARN pattern names no sub-resource
        if isinstance(stmt["Resource"], list) and ":sqs:" in stmt["Resource"][0]:
            stmt["Resource"] = stmt["Resource"][:1]
    return doc
