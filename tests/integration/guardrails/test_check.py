"""``coreburst guardrails check`` with the daemon's config against moto server on 127.0.0.1:
the idle rule's metric published or not (and whether a node runs that could publish it), and
the spot-interruption queue with its EventBridge rules (made as
infra/components/guardrails.py declares them: tests/helpers/burst_check.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from coreburst.sandbox.emulator import MotoProcess, launch
from guardrails.cli import app
from tests.helpers.burst_check import SPOT_EVENTS, client
from tests.helpers.guardrails_loopback import config_text

runner = CliRunner()


@pytest.fixture(autouse=True)
def credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")


# Watch H100 nodes only, one region: one idle-metric line.
WATCH = "instance_types: [p5.48xlarge]\n"


def check(tmp: Path, url: str, extra: str = "", *args: str) -> Any:
    path = tmp / "guardrails.yaml"
    text = config_text(url, tmp, WATCH + extra).replace(
        "regions: [us-east-1, us-east-2]", "regions: [us-east-1]"
    )
    path.write_text(text)
    return runner.invoke(app, ["check", "--config", str(path), *args])


def publish_utilization(url: str, instance_id: str) -> None:
    client("cloudwatch", url).put_metric_data(
        Namespace="CWAgent",
        MetricData=[
            {
                "MetricName": "nvidia_smi_utilization_gpu",
                "Dimensions": [
                    {"Name": "InstanceId", "Value": instance_id},
                    {"Name": "index", "Value": "0"},
                ],
                "Value": 97.0,
            }
        ],
    )


def test_no_node_to_publish_is_unknown_not_a_pass(moto: MotoProcess, tmp_path: Path) -> None:
    r = check(tmp_path, moto.url)
    assert r.exit_code == 0, r.output
    assert (
        "? idle-metric     CWAgent nvidia_smi_utilization_gpu in us-east-1: nothing published "
        "in the past 3 h, and no nvidia node runs to publish it"
    ) in r.output
    assert check(tmp_path, moto.url, "", "--strict").exit_code == 1


def test_a_running_node_that_publishes_nothing_fails(moto: MotoProcess, tmp_path: Path) -> None:
    [iid] = launch(client("ec2", moto.url), "p5.48xlarge", {"owner": "alice"})
    r = check(tmp_path, moto.url)
    assert r.exit_code == 1
    [line] = [x for x in r.output.splitlines() if x.startswith("✘")]
    assert line.startswith(
        f"✘ idle-metric     CWAgent nvidia_smi_utilization_gpu in us-east-1: 1 nvidia node(s) "
        f"run ({iid}) and none published it in the past 3 h"
    )
    assert "fix: the nodes' publisher must run" in line
    publish_utilization(moto.url, iid)
    r = check(tmp_path, moto.url)
    assert r.exit_code == 0, r.output
    assert (
        "✔ idle-metric     CWAgent nvidia_smi_utilization_gpu in us-east-1: published by 1 "
        "instance(s) in the past 3 h (cloudwatch:ListMetrics)"
    ) in r.output


def test_the_spot_queue_and_its_rules(moto: MotoProcess, tmp_path: Path) -> None:
    sqs = client("sqs", moto.url)
    url = sqs.create_queue(QueueName="guardrails-spot-events-4f2a9c1")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    events = client("events", moto.url)
    for kind, detail in SPOT_EVENTS.items():
        pattern = json.dumps({"source": ["aws.ec2"], "detail-type": [detail]})
        events.put_rule(Name=f"guardrails-spot-{kind}-7c1e0b2", EventPattern=pattern)
        events.put_targets(
            Rule=f"guardrails-spot-{kind}-7c1e0b2", Targets=[{"Id": "q", "Arn": arn}]
        )
    extra = "burst_reconcile: {stack: prod}\n"
    extra += f"spot_interruption: {{enabled: true, queue_url: '{url}'}}\n"
    r = check(tmp_path, moto.url, extra, "--format", "json")
    spot = [c for c in json.loads(r.output)["checks"] if c["check"] == "spot-events"]
    assert [(c["mark"], c["subject"]) for c in spot] == [
        ("✔", "rule for 'EC2 Spot Instance Interruption Warning'"),
        ("✔", "rule for 'EC2 Instance Rebalance Recommendation'"),
        ("✔", "queue guardrails-spot-events-4f2a9c1"),
    ]
    events.disable_rule(Name="guardrails-spot-interruption-7c1e0b2")
    r = check(tmp_path, moto.url, extra)
    assert r.exit_code == 1
    assert (
        "✘ spot-events     rule for 'EC2 Spot Instance Interruption Warning': "
        "guardrails-spot-interruption-7c1e0b2 is DISABLED (events:ListRules); fix: aws events "
        "enable-rule --name guardrails-spot-interruption-7c1e0b2"
    ) in r.output


def test_a_bad_format_is_one_line_and_exit_2(moto: MotoProcess, tmp_path: Path) -> None:
    r = check(tmp_path, moto.url, "", "--format", "yaml")
    assert r.exit_code == 2 and r.output.strip() == "error: --format 'yaml': use text or json"
