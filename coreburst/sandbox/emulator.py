"""Loopback helpers for the demo, the integration tests and the benchmark: a moto server, a
Slack-compatible webhook receiver, and a fleet/metrics publisher. Nothing binds beyond
127.0.0.1 and nothing here runs at import time.
"""

from __future__ import annotations

import fcntl
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import boto3

from coreburst.common.telemetry import PUBLISHER_HEARTBEATS

AMI = "ami-12c6146b"  # one of moto's built-in images


# Ports for the sandbox's servers come from below Linux's default ephemeral range
# (/proc/sys/net/ipv4/ip_local_port_range: 32768-60999), so no outgoing connection holds one,
# and are recorded with the owning process in one file under a lock, so labs and servers
# started at the same time by parallel test workers never pick the same port between
# choosing it and binding it.
_PORTS_LOW, _PORTS_HIGH = 20000, 32000
_PORTS_FILE = Path(tempfile.gettempdir()) / "coreburst-sandbox-ports.json"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_ports(count: int) -> list[int]:
    """``count`` consecutive TCP ports on 127.0.0.1, free now and reserved for this process
    (until it exits) against every other process that asks here."""
    with open(_PORTS_FILE.with_suffix(".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            taken: dict[str, int] = json.loads(_PORTS_FILE.read_text())
        except (OSError, ValueError):
            taken = {}
        taken = {p: pid for p, pid in taken.items() if _alive(pid)}
        rng = random.Random(os.getpid() ^ time.monotonic_ns())
        for _ in range(500):
            base = rng.randrange(_PORTS_LOW, _PORTS_HIGH - count)
            ports = list(range(base, base + count))
            if any(str(p) in taken for p in ports) or not all(_bindable(p) for p in ports):
                continue
            taken.update({str(p): os.getpid() for p in ports})
            tmp = _PORTS_FILE.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(taken))
            tmp.replace(_PORTS_FILE)
            return ports
    raise RuntimeError(f"no {count} free ports between {_PORTS_LOW} and {_PORTS_HIGH}")


def free_port() -> int:
    return free_ports(1)[0]


def fake_session() -> boto3.session.Session:
    """Credentials for the emulator only, so real ones are never sent to it."""
    return boto3.session.Session(
        aws_access_key_id="testing", aws_secret_access_key="testing", region_name="us-east-1"
    )


def wait_http(url: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url, timeout=1).read()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{url} did not answer within {timeout_s}s")


class MotoProcess:
    """moto server in its own process (so its CPU is not the client's), on 127.0.0.1."""

    def __init__(self, port: int | None = None, launcher: list[str] | None = None) -> None:
        # ``launcher``: the command that runs moto's server (default ``python -m moto.server``);
        # the benchmark passes one that indexes CloudWatch datapoints first.
        self.launcher = launcher or [sys.executable, "-m", "moto.server"]
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> MotoProcess:
        self.proc = subprocess.Popen(
            [*self.launcher, "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_http(self.url + "/moto-api/")
        return self

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
            self.proc = None

    def set_cost_and_usage(self, results: list[dict[str, Any]]) -> None:
        """Queue Cost Explorer GetCostAndUsage answers (moto's own API)."""
        req = urllib.request.Request(
            self.url + "/moto-api/static/ce/cost-and-usage-results",
            data=json.dumps({"results": results}).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        urllib.request.urlopen(req, timeout=10).read()

    def reset(self) -> None:
        req = urllib.request.Request(self.url + "/moto-api/reset", method="POST")
        urllib.request.urlopen(req, timeout=10).read()


def ce_result(amount: float, start: str, end: str, metric: str = "UnblendedCost") -> dict[str, Any]:
    return {
        "ResultsByTime": [
            {
                "TimePeriod": {"Start": start, "End": end},
                "Total": {metric: {"Amount": str(amount), "Unit": "USD"}},
                "Groups": [],
                "Estimated": False,
            }
        ]
    }


class WebhookReceiver:
    """A Slack-compatible incoming webhook on 127.0.0.1 that records every post.

    ``script`` is a list of (status, headers) or (status, headers, body) answered in order
    before falling back to 200 "ok". Slack answers a rejected post with a short error name as
    the body (``invalid_blocks``, ``invalid_payload``, ``no_service``...), and so can this.
    """

    def __init__(self, echo: Any = None) -> None:
        self.posts: list[dict[str, Any]] = []  # accepted (200) posts
        self.attempts: list[tuple[int, dict[str, Any]]] = []
        self.script: list[tuple[Any, ...]] = []
        self.echo = echo
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                payload = json.loads(body or b"{}")
                with outer._lock:
                    answer = outer.script.pop(0) if outer.script else (200, {})
                    status, headers = answer[0], answer[1]
                    text = answer[2] if len(answer) > 2 else ("ok" if status == 200 else "error")
                    outer.attempts.append((status, payload))
                    if status == 200:
                        outer.posts.append(payload)
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Type", "text/html")
                self.end_headers()
                self.wfile.write(str(text).encode())
                if status == 200 and outer.echo is not None:
                    outer.echo(payload)

            def log_message(self, *args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/services/T0/B0/demo"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self) -> WebhookReceiver:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def titles(self) -> list[str]:
        with self._lock:
            return [p["blocks"][0]["text"]["text"] for p in self.posts]


@dataclass
class FleetNode:
    instance_id: str
    region: str
    kind: str  # nvidia | neuron
    devices: int
    # per-device utilization profile: "idle", "busy", "one-idle", "missing"
    profile: str
    egress_gb_per_hour: float = 1.0


def launch(
    ec2: Any,
    instance_type: str,
    tags: dict[str, str],
    *,
    count: int = 1,
    spot: bool = False,
) -> list[str]:
    kw: dict[str, Any] = {
        "ImageId": AMI,
        "MinCount": count,
        "MaxCount": count,
        "InstanceType": instance_type,
    }
    if tags:
        kw["TagSpecifications"] = [
            {"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}
        ]
    if spot:
        kw["InstanceMarketOptions"] = {"MarketType": "spot"}
    return [i["InstanceId"] for i in ec2.run_instances(**kw)["Instances"]]


def launch_asg(ec2: Any, asg: Any, name: str, instance_type: str, tags: dict[str, str]) -> str:
    ec2.create_launch_template(
        LaunchTemplateName=f"{name}-lt",
        LaunchTemplateData={"ImageId": AMI, "InstanceType": instance_type},
    )
    asg.create_auto_scaling_group(
        AutoScalingGroupName=name,
        LaunchTemplate={"LaunchTemplateName": f"{name}-lt"},
        MinSize=0,
        MaxSize=4,
        DesiredCapacity=1,
        AvailabilityZones=[ec2.meta.region_name + "a"],
        Tags=[{"Key": k, "Value": v, "PropagateAtLaunch": True} for k, v in tags.items()],
    )
    group = asg.describe_auto_scaling_groups(AutoScalingGroupNames=[name])["AutoScalingGroups"]
    return str(group[0]["Instances"][0]["InstanceId"])


def _value(profile: str, device: int, minute: int) -> float | None:
    if profile == "missing":
        return None
    if profile == "idle":
        return 1.0 + (minute % 3) * 0.5
    if profile == "one-idle" and device == 0:
        return 0.0
    return 60.0 + (device * 7 + minute) % 30


def publish(
    cw_by_region: dict[str, Any],
    nodes: Iterable[FleetNode],
    start: datetime,
    end: datetime,
    *,
    metric_defs: dict[str, tuple[str, str, str]],
    spike: dict[str, float] | None = None,
) -> int:
    """PutMetricData one datapoint per minute per device in [start, end), plus NetworkOut.

    ``metric_defs`` maps kind -> (namespace, metric name, device dimension); pass the values
    from ``coreburst.common.telemetry`` so publisher and daemon share one definition. Each minute's
    device values are published again under the instance id alone, the per-instance rollup
    the daemon decides from, the way each publisher does it: NVIDIA as the CloudWatch agent's
    ``aggregation_dimensions`` [InstanceId] does (every GPU's value again, CloudWatch
    aggregates them), Neuron as ``coreburst/common/neuron_report.py`` does (one statistic set).
    """
    spike = spike or {}
    batches: dict[tuple[str, str], list[dict[str, Any]]] = {}
    minutes = int((end - start).total_seconds() // 60)
    for n in nodes:
        ns, name, dev_dim = metric_defs[n.kind]
        iid = [{"Name": "InstanceId", "Value": n.instance_id}]
        for m in range(minutes):
            ts = start + timedelta(minutes=m)
            values: list[float] = []
            for dev in range(n.devices):
                v = _value(n.profile, dev, m)
                if v is None:
                    continue
                values.append(v)
                batches.setdefault((n.region, ns), []).append(
                    {
                        "MetricName": name,
                        "Dimensions": [*iid, {"Name": dev_dim, "Value": str(dev)}],
                        "Timestamp": ts,
                        "Value": v,
                        "Unit": "Percent",
                    }
                )
            rollup = batches.setdefault((n.region, ns), [])
            if values and n.kind == "neuron":
                rollup.append(
                    {
                        "MetricName": name,
                        "Dimensions": iid,
                        "Timestamp": ts,
                        "StatisticValues": {
                            "SampleCount": float(len(values)),
                            "Sum": sum(values),
                            "Minimum": min(values),
                            "Maximum": max(values),
                        },
                        "Unit": "Percent",
                    }
                )
            elif values:
                rollup += [
                    {
                        "MetricName": name,
                        "Dimensions": iid,
                        "Timestamp": ts,
                        "Value": v,
                        "Unit": "Percent",
                    }
                    for v in values
                ]
            hb = PUBLISHER_HEARTBEATS.get(n.kind)  # type: ignore[call-overload]
            if hb is not None and n.profile != "missing":
                # our node-side publisher's heartbeat (coreburst/common/neuron_report.py); a node
                # with
                # no data at all ("missing") has no live publisher either
                batches.setdefault((n.region, hb.namespace), []).append(
                    {
                        "MetricName": hb.metric_name,
                        "Dimensions": [{"Name": "InstanceId", "Value": n.instance_id}],
                        "Timestamp": ts,
                        "Value": 1.0,
                        "Unit": "Count",
                    }
                )
            gbh = spike.get(n.instance_id, n.egress_gb_per_hour)
            batches.setdefault((n.region, "AWS/EC2"), []).append(
                {
                    "MetricName": "NetworkOut",
                    "Dimensions": [{"Name": "InstanceId", "Value": n.instance_id}],
                    "Timestamp": ts,
                    "Value": gbh * 2**30 / 60,
                    "Unit": "Bytes",
                }
            )
    sent = 0
    for (region, ns), data in batches.items():
        cw = cw_by_region[region]
        for i in range(0, len(data), 1000):
            cw.put_metric_data(Namespace=ns, MetricData=data[i : i + 1000])
            sent += len(data[i : i + 1000])
    return sent
