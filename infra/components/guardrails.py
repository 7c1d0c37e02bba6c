"""Guardrails: the guardrail daemon deployed beside the fleet as a scheduled Lambda.

One daemon cycle per invocation (EventBridge Scheduler), state in DynamoDB, the Slack webhook
in Secrets Manager, AWS Budgets notifications relayed through SQS, and an IAM role generated
from the enabled rules' declarations (``infra.guardrails_iam``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_aws as aws

from guardrails.stores.dynamodb import TTL_ATTRIBUTE
from infra.components import TOKEN_PREFIX
from infra.guardrails_iam import STATE_TABLE_ACTIONS, policy_document

_RATE = re.compile(r"^rate\((\d+) (minute|minutes|hour|hours|day|days)\)$")
_UNIT_S = {"minute": 60, "hour": 3600, "day": 86400}


def schedule_interval_s(expression: str) -> int:
    """Seconds between two runs of an EventBridge Scheduler expression.

    ``rate(value unit)`` gives it exactly ("Schedule types on EventBridge Scheduler",
    https://docs.aws.amazon.com/scheduler/latest/UserGuide/schedule-types.html). A ``cron()``
    schedule has no fixed interval; one minute, its finest granularity, is the safe lower bound
    (the daemon's lease lives no longer than this, so a crashed invocation never blocks the
    next one).

    >>> schedule_interval_s("rate(5 minutes)"), schedule_interval_s("cron(0 * * * ? *)")
    (300, 60)
    """
    m = _RATE.match(expression.strip())
    if not m:
        return 60
    return int(m.group(1)) * _UNIT_S[m.group(2).rstrip("s")]


def _assume(service: str, condition: Mapping[str, Any] | None = None) -> str:
    """Trust policy letting ``service`` assume the role (optionally only under ``condition``)."""
    statement: dict[str, Any] = {
        "Effect": "Allow",
        "Principal": {"Service": service},
        "Action": "sts:AssumeRole",
    }
    if condition:
        statement["Condition"] = dict(condition)
    return json.dumps({"Version": "2012-10-17", "Statement": [statement]})


def scheduler_trust_policy(function_arn: str, group: str = "default") -> str:
    """The Scheduler execution role's trust policy, pinned to this account's schedule group
    against the confused-deputy problem (IAM User Guide, "The confused deputy problem",
    https://docs.aws.amazon.com/IAM/latest/UserGuide/confused-deputy.html; EventBridge Scheduler
    User Guide, "Set up the execution role", https://docs.aws.amazon.com/scheduler/latest/
    UserGuide/setting-up.html#setting-up-execution-role)."""
    _, partition, _, region, account, *_ = function_arn.split(":")
    group_arn = f"arn:{partition}:scheduler:{region}:{account}:schedule-group/{group}"
    return _assume(
        "scheduler.amazonaws.com",
        {
            "StringEquals": {"aws:SourceAccount": account},
            "ArnEquals": {"aws:SourceArn": group_arn},
        },
    )


SPOT_RULE = "spot-interruption"


@dataclass
class GuardrailsArgs:
    code: pulumi.Archive
    rule_actions: Mapping[str, Sequence[str]]
    tag_key: str
    tag_value: str
    budget_topic_arn: pulumi.Input[str]
    schedule_expression: str = "rate(1 minute)"
    daemon_config: Mapping[str, object] = field(default_factory=dict)
    memory_mb: int = 512
    timeout_s: int = 120
    # The stack's spot events queue (infra/components/spot_events.py): the spot-interruption
    # rule's role grants its queue calls on it only.
    spot_queue: aws.sqs.Queue | None = None


class Guardrails(pulumi.ComponentResource):
    def __init__(
        self, name: str, args: GuardrailsArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(f"{TOKEN_PREFIX}:Guardrails", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)

        # Conditional writes on this table keep two overlapping invocations from acting twice.
        self.table = aws.dynamodb.Table(
            f"{name}-state",
            billing_mode="PAY_PER_REQUEST",
            hash_key="pk",
            range_key="sk",
            attributes=[
                aws.dynamodb.TableAttributeArgs(name="pk", type="S"),
                aws.dynamodb.TableAttributeArgs(name="sk", type="S"),
            ],
            point_in_time_recovery=aws.dynamodb.TablePointInTimeRecoveryArgs(enabled=True),
            server_side_encryption=aws.dynamodb.TableServerSideEncryptionArgs(enabled=True),
            # Snapshots carry this attribute (epoch seconds): DynamoDB deletes them by itself
            # even when the daemon's hourly prune cannot run.
            ttl=aws.dynamodb.TableTtlArgs(attribute_name=TTL_ATTRIBUTE, enabled=True),
            opts=child,
        )
        # The webhook URL is set out of band (`aws secretsmanager put-secret-value`), never in
        # stack config or state.
        self.secret = aws.secretsmanager.Secret(
            f"{name}-slack-webhook", description="Slack incoming webhook for coreburst", opts=child
        )
        self.queue = aws.sqs.Queue(
            f"{name}-budget-events",
            message_retention_seconds=1_209_600,
            sqs_managed_sse_enabled=True,
            opts=child,
        )
        aws.sqs.QueuePolicy(
            f"{name}-budget-events-policy",
            queue_url=self.queue.url,
            policy=pulumi.Output.all(self.queue.arn, args.budget_topic_arn).apply(
                lambda v: json.dumps(
                    {
                        "Version": "2012-10-17",
                        "Statement": [
                            {
                                "Effect": "Allow",
                                "Principal": {"Service": "sns.amazonaws.com"},
                                "Action": "sqs:SendMessage",
                                "Resource": v[0],
                                "Condition": {"ArnEquals": {"aws:SourceArn": v[1]}},
                            }
                        ],
                    }
                )
            ),
            opts=child,
        )
        aws.sns.TopicSubscription(
            f"{name}-budget-to-queue",
            topic=args.budget_topic_arn,
            protocol="sqs",
            endpoint=self.queue.arn,
            raw_message_delivery=True,
            opts=child,
        )
        # EC2 spot interruption warnings and rebalance recommendations for the
        # spot-interruption rule, when it is deployed: the stack's SpotEvents queue
        # (infra/components/spot_events.py), declared beside this component.
        self.spot_queue = args.spot_queue if SPOT_RULE in args.rule_actions else None
        if SPOT_RULE in args.rule_actions and self.spot_queue is None:
            raise ValueError("the spot-interruption rule needs the stack's SpotEvents queue")
        self.log_group = aws.cloudwatch.LogGroup(
            f"{name}-logs", name=f"/aws/lambda/{name}-daemon", retention_in_days=90, opts=child
        )

        self.role = aws.iam.Role(
            f"{name}-role", assume_role_policy=_assume("lambda.amazonaws.com"), opts=child
        )
        spot_arn = self.spot_queue.arn if self.spot_queue is not None else ""
        self.policy = pulumi.Output.all(
            self.table.arn, self.secret.arn, self.queue.arn, self.log_group.arn, spot_arn
        ).apply(
            lambda arns: json.dumps(
                policy_document(
                    args.rule_actions,
                    args.tag_key,
                    args.tag_value,
                    own_resources={
                        arns[0]: list(STATE_TABLE_ACTIONS),
                        arns[1]: ["secretsmanager:GetSecretValue"],
                        # What the budget-relay rule declares (guardrails/rules/
                        # budget_relay.py), on this queue only; nothing when it is off.
                        arns[2]: list(args.rule_actions.get("budget-relay", ())),
                        arns[3]: ["logs:CreateLogStream", "logs:PutLogEvents"],
                        # The spot-interruption rule's queue calls, on its queue only.
                        **(
                            {arns[4]: [a for a in args.rule_actions[SPOT_RULE] if a[:4] == "sqs:"]}
                            if arns[4]
                            else {}
                        ),
                    },
                )
            )
        )
        aws.iam.RolePolicy(f"{name}-role-policy", role=self.role.id, policy=self.policy, opts=child)

        env = pulumi.Output.all(self.table.name, self.secret.arn, self.queue.url).apply(
            lambda v: {
                "COREBURST_STATE_TABLE": v[0],
                "COREBURST_SLACK_WEBHOOK_SECRET_ARN": v[1],
                "COREBURST_BUDGET_QUEUE_URL": v[2],
                # The daemon's interval is the schedule's: its leader lease lives no longer.
                "COREBURST_CONFIG_JSON": json.dumps(
                    {
                        "interval": f"{schedule_interval_s(args.schedule_expression)}s",
                        **dict(args.daemon_config),
                    }
                ),
            }
        )
        self.function = aws.lambda_.Function(
            f"{name}-daemon",
            name=f"{name}-daemon",
            runtime="python3.11",
            handler="guardrails.lambda_handler.handler",
            code=args.code,
            role=self.role.arn,
            memory_size=args.memory_mb,
            timeout=args.timeout_s,
            # One invocation at a time; the leader lock guards the rest.
            reserved_concurrent_executions=1,
            environment=aws.lambda_.FunctionEnvironmentArgs(variables=env),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.log_group]),
        )

        scheduler_role = aws.iam.Role(
            f"{name}-scheduler-role",
            assume_role_policy=self.function.arn.apply(scheduler_trust_policy),
            opts=child,
        )
        aws.iam.RolePolicy(
            f"{name}-scheduler-invoke",
            role=scheduler_role.id,
            policy=self.function.arn.apply(
                lambda arn: json.dumps(
                    {
                        "Version": "2012-10-17",
                        "Statement": [
                            {"Effect": "Allow", "Action": "lambda:InvokeFunction", "Resource": arn}
                        ],
                    }
                )
            ),
            opts=child,
        )
        self.schedule = aws.scheduler.Schedule(
            f"{name}-cycle",
            schedule_expression=args.schedule_expression,
            flexible_time_window=aws.scheduler.ScheduleFlexibleTimeWindowArgs(mode="OFF"),
            target=aws.scheduler.ScheduleTargetArgs(
                arn=self.function.arn,
                role_arn=scheduler_role.arn,
                retry_policy=aws.scheduler.ScheduleTargetRetryPolicyArgs(maximum_retry_attempts=0),
            ),
            opts=child,
        )
        self.register_outputs(
            {
                "function_name": self.function.name,
                "state_table": self.table.name,
                "webhook_secret_arn": self.secret.arn,
                "budget_queue_url": self.queue.url,
                "spot_queue_url": self.spot_queue.url if self.spot_queue is not None else None,
            }
        )
