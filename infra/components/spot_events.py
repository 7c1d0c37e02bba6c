"""SpotEvents: the SQS queue EC2's spot interruption warnings and rebalance recommendations
reach through EventBridge, for the guardrails daemon's spot-interruption rule
(coreburst/burst/spot_interruption.py).

A burst stack declares it whether or not it deploys the guardrails Lambda: the rule needs
``scontrol`` and ``scancel``, so it runs in a daemon on the Slurm controller on-prem, which
reads the queue at ``pulumi stack output guardrailsSpotQueueUrl`` (its
``spot_interruption.queue_url``) with the IAM policy in .github/iam/onprem-guardrails.json.
"""

from __future__ import annotations

import json

import pulumi
import pulumi_aws as aws

from infra.components import TOKEN_PREFIX

# The two EC2 events the spot-interruption rule reads: source and detail-type as the Amazon
# EC2 User Guide gives them ("Spot Instance interruption notices", "EC2 instance rebalance
# recommendations"); one EventBridge rule each, both into one queue.
SPOT_EVENTS = {
    "interruption": "EC2 Spot Instance Interruption Warning",
    "rebalance": "EC2 Instance Rebalance Recommendation",
}
# Where these resources lived before this component: children of the Guardrails component
# "guardrails", with the names they still have (the component is named "guardrails-spot"), so
# an alias keeps a deployed queue instead of replacing it, and the names stay inside what the
# deploy role may manage (infra/deploy_iam.py: guardrails-spot-*).
_OLD_PARENT = ("guardrails", f"{TOKEN_PREFIX}:Guardrails")


class SpotEvents(pulumi.ComponentResource):
    """The queue and its two EventBridge rules. The queue policy lets EventBridge send only
    for those rules (Amazon EventBridge User Guide, "Using resource-based policies for Amazon
    EventBridge": Amazon SQS permissions, with aws:SourceArn against the confused deputy). A
    warning is worth nothing after two minutes: messages are kept an hour.

        >>> # events = SpotEvents("guardrails-spot", opts=opts); events.queue.url
    """

    def __init__(self, name: str, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(f"{TOKEN_PREFIX}:SpotEvents", name, None, opts)
        old_parent = pulumi.create_urn(*_OLD_PARENT)

        child = pulumi.ResourceOptions(parent=self, aliases=[pulumi.Alias(parent=old_parent)])

        self.queue = aws.sqs.Queue(
            f"{name}-events",
            message_retention_seconds=3600,
            sqs_managed_sse_enabled=True,
            opts=child,
        )
        self.rules = [
            aws.cloudwatch.EventRule(
                f"{name}-{kind}",
                description=f"{detail} -> coreburst guardrails (spot-interruption)",
                event_pattern=json.dumps({"source": ["aws.ec2"], "detail-type": [detail]}),
                opts=child,
            )
            for kind, detail in SPOT_EVENTS.items()
        ]
        aws.sqs.QueuePolicy(
            f"{name}-events-policy",
            queue_url=self.queue.url,
            policy=pulumi.Output.all(self.queue.arn, *[r.arn for r in self.rules]).apply(
                lambda v: json.dumps(
                    {
                        "Version": "2012-10-17",
                        "Statement": [
                            {
                                "Effect": "Allow",
                                "Principal": {"Service": "events.amazonaws.com"},
                                "Action": "sqs:SendMessage",
                                "Resource": v[0],
                                "Condition": {"ArnEquals": {"aws:SourceArn": list(v[1:])}},
                            }
                        ],
                    }
                )
            ),
            opts=child,
        )
        for kind, rule in zip(SPOT_EVENTS, self.rules, strict=True):
            aws.cloudwatch.EventTarget(
                f"{name}-{kind}-to-queue",
                rule=rule.name,
                arn=self.queue.arn,
                opts=child,
            )
        self.register_outputs({"queue_url": self.queue.url, "queue_arn": self.queue.arn})
