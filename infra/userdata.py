"""Node bootstrap script (pure): start accelerator telemetry and mount Lustre.

The idle-GPU guardrail reads exactly the series configured here (see ``infra.telemetry``); a
node that boots without them shows up as *blind*, never as idle.
"""

from __future__ import annotations

import shlex

from infra.telemetry import UTILIZATION_METRICS, AcceleratorKind, cloudwatch_agent_config

# Relays neuron-monitor's JSON stream to CloudWatch with the dimension set the guardrails query.
_NEURON_RELAY = """\
import json, subprocess, sys, urllib.request
def imds(path):
    tok = urllib.request.Request("http://169.254.169.254/latest/api/token", method="PUT",
        headers={"X-aws-ec2-metadata-token-ttl-seconds": "300"})
    t = urllib.request.urlopen(tok, timeout=2).read().decode()
    req = urllib.request.Request("http://169.254.169.254/latest/meta-data/" + path,
        headers={"X-aws-ec2-metadata-token": t})
    return urllib.request.urlopen(req, timeout=2).read().decode()
iid = imds("instance-id")
for line in sys.stdin:
    report = json.loads(line)
    data = []
    for rt in report.get("neuron_runtime_data", []):
        cores = rt["report"]["neuroncore_counters"]["neuroncores_in_use"]
        for core, c in cores.items():
            data.append({"MetricName": "%(metric)s", "Unit": "Percent",
                "Value": float(c["neuroncore_utilization"]),
                "Dimensions": [{"Name": "InstanceId", "Value": iid},
                               {"Name": "%(device)s", "Value": str(core)}]})
    for i in range(0, len(data), 500):
        subprocess.run(["aws", "cloudwatch", "put-metric-data", "--namespace", "%(namespace)s",
            "--metric-data", json.dumps(data[i:i + 500])], check=False)
"""


def render_user_data(
    kind: AcceleratorKind,
    lustre_dns: str | None = None,
    lustre_mount_name: str | None = None,
    mount_point: str = "/fsx",
) -> str:
    lines = ["#!/bin/bash", "set -euo pipefail", ""]
    if kind == "nvidia":
        cfg = cloudwatch_agent_config()
        lines += [
            "# Per-GPU utilization for the idle-GPU guardrail (CloudWatch agent nvidia_gpu).",
            "mkdir -p /opt/aws/amazon-cloudwatch-agent/etc",
            "cat > /opt/aws/amazon-cloudwatch-agent/etc/coreburst.json <<'JSON'",
            cfg,
            "JSON",
            "/opt/aws/amazon-cloudwatch-agent/bin/amazon-cloudwatch-agent-ctl -a fetch-config "
            "-m ec2 -s -c file:/opt/aws/amazon-cloudwatch-agent/etc/coreburst.json",
        ]
    else:
        m = UTILIZATION_METRICS["neuron"]
        relay = _NEURON_RELAY % {
            "metric": m.metric_name,
            "device": m.device_dimension,
            "namespace": m.namespace,
        }
        lines += [
            "# Per-NeuronCore utilization for the idle guardrail (neuron-monitor relay).",
            "cat > /usr/local/bin/coreburst-neuron-relay.py <<'PY'",
            relay.rstrip(),
            "PY",
            "cat > /etc/systemd/system/coreburst-neuron-relay.service <<'UNIT'",
            "[Unit]",
            "Description=neuron-monitor to CloudWatch relay (coreburst)",
            "After=network-online.target",
            "[Service]",
            "ExecStart=/bin/sh -c '/opt/aws/neuron/bin/neuron-monitor | "
            "/usr/bin/python3 /usr/local/bin/coreburst-neuron-relay.py'",
            "Restart=always",
            "[Install]",
            "WantedBy=multi-user.target",
            "UNIT",
            "systemctl daemon-reload",
            "systemctl enable --now coreburst-neuron-relay.service",
        ]
    if lustre_dns and lustre_mount_name:
        mp = shlex.quote(mount_point)
        src = shlex.quote(f"{lustre_dns}@tcp:/{lustre_mount_name}")
        fstab = (
            f"{lustre_dns}@tcp:/{lustre_mount_name} {mount_point} lustre "
            "defaults,noatime,flock,_netdev,x-systemd.automount 0 0"
        )
        lines += [
            "",
            "# Shared Lustre scratch/checkpoint file system.",
            f"mkdir -p {mp}",
            f"grep -q ' {mount_point} ' /etc/fstab || echo {shlex.quote(fstab)} >> /etc/fstab",
            f"mountpoint -q {mp} || mount -t lustre -o noatime,flock {src} {mp}",
        ]
    return "\n".join(lines) + "\n"
