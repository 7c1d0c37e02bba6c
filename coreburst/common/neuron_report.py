"""neuron-monitor report -> CloudWatch datapoints (the Neuron node-side publisher).

This file is copied verbatim onto Trainium nodes by the launch template's user data
(``infra.userdata``) and run there as ``python3 coreburst-neuron-publisher.py`` with
neuron-monitor's output on stdin, so it imports the Python standard library only and nothing
from coreburst; the names it publishes under are passed on its command line from
``coreburst.common.telemetry`` (the daemon queries the same).

neuron-monitor (AWS Neuron docs, "Neuron Monitor User Guide") prints one JSON report per
period. ``neuron_runtime_data`` holds one entry per running Neuron application, whose
``report.neuroncore_counters.neuroncores_in_use`` maps each NeuronCore the application holds
to its ``neuroncore_utilization``; ``neuron_hardware_info`` gives ``neuron_device_count`` and
``neuroncore_per_device_count``. A core no application holds appears nowhere, and with no
application running ``neuron_runtime_data`` is empty. So each period this publishes one
value for *every* logical NeuronCore of the node (0 % where no application holds it) plus a
heartbeat (value 1): an idle node reads as idle, and a node whose publisher or neuron-monitor
died stops its heartbeat and reads as blind.

The core values go out as the per-instance rollup the guardrails decide from: one statistic
set (PutMetricData ``StatisticValues``: SampleCount, Sum, Minimum, Maximum;
CloudWatch API Reference, "StatisticSet") over every core's value, under the instance id
alone. CloudWatch aggregates it with any other value of that dimension set in the period, so
the daemon reads Maximum (busiest core), Minimum (idlest) and SampleCount (cores that reported)
with one metric per instance instead of one per core. Each core's own series (InstanceId +
``--device-dimension``), 64 more custom metrics per trn2 billed per metric-month, is published
only with ``--per-device`` (the stack's ``perDeviceMetrics``, for ``coreburst guardrails
explain``'s per-core rows). With ``--interval`` the publisher keeps
each core's highest value across neuron-monitor's reports and collects them once per interval (a
busy moment between two collections is never lost). With ``--flush-interval`` it sends what it
collected once per that many seconds, each collection with its own timestamp (PutMetricData
takes past timestamps), as the CloudWatch agent's ``force_flush_interval`` does: one request per
flush instead of one per collection; the guardrails allow for the delay (``idle.publish_delay``).
The first collection goes out at once, and what is left when neuron-monitor ends goes out then.

    >>> r = {"neuron_runtime_data": [], "neuron_hardware_info":
    ...      {"neuron_device_count": 16, "neuroncore_per_device_count": 8}}
    >>> core_utilization(r, lnc=2) == {str(i): 0.0 for i in range(64)}
    True
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import urllib.request
from typing import Any

# PutMetricData: at most 1,000 metrics per request (CloudWatch API Reference, PutMetricData).
MAX_METRICS_PER_PUT = 1000
IMDS = "http://169.254.169.254/latest"


def resolve_lnc(report: dict[str, Any], configured: int | None = None) -> int:
    """The logical NeuronCore size the node runs at: ``configured`` (the launch template's),
    else ``NEURON_LOGICAL_NC_CONFIG`` in this process's environment, else the report's
    ``neuron_hardware_info.logical_neuroncore_config`` where neuron-monitor gives it, else the
    runtime's default: 2 on NeuronCore-v3 (Trainium2), 1 otherwise."""
    if configured:
        return int(configured)
    env = os.environ.get("NEURON_LOGICAL_NC_CONFIG", "").strip()
    if env.isdigit() and int(env) > 0:
        return int(env)
    hw = report.get("neuron_hardware_info") or {}
    given = hw.get("logical_neuroncore_config")
    if isinstance(given, int) and given > 0:
        return given
    return 2 if str(hw.get("neuroncore_version", "")).lower() == "v3" else 1


def logical_core_count(report: dict[str, Any], lnc: int) -> int:
    """Logical NeuronCores of the node: devices x physical cores per device / LNC."""
    hw = report.get("neuron_hardware_info") or {}
    devices = int(hw.get("neuron_device_count") or 0)
    per_device = int(hw.get("neuroncore_per_device_count") or 0)
    return devices * per_device // max(1, lnc)


def core_utilization(report: dict[str, Any], lnc: int) -> dict[str, float]:
    """Utilization (percent) of every logical NeuronCore: the report's value where a running
    Neuron application holds the core, 0.0 where none does. A core some application reports
    beyond the hardware count is kept (never dropped); an application entry with an error and
    no counters contributes nothing."""
    out = {str(i): 0.0 for i in range(logical_core_count(report, lnc))}
    for rt in report.get("neuron_runtime_data") or []:
        counters = ((rt.get("report") or {}).get("neuroncore_counters")) or {}
        for core, c in (counters.get("neuroncores_in_use") or {}).items():
            value = float((c or {}).get("neuroncore_utilization") or 0.0)
            out[str(core)] = max(out.get(str(core), 0.0), value)
    return out


def datapoints(
    report: dict[str, Any],
    *,
    instance_id: str,
    lnc: int,
    metric: str,
    device_dimension: str,
    heartbeat_metric: str,
    per_device: bool = True,
) -> list[dict[str, Any]]:
    """PutMetricData ``MetricData`` for one report (``datapoints_for`` its core values)."""
    return datapoints_for(
        core_utilization(report, lnc),
        instance_id=instance_id,
        metric=metric,
        device_dimension=device_dimension,
        heartbeat_metric=heartbeat_metric,
        per_device=per_device,
    )


def datapoints_for(
    util: dict[str, float],
    *,
    instance_id: str,
    metric: str,
    device_dimension: str,
    heartbeat_metric: str,
    per_device: bool = True,
) -> list[dict[str, Any]]:
    """With ``per_device``, one utilization datum per logical core (dimensions InstanceId +
    ``device_dimension``); then the rollup statistic set over all of them (InstanceId only),
    then the heartbeat (InstanceId only), always last. The publisher passes ``per_device`` only
    with ``--per-device``."""
    iid = {"Name": "InstanceId", "Value": instance_id}
    data: list[dict[str, Any]] = []
    if per_device:
        data += [
            {
                "MetricName": metric,
                "Unit": "Percent",
                "Value": util[core],
                "Dimensions": [iid, {"Name": device_dimension, "Value": core}],
            }
            for core in sorted(util, key=lambda c: (not c.isdigit(), int(c) if c.isdigit() else c))
        ]
    values = list(util.values())
    if values:
        data.append(
            {
                "MetricName": metric,
                "Unit": "Percent",
                "StatisticValues": {
                    "SampleCount": float(len(values)),
                    "Sum": float(sum(values)),
                    "Minimum": float(min(values)),
                    "Maximum": float(max(values)),
                },
                "Dimensions": [iid],
            }
        )
    data.append(
        {"MetricName": heartbeat_metric, "Unit": "Count", "Value": 1.0, "Dimensions": [iid]}
    )
    return data


def merge_peak(into: dict[str, float], util: dict[str, float]) -> dict[str, float]:
    """Each core's highest value across reports (so a busy report between two publishes
    counts): ``into`` updated in place and returned."""
    for core, v in util.items():
        into[core] = max(into.get(core, v), v)
    return into


def _instance_id(report: dict[str, Any]) -> str:
    got = (report.get("instance_info") or {}).get("instance_id")
    if got:
        return str(got)
    tok = urllib.request.Request(
        IMDS + "/api/token",
        method="PUT",
        headers={"X-aws-ec2-metadata-token-ttl-seconds": "300"},
    )
    token = urllib.request.urlopen(tok, timeout=2).read().decode()
    req = urllib.request.Request(
        IMDS + "/meta-data/instance-id", headers={"X-aws-ec2-metadata-token": token}
    )
    return str(urllib.request.urlopen(req, timeout=2).read().decode())


def _publish(a: argparse.Namespace, data: list[dict[str, Any]]) -> None:
    beat = [d for d in data if d["MetricName"] == a.heartbeat_metric]
    util = [d for d in data if d["MetricName"] != a.heartbeat_metric]
    groups = [(a.namespace, util), (a.heartbeat_namespace, beat)]
    if a.namespace == a.heartbeat_namespace:
        groups = [(a.namespace, data)]
    for ns, items in groups:
        for i in range(0, len(items), MAX_METRICS_PER_PUT):
            chunk = json.dumps(items[i : i + MAX_METRICS_PER_PUT])
            cmd = ["aws", "cloudwatch", "put-metric-data", "--namespace", ns]
            subprocess.run([*cmd, "--metric-data", chunk], check=False)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="neuron-monitor (stdin) to CloudWatch")
    ap.add_argument("--namespace", required=True)
    ap.add_argument("--metric", required=True)
    ap.add_argument("--device-dimension", required=True)
    ap.add_argument("--heartbeat-namespace", required=True)
    ap.add_argument("--heartbeat-metric", required=True)
    ap.add_argument("--lnc", type=int, default=None)
    ap.add_argument(
        "--per-device",
        action="store_true",
        help="also publish each NeuronCore's own series (for explain; one custom metric each)",
    )
    ap.add_argument(
        "--interval",
        type=float,
        default=0.0,
        help="collect at most once per this many seconds (each core's peak meanwhile); 0: "
        "every report",
    )
    ap.add_argument(
        "--flush-interval",
        type=float,
        default=0.0,
        help="send what was collected at most once per this many seconds, each datapoint with "
        "its own timestamp; 0: at every collection",
    )
    a = ap.parse_args(argv)
    iid = ""
    pending: dict[str, float] = {}
    buffered: list[dict[str, Any]] = []
    last = last_sent = float("-inf")

    def collect() -> None:
        nonlocal pending, last
        if pending:
            stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            points = datapoints_for(
                pending,
                instance_id=iid,
                metric=a.metric,
                device_dimension=a.device_dimension,
                heartbeat_metric=a.heartbeat_metric,
                per_device=a.per_device,
            )
            buffered.extend({**p, "Timestamp": stamp} for p in points)
        pending, last = {}, time.monotonic()

    def send(force: bool = False) -> None:
        nonlocal buffered, last_sent
        if buffered and (force or time.monotonic() - last_sent >= a.flush_interval):
            _publish(a, buffered)
            buffered, last_sent = [], time.monotonic()

    def flush() -> None:
        collect()
        send()

    # Bytes, not text: one line that is not UTF-8 is skipped, it does not stop the publisher.
    for raw in sys.stdin.buffer:
        try:
            line = raw.decode("utf-8").strip()
        except UnicodeDecodeError:
            print("coreburst-neuron-publisher: skipped a line that is not UTF-8", file=sys.stderr)
            continue
        if not line:
            continue
        try:
            report = json.loads(line)
        except ValueError:
            print("coreburst-neuron-publisher: skipped a line that is not JSON", file=sys.stderr)
            continue
        iid = iid or _instance_id(report)
        merge_peak(pending, core_utilization(report, resolve_lnc(report, a.lnc)))
        if time.monotonic() - last >= a.interval:
            flush()
    collect()  # neuron-monitor ended: what it reported since the last publish still goes out
    send(force=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
