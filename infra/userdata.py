"""Node bootstrap script (pure): start accelerator telemetry and mount Lustre.

The idle-GPU guardrail reads exactly the series configured here (see ``common.telemetry``); a
node that boots without them shows up as *blind*, never as idle.
"""

from __future__ import annotations

import shlex

from common.telemetry import UTILIZATION_METRICS, AcceleratorKind, cloudwatch_agent_config

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


# FSx for Lustre user guide, "Configuring EFA clients"
# (https://docs.aws.amazon.com/fsx/latest/LustreGuide/configure-efa-clients.html), step 2
# "Quick setup": download and unzip this package and run its setup.sh, which loads the Lustre
# modules, configures LNet's TCP and EFA interfaces and installs a systemd service (this name)
# that redoes it on every boot. The Lustre client and EFA driver come with the Deep Learning AMI.
EFA_LUSTRE_CLIENT_ZIP = (
    "https://docs.aws.amazon.com/fsx/latest/LustreGuide/samples/configure-efa-fsx-lustre-client.zip"
)
EFA_LUSTRE_CLIENT_SERVICE = "configure-efa-fsx-lustre-client.service"
# The instance types that guide's step 3 lists with their EFA interface counts. It excludes the
# trn2 family outright ("EFA is supported on Nitro v4 (or higher) EC2 instances that support
# EFA, excluding the trn2 instance family"); other types mount over TCP.
EFA_LUSTRE_CLIENT_TYPES = frozenset(
    {
        "p5.48xlarge",
        "p5e.48xlarge",
        "p5en.48xlarge",
        "p6-b200.48xlarge",
        "p6e-gb200.36xlarge",
    }
)


def lustre_efa_client_supported(instance_type: str) -> bool:
    """Whether nodes of this type reach an EFA-enabled Lustre over EFA (else over TCP)."""
    return instance_type in EFA_LUSTRE_CLIENT_TYPES


def render_user_data(
    kind: AcceleratorKind,
    lustre_dns: str | None = None,
    lustre_mount_name: str | None = None,
    mount_point: str = "/fsx",
    lustre_efa: bool = False,
) -> str:
    """The node's boot script. ``lustre_efa``: the file system is EFA-enabled and this node
    type is an EFA client, so LNet gets its EFA interfaces before the mount.

    >>> "setup.sh" in render_user_data("nvidia", "fs.example", "abcd", lustre_efa=True)
    True
    """
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
        lines += ["", *_lustre_mount(lustre_dns, lustre_mount_name, mount_point, lustre_efa)]
    return "\n".join(lines) + "\n"


def _lustre_mount(dns: str, mount_name: str, mount_point: str, efa: bool) -> list[str]:
    mp = shlex.quote(mount_point)
    # Clients always name the file system by its TCP NID; with LNet's efa network configured,
    # the client then moves the bulk traffic to the EFA interfaces by itself.
    src = f"{dns}@tcp:/{mount_name}"
    lines = [
        "# Shared Lustre scratch/checkpoint file system.",
        'lustre_opts="defaults,noatime,flock,_netdev,x-systemd.automount"',
    ]
    if efa:
        zip_name = EFA_LUSTRE_CLIENT_ZIP.rsplit("/", 1)[1]
        folder = zip_name.removesuffix(".zip")
        lines += [
            "# EFA-enabled file system: give LNet its EFA interfaces before mounting (FSx for",
            "# Lustre user guide, Configuring EFA clients). If that fails the node still mounts,",
            "# over TCP, and says so in the boot log.",
            'efa_dir="$(mktemp -d)"',
            f'if (cd "$efa_dir" && curl -fsSLO {shlex.quote(EFA_LUSTRE_CLIENT_ZIP)} \\',
            f"    && unzip -q {zip_name} && cd {folder} && ./setup.sh); then",
            # At boot, mount only once the service has configured LNet again.
            f'  lustre_opts="$lustre_opts,x-systemd.requires={EFA_LUSTRE_CLIENT_SERVICE}"',
            "  lnetctl net show --net efa \\",
            '    || echo "coreburst: LNet has no efa network; Lustre stays on TCP" >&2',
            "else",
            '  echo "coreburst: EFA client setup for Lustre failed; mounting over TCP" >&2',
            "fi",
        ]
    fstab = f"{src} {mount_point} lustre $lustre_opts 0 0"
    lines += [
        f"mkdir -p {mp}",
        f'grep -q " {mount_point} " /etc/fstab || echo "{fstab}" >> /etc/fstab',
        f"mountpoint -q {mp} || mount -t lustre -o noatime,flock {shlex.quote(src)} {mp}",
    ]
    return lines
