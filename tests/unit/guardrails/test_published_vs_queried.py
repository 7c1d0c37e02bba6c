"""The nodes publish exactly what the guardrails read (issue 23, item 4).

Every series a node publishes is a custom metric billed per metric-month, and real CloudWatch
answers a query only for the *exact* namespace, name and dimension set published. So the set
the launch template's telemetry publishes and the set the daemon queries must be the same: a
series published and never read is money spent for nothing; a series read and never published
makes every node blind.

- Published, NVIDIA: the CloudWatch agent config embedded in the user data
  (``infra.userdata.render_user_data``), read with the agent's own rules: the agent's schema and
  its translator's samples, copied unchanged into tests/fixtures/aws/cloudwatch_agent/ from
  github.com/aws/amazon-cloudwatch-agent (see the README there); the AWS doc is "Manually create
  or edit the CloudWatch agent configuration file" (metrics section: ``aggregation_dimensions``,
  ``drop_original_metrics``, ``force_flush_interval``, the ``nvidia_gpu`` section).
- Published, Trainium: the Neuron publisher run as the node runs it (the user data's command
  line), its ``aws cloudwatch put-metric-data`` calls recorded.
- Queried: every GetMetricData query the daemon's idle read sends, captured from botocore
  (moto in-process), and ``explain``'s per-device read.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from moto import mock_aws

from coreburst.common.catalog import load_catalog
from coreburst.common.telemetry import (
    AGENT_FLUSH_INTERVAL_S,
    PUBLISHER_HEARTBEATS,
    ROLLUP_STATS,
    UTILIZATION_METRICS,
    Series,
    agent_config_series,
)
from coreburst.sandbox.emulator import fake_session, launch
from guardrails.adapters.aws import Aws, inventory
from guardrails.configfile import parse_config
from guardrails.rules.idle_reclaim import per_device_stats, utilization
from infra.userdata import neuron_publisher_command, neuron_publisher_source, render_user_data

FIX = Path(__file__).resolve().parents[2] / "fixtures"
AGENT = FIX / "aws" / "cloudwatch_agent"
GPU = UTILIZATION_METRICS["nvidia"]
NEURON = UTILIZATION_METRICS["neuron"]
IDLE = "idle: {window: 10m, max_gap: 2m, period: 1m}\n"


def _shipped_agent_config(per_device: bool = False) -> str:
    script = render_user_data("nvidia", per_device_metrics=per_device)
    head = "cat > /opt/aws/amazon-cloudwatch-agent/etc/coreburst.json <<'JSON'\n"
    return script.split(head, 1)[1].split("\nJSON\n", 1)[0]


def _neuron_published(tmp_path: Path, per_device: bool = False) -> set[Series]:
    """Run the publisher with the user data's own command line on one neuron-monitor report
    (tests/fixtures/neuron, written by us in the Neuron Monitor User Guide's format) and return
    what its put-metric-data calls carried."""
    tmp_path = tmp_path / ("per-device" if per_device else "rollup")
    tmp_path.mkdir()
    rec = tmp_path / "calls.jsonl"
    fake = tmp_path / "aws"
    fake.write_text(
        f"#!{sys.executable}\nimport json, sys\n"
        f"open({str(rec)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n"
    )
    fake.chmod(0o755)
    script = tmp_path / "pub.py"
    script.write_text(neuron_publisher_source())
    cmd = neuron_publisher_command(per_device=per_device)
    assert cmd in render_user_data("neuron", per_device_metrics=per_device)
    report = (FIX / "neuron" / "report_no_application.json").read_text()
    r = subprocess.run(
        [sys.executable, str(script), *cmd.split()[2:]],
        input=json.dumps(json.loads(report)).encode() + b"\n",
        check=False,
        capture_output=True,
        env={**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"},
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    out: set[Series] = set()
    for line in rec.read_text().splitlines():
        call = json.loads(line)
        ns = call[call.index("--namespace") + 1]
        for d in json.loads(call[call.index("--metric-data") + 1]):
            out.add(Series(ns, d["MetricName"], tuple(x["Name"] for x in d["Dimensions"])))
    return out


def _queried(cw: Any) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []
    cw.meta.events.register_first(
        "provide-client-params.cloudwatch.GetMetricData",
        lambda params, **_: seen.extend(params["MetricDataQueries"]),
    )
    return seen


def _key(q: dict[str, Any]) -> Series:
    m = q["MetricStat"]["Metric"]
    return Series(m["Namespace"], m["MetricName"], tuple(d["Name"] for d in m["Dimensions"]))


# -- the shipped agent config, held to the agent's own schema and rules ----------------------
@pytest.mark.parametrize("per_device", [False, True])
def test_agent_config_is_valid_under_the_agents_schema(per_device: bool) -> None:
    schema = json.loads((AGENT / "schema.json").read_text())
    validator = jsonschema.Draft4Validator(schema)
    # the schema does reject what the agent does not know (so a pass means something)
    sample = json.loads((AGENT / "validNvidiaGpuConfig.json").read_text())
    validator.validate(sample)
    assert list(validator.iter_errors({"metrics": {**sample["metrics"], "flush": 60}}))
    cfg = json.loads(_shipped_agent_config(per_device))
    validator.validate(cfg)
    # force_flush_interval belongs to the metrics section (the agent's translator reads it
    # there: translator/translate/metrics/ruleForceFlushInterval.go), not to the agent section
    assert cfg["metrics"]["force_flush_interval"] == AGENT_FLUSH_INTERVAL_S == 300
    assert "force_flush_interval" not in cfg["agent"]


def test_series_reader_agrees_with_the_agents_translation_of_drop_original_metrics() -> None:
    """The agent's own sample config drops utilization_gpu and temperature_gpu under
    nvidia_gpu, and its translated exporter config names them nvidia_smi_<measurement>."""
    sample = json.loads((AGENT / "drop_origin_linux.json").read_text())
    translated = yaml.safe_load((AGENT / "drop_origin_linux.yaml").read_text())
    agent_drops = {
        k
        for k in translated["exporters"]["awscloudwatch"]["drop_original_metrics"]
        if k.startswith("nvidia_smi_")
    }
    # The sample sets no force_flush_interval: 1m0s is the translator's default (60 s,
    # ruleForceFlushInterval.go's DefaultTimeIntervalCase), so the config we ship must set the
    # key itself for its 300 s flush (test_agent_config_is_valid_under_the_agents_schema).
    assert "force_flush_interval" not in sample["metrics"]
    assert translated["exporters"]["awscloudwatch"]["force_flush_interval"] == "1m0s"
    sample["metrics"]["aggregation_dimensions"] = [["InstanceId"]]
    ours = agent_config_series(json.dumps(sample))
    originals = {s.metric_name for s in ours if s.dimension_names != ("InstanceId",)}
    measured = {s.metric_name for s in ours}
    assert measured - originals == agent_drops  # dropped: only the rollup is published


def test_default_config_publishes_one_series_per_node() -> None:
    """Only the rollup of GPU utilization (was 4 measurements x (8 GPUs + rollup) = 36)."""
    assert agent_config_series(_shipped_agent_config()) == [
        Series(GPU.namespace, GPU.metric_name, GPU.rollup_dimension_names)
    ]
    assert agent_config_series(_shipped_agent_config(per_device=True)) == [
        Series(GPU.namespace, GPU.metric_name, GPU.rollup_dimension_names),
        Series(GPU.namespace, GPU.metric_name, GPU.dimension_names),
    ]


# -- published == queried --------------------------------------------------------------------
def test_published_set_equals_the_queried_set(tmp_path: Path) -> None:
    """Fails when the nodes publish a series the daemon never reads, or the daemon reads one
    nobody publishes (name, namespace, dimension names), or reads other statistics than the
    rollup's. AWS-published series (AWS/EC2 NetworkOut for egress) are not ours to publish."""
    published = set(agent_config_series(_shipped_agent_config())) | _neuron_published(tmp_path)
    with mock_aws():
        aws = Aws(parse_config("").aws, session=fake_session())
        ec2, cw = aws.client("ec2", "us-east-1"), aws.client("cloudwatch", "us-east-1")
        launch(ec2, "p5.48xlarge", {})
        launch(ec2, "trn2.48xlarge", {})
        nodes = inventory(ec2, "us-east-1", ["p5.48xlarge", "trn2.48xlarge"], load_catalog())
        now = max(n.launch_time for n in nodes) + timedelta(hours=1)
        sent = _queried(cw)
        # heartbeats="all": the heartbeat too, which a healthy fleet reads only when blind
        utilization(aws, parse_config(IDLE), nodes, now, heartbeats="all")
    queried = {_key(q) for q in sent if not _key(q).namespace.startswith("AWS/")}
    assert queried == published
    rollups = [q for q in sent if _key(q).metric_name in (GPU.metric_name, NEURON.metric_name)]
    assert {q["MetricStat"]["Stat"] for q in rollups} == set(ROLLUP_STATS)
    beat = PUBLISHER_HEARTBEATS["neuron"]
    assert Series(beat.namespace, beat.metric_name, beat.dimension_names) in published


def test_per_device_series_are_what_explain_reads(tmp_path: Path) -> None:
    """With ``perDeviceMetrics`` the per-device series are published under the dimension set
    explain reads; without, explain says there are none (and the decision is unchanged)."""
    opt_in = set(agent_config_series(_shipped_agent_config(per_device=True)))
    assert opt_in - set(agent_config_series(_shipped_agent_config())) == {
        Series(GPU.namespace, GPU.metric_name, GPU.dimension_names)
    }
    trn = _neuron_published(tmp_path, per_device=True) - _neuron_published(tmp_path)
    assert trn == {Series(NEURON.namespace, NEURON.metric_name, NEURON.dimension_names)}
    with mock_aws():
        aws = Aws(parse_config("").aws, session=fake_session())
        ec2, cw = aws.client("ec2", "us-east-1"), aws.client("cloudwatch", "us-east-1")
        iid = launch(ec2, "p5.48xlarge", {})[0]
        node = inventory(ec2, "us-east-1", ["p5.48xlarge"], load_catalog())[0]
        now = node.launch_time.replace(second=0, microsecond=0) + timedelta(hours=1)
        cfg = parse_config(IDLE)
        assert "no series found" in per_device_stats(aws, cfg, node, now)[0].device
        # what the agent sends with the per-GPU set: each GPU's value under [InstanceId, index]
        for m in range(12):
            cw.put_metric_data(
                Namespace=GPU.namespace,
                MetricData=[
                    {
                        "MetricName": GPU.metric_name,
                        "Dimensions": [
                            {"Name": "InstanceId", "Value": iid},
                            {"Name": GPU.device_dimension, "Value": str(g)},
                        ],
                        "Timestamp": now - timedelta(minutes=m),
                        "Value": 1.0,
                    }
                    for g in range(8)
                ],
            )
        rows = per_device_stats(aws, cfg, node, now)
    assert sorted(r.device for r in rows) == [str(g) for g in range(8)]
