"""Budget: an AWS Budgets cost budget for the stack, alerting through SNS."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from infra.components import TOKEN_PREFIX
from infra.config import Budget as BudgetConfig


@dataclass
class BudgetArgs:
    config: BudgetConfig
    stack_tag_key: str
    stack_tag_value: str


class Budget(pulumi.ComponentResource):
    """Monthly cost budget filtered on the stack's tag, notifying an SNS topic at each threshold.

    AWS Budgets data lags 8-24 h; the guardrail daemon drains the same topic and adds the live
    burn rate, so this is the lagging backstop, not the first alarm.
    """

    def __init__(
        self, name: str, args: BudgetArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(f"{TOKEN_PREFIX}:Budget", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        cfg = args.config
        self.topic = aws.sns.Topic(f"{name}-alerts", kms_master_key_id="alias/aws/sns", opts=child)
        aws.sns.TopicPolicy(
            f"{name}-alerts-policy",
            arn=self.topic.arn,
            policy=self.topic.arn.apply(
                lambda arn: json.dumps(
                    {
                        "Version": "2012-10-17",
                        "Statement": [
                            {
                                "Sid": "AwsBudgetsPublish",
                                "Effect": "Allow",
                                "Principal": {"Service": "budgets.amazonaws.com"},
                                "Action": "SNS:Publish",
                                "Resource": arn,
                                # Confused deputy: only budgets of this account may publish
                                # (AWS Budgets user guide, "Creating an Amazon SNS topic for
                                # budget notifications").
                                "Condition": {
                                    "StringEquals": {"aws:SourceAccount": arn.split(":")[4]},
                                    "ArnLike": {
                                        "aws:SourceArn": f"arn:aws:budgets::{arn.split(':')[4]}:*"
                                    },
                                },
                            }
                        ],
                    }
                )
            ),
            opts=child,
        )
        notifications = [
            aws.budgets.BudgetNotificationArgs(
                comparison_operator="GREATER_THAN",
                threshold=pct,
                threshold_type="PERCENTAGE",
                notification_type="ACTUAL",
                subscriber_sns_topic_arns=[self.topic.arn],
                subscriber_email_addresses=cfg.notify_emails or None,
            )
            for pct in cfg.thresholds_percent
        ]
        # A forecast warning at 100% gives a day or two of notice before the actual crossing.
        notifications.append(
            aws.budgets.BudgetNotificationArgs(
                comparison_operator="GREATER_THAN",
                threshold=100,
                threshold_type="PERCENTAGE",
                notification_type="FORECASTED",
                subscriber_sns_topic_arns=[self.topic.arn],
            )
        )
        self.budget = aws.budgets.Budget(
            f"{name}-monthly",
            budget_type="COST",
            limit_amount=f"{cfg.monthly_usd:.2f}",
            limit_unit="USD",
            time_unit="MONTHLY",
            cost_filters=[
                {
                    "name": "TagKeyValue",
                    "values": [f"user:{args.stack_tag_key}${args.stack_tag_value}"],
                }
            ],
            notifications=notifications,
            opts=child,
        )
        self.register_outputs({"budget_name": self.budget.name, "topic_arn": self.topic.arn})
