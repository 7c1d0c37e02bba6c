"""The spot interruption queue and its EventBridge rules come with every burst stack, whether
or not it deploys the guardrails Lambda (issue 32 item 4): the spot-interruption rule needs
scontrol, so it usually runs in the daemon on-prem, reading the queue the stack outputs. The
program is evaluated under Pulumi mocks (infra/offline.py); the events' source and detail-type
are the Amazon EC2 User Guide's ("Spot Instance interruption notices",
https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/spot-instance-termination-notices.html;
"EC2 instance rebalance recommendations",
https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/rebalance-recommendations.html)."""

from __future__ import annotations

import copy
import json
from typing import Any

from infra.offline import evaluate_config, load_stack_yaml


def test_a_burst_stack_without_the_lambda_has_the_queue_and_both_rules() -> None:
    config = copy.deepcopy(load_stack_yaml("burst"))
    ev = evaluate_config("burst", config)
    assert not ev.config.guardrails.enabled
    assert not [r for r in ev.resources if r.name == "guardrails-daemon"]
    url = ev.outputs["guardrailsSpotQueueUrl"]
    assert url == "https://sqs.us-east-1.amazonaws.com/123456789012/guardrails-spot-events"
    queue = ev.named("guardrails-spot-events")
    assert queue.inputs["messageRetentionSeconds"] == 3600
    details = {}
    for kind in ("interruption", "rebalance"):
        pattern = json.loads(ev.named(f"guardrails-spot-{kind}").inputs["eventPattern"])
        assert pattern["source"] == ["aws.ec2"]
        details[kind] = pattern["detail-type"]
        target = ev.named(f"guardrails-spot-{kind}-to-queue").inputs
        assert target["arn"].endswith(":guardrails-spot-events")
    assert details == {
        "interruption": ["EC2 Spot Instance Interruption Warning"],
        "rebalance": ["EC2 Instance Rebalance Recommendation"],
    }
    (send,) = json.loads(ev.named("guardrails-spot-events-policy").inputs["policy"])["Statement"]
    assert send["Principal"] == {"Service": "events.amazonaws.com"}
    assert len(send["Condition"]["ArnEquals"]["aws:SourceArn"]) == 2


def test_a_stack_without_burst_or_the_spot_rule_has_no_queue(dev_config: dict[str, Any]) -> None:
    ev = evaluate_config("dev", dev_config)
    assert ev.config.burst is None and not ev.config.guardrails.enabled
    assert not [r for r in ev.resources if r.name.startswith("guardrails-spot")]
    assert "guardrailsSpotQueueUrl" not in ev.outputs
