"""Trainium idle that works on real hosts (issue 14, item 2).

neuron-monitor only reports the NeuronCores a running Neuron application holds (AWS Neuron docs,
"Neuron Monitor User Guide": ``neuroncores_in_use`` lists the cores in use by each runtime in
``neuron_runtime_data``, which is empty with no application running). The node-side publisher
(coreburst/common/neuron_report.py, copied onto the node by infra/userdata.py) therefore publishes
every
logical NeuronCore (0 % where no application holds one) and a heartbeat, so "no job" reads as
idle and "publisher dead" as blind.

The reports are tests/fixtures/neuron/*.json, written by us in the user guide's documented
format (each says so). The daemon side runs on moto in-process through the idle-reclaim rule's
own ListMetrics/GetMetricData path; the NeuronCore count (64 at trn2's default LNC=2) is the
catalog's (see test_coverage.py).
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import botocore.session
import pytest
from botocore.validate import validate_parameters
from moto import mock_aws

import coreburst.common.neuron_report as nr
from coreburst.common.catalog import load_catalog
from coreburst.common.telemetry import PUBLISHER_HEARTBEATS, UTILIZATION_METRICS
from coreburst.sandbox.emulator import fake_session, launch
from guardrails.adapters.aws import Aws, inventory
from guardrails.configfile import parse_config
from guardrails.idle import decide
from guardrails.rules.idle_reclaim import idle_params, utilization
from infra.userdata import (
    NEURON_PUBLISHER_PATH,
    neuron_publisher_command,
    neuron_publisher_source,
    render_user_data,
)

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "neuron"
NEURON = UTILIZATION_METRICS["neuron"]
BEAT = PUBLISHER_HEARTBEATS["neuron"]
IDLE = "idle: {window: 10m, max_gap: 2m, period: 1m}\n"


def _report(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIX / name).read_text())
    assert "Neuron Monitor User Guide" in data["_coreburst_fixture"]
    return data


def _points(report: dict[str, Any], iid: str, lnc: int = 2) -> list[dict[str, Any]]:
    return nr.datapoints(
        report,
        instance_id=iid,
        lnc=lnc,
        metric=NEURON.metric_name,
        device_dimension=NEURON.device_dimension,
        heartbeat_metric=BEAT.metric_name,
    )


# -- the pure function on the user guide's report format ------------------------------------
def test_no_application_report_publishes_every_core_at_zero_and_a_heartbeat() -> None:
    report = _report("report_no_application.json")
    assert report["neuron_runtime_data"] == []
    pts = _points(report, "i-1")
    util = [p for p in pts if p["MetricName"] == NEURON.metric_name and "Value" in p]
    beats = [p for p in pts if p["MetricName"] == BEAT.metric_name]
    assert (
        len(util) == 64 == load_catalog().instance("trn2.48xlarge").accelerator.utilization_series()
    )
    assert {p["Value"] for p in util} == {0.0}
    assert [d["Value"] for p in util for d in p["Dimensions"] if d["Name"] == "neuroncore"] == [
        str(i) for i in range(64)
    ]
    for p in util:
        assert [d["Name"] for d in p["Dimensions"]] == list(NEURON.dimension_names)
        assert p["Unit"] == "Percent"
    assert beats == [
        {
            "MetricName": BEAT.metric_name,
            "Unit": "Count",
            "Value": 1.0,
            "Dimensions": [{"Name": "InstanceId", "Value": "i-1"}],
        }
    ]


def test_one_application_holding_eight_cores_reports_them_and_zero_elsewhere() -> None:
    report = _report("report_one_app_8_cores.json")
    held = report["neuron_runtime_data"][0]["report"]["neuroncore_counters"]["neuroncores_in_use"]
    util = nr.core_utilization(report, lnc=2)
    assert len(util) == 64
    for core, c in held.items():
        assert util[core] == c["neuroncore_utilization"]
    assert all(util[str(i)] == 0.0 for i in range(8, 64))
    assert max(util.values()) == 97.25


def test_core_count_is_devices_times_cores_per_device_over_the_lnc() -> None:
    report = _report("report_no_application.json")
    hw = report["neuron_hardware_info"]
    assert (hw["neuron_device_count"], hw["neuroncore_per_device_count"]) == (16, 8)
    assert nr.logical_core_count(report, 2) == 64
    assert nr.logical_core_count(report, 1) == 128
    assert len(_points(report, "i-1", lnc=1)) == 128 + 2  # cores, rollup, heartbeat


def test_lnc_resolution(monkeypatch: pytest.MonkeyPatch) -> None:
    report = _report("report_no_application.json")
    monkeypatch.delenv("NEURON_LOGICAL_NC_CONFIG", raising=False)
    assert nr.resolve_lnc(report) == 2  # NeuronCore-v3 (Trainium2): runtime default LNC=2
    monkeypatch.setenv("NEURON_LOGICAL_NC_CONFIG", "1")
    assert nr.resolve_lnc(report) == 1
    assert nr.resolve_lnc(report, 2) == 2  # the launch template's setting wins


def test_the_publisher_script_runs_and_calls_put_metric_data(tmp_path: Path) -> None:
    """The module as a script (as the node runs it): neuron-monitor lines on stdin, the AWS
    CLI called with the documented ``put-metric-data --namespace --metric-data`` arguments. The
    ``aws`` on PATH here records its arguments."""
    rec = tmp_path / "calls.jsonl"
    fake = tmp_path / "aws"
    fake.write_text(
        f"#!{sys.executable}\nimport json, sys\n"
        f"open({str(rec)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n"
    )
    fake.chmod(0o755)
    lines = "\n".join(
        json.dumps(_report(n))
        for n in ("report_no_application.json", "report_one_app_8_cores.json")
    )
    script = tmp_path / "coreburst-neuron-publisher.py"
    script.write_text(neuron_publisher_source())
    cmd = neuron_publisher_command(2, per_device=True).split()[2:]  # each core's series too
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"}
    r = subprocess.run(
        [sys.executable, str(script), *cmd],
        input=(lines + "\nnot json\n").encode() + b"\xff\xfe not utf-8\n",
        check=False,
        capture_output=True,
        env=env,
        timeout=60,
    )
    err = r.stderr.decode()
    assert r.returncode == 0, err
    assert "not JSON" in err and "not UTF-8" in err
    calls = [json.loads(x) for x in rec.read_text().splitlines()]
    assert len(calls) == 2  # one per report: utilization and heartbeat share the namespace
    for call in calls:
        assert call[:4] == ["cloudwatch", "put-metric-data", "--namespace", NEURON.namespace]
        assert call[4] == "--metric-data"
    second = json.loads(calls[1][5])
    assert len(second) == 66  # 64 cores, the per-instance rollup, the heartbeat
    assert second[1]["Value"] == 97.25 and second[-1]["MetricName"] == BEAT.metric_name
    assert second[-2]["StatisticValues"]["Maximum"] == 97.25
    assert second[-2]["Dimensions"] == [{"Name": "InstanceId", "Value": "i-0123456789abcdef0"}]
    assert second[0]["Dimensions"][0] == {"Name": "InstanceId", "Value": "i-0123456789abcdef0"}


# -- the user data installs exactly the tested module ---------------------------------------
def test_user_data_embeds_the_tested_publisher_module() -> None:
    script = render_user_data("neuron")
    src = Path(nr.__file__).read_text()
    body = script.split(f"cat > {NEURON_PUBLISHER_PATH} <<'PY'\n", 1)[1].split("\nPY\n", 1)[0]
    assert body == src.rstrip()
    assert neuron_publisher_command() in script
    assert f"--heartbeat-metric {BEAT.metric_name}" in script
    assert "neuroncores_in_use" not in script.split("PY\n", 2)[-1]  # no second relay
    assert "--lnc 1" in render_user_data("neuron", neuron_lnc=1)
    # the node's python3 runs it without coreburst installed: stdlib imports only
    tops = set()
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.Import):
            tops |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            tops.add((node.module or "").split(".")[0])
    assert tops and tops <= set(sys.stdlib_module_names) | {"__future__"}, tops


# -- the daemon: "no job" is idle, "publisher dead" is blind --------------------------------
def _put(cw: Any, points: list[dict[str, Any]], at: datetime) -> None:
    data = [{**p, "Timestamp": at} for p in points]
    for i in range(0, len(data), 1000):
        cw.put_metric_data(Namespace=NEURON.namespace, MetricData=data[i : i + 1000])


def _decide(heartbeat_until: timedelta | None, report_name: str) -> Any:
    """One trn2 whose publisher sends ``report_name`` each minute for 12 minutes up to now and
    stops ``heartbeat_until`` before now (None: it never ran). The publisher sends the cores,
    their rollup and the heartbeat in one call, so when it stops all of them stop."""
    with mock_aws():
        aws = Aws(parse_config("").aws, session=fake_session())
        ec2, cw = aws.client("ec2", "us-east-1"), aws.client("cloudwatch", "us-east-1")
        iid = launch(ec2, "trn2.48xlarge", {})[0]
        cfg = parse_config(IDLE, "g.yaml")
        nodes = inventory(ec2, "us-east-1", ["trn2.48xlarge"], load_catalog())
        now = nodes[0].launch_time.replace(microsecond=0) + timedelta(hours=1)
        pts = _points(_report(report_name), iid)
        util, beat = pts[:-1], pts[-1:]
        for m in range(12, -1, -1):
            at = now - timedelta(minutes=m)
            alive = heartbeat_until is not None and at <= now - heartbeat_until
            if alive:
                _put(cw, util + beat, at)
        utils = utilization(aws, cfg, nodes, now)
        return decide(nodes[0], utils[iid], None, now, idle_params(cfg))


def test_no_application_running_reads_as_idle() -> None:
    d = _decide(timedelta(0), "report_no_application.json")
    assert d.state == "idle" and d.step == "mark", d.reason
    assert "all 64 devices" in d.reason


def test_an_application_on_eight_cores_reads_as_busy() -> None:
    d = _decide(timedelta(0), "report_one_app_8_cores.json")
    assert d.state == "busy" and "97.2" in d.reason


@pytest.mark.parametrize("stopped", [None, timedelta(minutes=8)])
def test_a_dead_publisher_reads_as_blind_never_idle(stopped: timedelta | None) -> None:
    """The publisher never ran, or stopped 8 min ago (max gap 2 min + publish delay 5 min):
    the rollup has a hole, so the node is blind, never reclaimed; the heartbeat, read because
    the rollup is blind, says why ("publisher dead" rather than a bare gap)."""
    d = _decide(stopped, "report_no_application.json")
    assert d.state == "unknown" and d.step == "none", d.reason
    assert "publisher dead" in d.reason
    if stopped is not None:
        # the beat's 1-minute period is stamped at its start (the read is minute-aligned), so
        # the age is an upper bound: 480 s plus the seconds into that minute
        age = int(d.reason.split("last heartbeat ", 1)[1].split("s ago", 1)[0])
        assert 480 <= age < 540, d.reason
        assert "publish delay 300s" in d.reason


def test_a_publisher_whose_last_flush_is_still_on_its_way_is_not_dead() -> None:
    """Nothing for the last 5 min (one flush of --flush-interval 300 not arrived yet): within
    max gap + publish delay, so the node is decided from what arrived (idle), not blind."""
    d = _decide(timedelta(minutes=5), "report_no_application.json")
    assert d.state == "idle", d.reason


def test_the_publisher_buffers_its_collections_and_sends_once_per_flush(tmp_path: Path) -> None:
    """``--flush-interval``: the first collection goes out at once, later ones wait for the
    flush (here: neuron-monitor ends first) and go out in one request, each datapoint with the
    timestamp of its own collection (ISO 8601, which put-metric-data's JSON takes)."""
    rec = tmp_path / "calls.jsonl"
    fake = tmp_path / "aws"
    fake.write_text(
        f"#!{sys.executable}\nimport json, sys\n"
        f"open({str(rec)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n"
    )
    fake.chmod(0o755)
    names = ["report_no_application.json", "report_one_app_8_cores.json"] * 2
    lines = "\n".join(json.dumps(_report(n)) for n in names) + "\n"
    script = tmp_path / "pub.py"
    script.write_text(neuron_publisher_source())
    cmd = neuron_publisher_command(2).split()[2:]
    assert cmd[cmd.index("--flush-interval") + 1] == "300"
    cmd[cmd.index("--interval") + 1] = "0"  # collect every report (the test has no minutes)
    r = subprocess.run(
        [sys.executable, str(script), *cmd],
        input=lines.encode(),
        check=False,
        capture_output=True,
        env={**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"},
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    calls = [json.loads(x) for x in rec.read_text().splitlines()]
    assert len(calls) == 2  # 4 collections: the first at once, the other 3 in one flush
    first, rest = (json.loads(c[5]) for c in calls)
    assert [p["MetricName"] for p in first] == [NEURON.metric_name, BEAT.metric_name]
    assert [p["MetricName"] for p in rest] == [NEURON.metric_name, BEAT.metric_name] * 3
    assert [p["StatisticValues"]["Maximum"] for p in rest[::2]] == [97.25, 0.0, 97.25]
    for p in first + rest:
        assert datetime.strptime(p["Timestamp"], "%Y-%m-%dT%H:%M:%SZ")
    # each request as botocore's service model for PutMetricData takes it (what the AWS CLI
    # validates its --metric-data JSON against; a Timestamp it cannot parse is refused)
    model = botocore.session.get_session().get_service_model("cloudwatch")
    shape = model.operation_model("PutMetricData").input_shape
    for c in calls:
        ns = c[c.index("--namespace") + 1]
        validate_parameters({"Namespace": ns, "MetricData": json.loads(c[5])}, shape)


def test_a_metric_someone_else_publishes_needs_no_heartbeat() -> None:
    from guardrails.adapters.cloudwatch import heartbeat_refs
    from guardrails.idle_config import MetricConfig

    nodes = [object()]
    other = MetricConfig(namespace="Mine", metric_name="nc", device_dimension="core")
    assert heartbeat_refs("neuron", other, nodes) == []  # type: ignore[arg-type]
    assert heartbeat_refs("nvidia", parse_config("").idle.metrics["nvidia"], nodes) == []  # type: ignore[arg-type]
