"""Node bootstrap script (pure): start accelerator telemetry, mount Lustre and, on a burst
stack, join the on-prem Slurm controller.

The idle-GPU guardrail reads exactly the series configured here (see
``coreburst.common.telemetry``); a
node that boots without them shows up as *blind*, never as idle.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Literal

from coreburst.common.catalog import Catalog
from coreburst.common.names import NODE_TAG_KEY
from coreburst.common.telemetry import (
    NEURON_FLUSH_INTERVAL_S,
    PUBLISH_INTERVAL_S,
    PUBLISHER_HEARTBEATS,
    UTILIZATION_METRICS,
    AcceleratorKind,
    cloudwatch_agent_config,
)
from infra.config import BurstNode, Cluster

# The Neuron publisher: coreburst/common/neuron_report.py, copied onto the node verbatim (stdlib
# only), so
# the code the node runs is the code tests/unit/guardrails/test_neuron_publisher.py tests.
NEURON_PUBLISHER_PATH = "/usr/local/bin/coreburst-neuron-publisher.py"
NEURON_PUBLISHER_SERVICE = "coreburst-neuron-publisher.service"


def neuron_publisher_source() -> str:
    """The publisher's source, read from the installed ``coreburst.common`` package."""
    pkg = resources.files("coreburst.common")
    return pkg.joinpath("neuron_report.py").read_text(encoding="utf-8")


def neuron_publisher_command(lnc: int | None = None, per_device: bool = False) -> str:
    """The publisher's command line, with the names from ``coreburst.common.telemetry``;
    ``per_device`` adds each NeuronCore's own series (``--per-device``)."""
    m, hb = UTILIZATION_METRICS["neuron"], PUBLISHER_HEARTBEATS["neuron"]
    args = [
        "/usr/bin/python3",
        NEURON_PUBLISHER_PATH,
        "--namespace",
        m.namespace,
        "--metric",
        m.metric_name,
        "--device-dimension",
        m.device_dimension,
        "--heartbeat-namespace",
        hb.namespace,
        "--heartbeat-metric",
        hb.metric_name,
        # once a minute (each core's peak meanwhile), whatever neuron-monitor's own period
        "--interval",
        str(PUBLISH_INTERVAL_S),
        # sent every 5 min, as the CloudWatch agent flushes (the guardrails' idle.publish_delay)
        "--flush-interval",
        str(NEURON_FLUSH_INTERVAL_S),
    ]
    if lnc is not None:
        args += ["--lnc", str(int(lnc))]
    if per_device:
        args.append("--per-device")
    return shlex.join(args)


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
    *,
    slurm_join: SlurmJoin | None = None,
    neuron_lnc: int | None = None,
    per_device_metrics: bool = False,
) -> str:
    """The node's boot script. ``lustre_efa``: the file system is EFA-enabled and this node
    type is an EFA client, so LNet gets its EFA interfaces before the mount. ``slurm_join``:
    a burst stack's node joins the on-prem Slurm controller last (after Lustre is mounted).
    ``neuron_lnc``: the logical NeuronCore size the Neuron publisher counts cores at (None: the
    node's NEURON_LOGICAL_NC_CONFIG, else the runtime default; see
    coreburst/common/neuron_report.py). ``per_device_metrics`` (the cluster's
    ``perDeviceMetrics``): publish every GPU's / NeuronCore's own series too, for ``explain``;
    by default only the per-instance rollup the guardrails read (and the Neuron heartbeat).

    >>> "setup.sh" in render_user_data("nvidia", "fs.example", "abcd", lustre_efa=True)
    True
    """
    lines = ["#!/bin/bash", "set -euo pipefail", ""]
    if kind == "nvidia":
        cfg = cloudwatch_agent_config(per_device=per_device_metrics)
        lines += [
            "# GPU utilization for the idle-GPU guardrail (CloudWatch agent nvidia_gpu).",
            "mkdir -p /opt/aws/amazon-cloudwatch-agent/etc",
            "cat > /opt/aws/amazon-cloudwatch-agent/etc/coreburst.json <<'JSON'",
            cfg,
            "JSON",
            "/opt/aws/amazon-cloudwatch-agent/bin/amazon-cloudwatch-agent-ctl -a fetch-config "
            "-m ec2 -s -c file:/opt/aws/amazon-cloudwatch-agent/etc/coreburst.json",
        ]
    else:
        src = neuron_publisher_source().rstrip()
        if any(line.strip() == "PY" for line in src.splitlines()):
            raise ValueError(
                "coreburst/common/neuron_report.py holds a line 'PY' (the heredoc's end)"
            )
        lines += [
            "# Every logical NeuronCore's utilization (0 % when no Neuron application holds it)",
            "# and a heartbeat, each neuron-monitor period, for the idle guardrail.",
            f"cat > {NEURON_PUBLISHER_PATH} <<'PY'",
            src,
            "PY",
            f"cat > /etc/systemd/system/{NEURON_PUBLISHER_SERVICE} <<'UNIT'",
            "[Unit]",
            "Description=neuron-monitor to CloudWatch publisher (coreburst)",
            "After=network-online.target",
            "[Service]",
            "ExecStart=/bin/sh -c '/opt/aws/neuron/bin/neuron-monitor | "
            f"{neuron_publisher_command(neuron_lnc, per_device_metrics)}'",
            "Restart=always",
            "[Install]",
            "WantedBy=multi-user.target",
            "UNIT",
            "systemctl daemon-reload",
            f"systemctl enable --now {NEURON_PUBLISHER_SERVICE}",
        ]
    if lustre_dns and lustre_mount_name:
        lines += ["", *_lustre_mount(lustre_dns, lustre_mount_name, mount_point, lustre_efa)]
    if slurm_join is not None:
        lines += ["", *render_slurm_join(slurm_join)]
    script = "\n".join(lines) + "\n"
    if len(script.encode()) > USER_DATA_MAX_BYTES:
        raise ValueError(
            f"the node's user data is {len(script.encode())} bytes; EC2 takes at most "
            f"{USER_DATA_MAX_BYTES} (before base64)"
        )
    return script


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


# EC2 user guide, "Run commands when you launch an EC2 instance with user data input"
# (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/user-data.html): "User data is limited
# to 16 KB, in raw form, before it is base64-encoded."
USER_DATA_MAX_BYTES = 16 * 1024

JOIN_BEGIN = "# ---- coreburst: join the on-prem Slurm controller (coreburst:burst.node) ----"
JOIN_END = "# ---- coreburst: end of Slurm join ----"
IMDS = "http://169.254.169.254/latest"


@dataclass(frozen=True)
class SlurmJoin:
    """What a burst node needs to join the on-prem controller (infra/config.py BurstNode,
    resolved to ARNs). ``root`` prefixes every file the block writes ("" on a node)."""

    region: str
    munge_key_secret_arn: str
    slurm_conf_parameter_arn: str
    conf_mode: Literal["configless", "file"] = "configless"
    node_tag_key: str = NODE_TAG_KEY
    tag_wait_seconds: int = 600
    poll_seconds: float = 5
    install_packages: bool = True
    # Run the boot gate (coreburst/burst/node_gate.py) before slurmd (BurstNode.health_gate):
    # (instance type, GPUs, EFA devices) for every type the cluster may launch.
    health_gate: bool = True
    gate_expect: tuple[tuple[str, int, int], ...] = ()
    gate_dcgm: bool = False  # BurstNode.health_gate_dcgm
    # file mode: the node's own gres.conf line (configless: gres.conf comes from slurmctld).
    gres_line: str | None = None
    root: str = ""


NODE_GATE_PATH = "/usr/local/lib/coreburst/node-gate.py"
SLURMD_DROP_IN = "/etc/systemd/system/slurmd.service.d/coreburst-configless.conf"
# The EFA installer puts fi_info in /opt/amazon/efa/bin, which is not on cloud-init's PATH
# (EC2 user guide, "Get started with EFA and NCCL", runs it as /opt/amazon/efa/bin/fi_info).
EFA_BIN = "/opt/amazon/efa/bin"


def node_gate_source() -> bytes:
    """The boot gate's source, read from the installed ``coreburst.burst`` package."""
    return resources.files("coreburst.burst").joinpath("node_gate.py").read_bytes()


def gate_expectations(
    catalog: Catalog, instance_types: Sequence[str], efa: bool
) -> tuple[tuple[str, int, int], ...]:
    """(type, GPUs, EFA devices) the gate expects of each type a cluster may launch, from the
    catalog; EFA 0 where the cluster attaches no EFA interface (``efa: false``)."""
    out = []
    for t in instance_types:
        facts = catalog.instance(t)
        out.append((t, facts.accelerator.count, facts.efa_interfaces.value if efa else 0))
    return tuple(out)


def _health_gate(j: SlurmJoin) -> list[str]:
    """slurmd starts only on a node that passed the boot gate (coreburst/burst/node_gate.py).
    The gate is written whole into the user data (gzip, base64, its sha256 checked), run by
    the image's python3: nothing is installed and nothing is fetched. On failure it asks
    slurmctld to set the node DOWN and power it down; the block stops here either way, so a
    failing node never registers."""
    if not j.gate_expect:
        raise ValueError("health_gate needs gate_expect: the counts of each instance type")
    src = node_gate_source()
    packed = base64.encodebytes(gzip.compress(src, 9, mtime=0)).decode().strip()
    path = f"{j.root.rstrip('/')}{NODE_GATE_PATH}"
    q = shlex.quote
    args = [f"--expect={t}={g}:{e}" for t, g, e in j.gate_expect]
    if not j.gate_dcgm:
        args.append("--no-dcgm")
    return [
        "# Health gate (coreburst/burst/node_gate.py, Python standard library only): GPUs,",
        "# DCGM and EFA against the catalog before the node takes jobs.",
        "command -v python3 >/dev/null || cb_fail 'python3 is not on this image: the health "
        "gate needs it (use an image with python3, or set coreburst:burst.node.healthGate: "
        "false)'",
        f"install -d -m 0755 {q(path.rsplit('/', 1)[0])}",
        f"base64 -d <<'B64' | gunzip > {q(path)} || cb_fail 'cannot unpack the health gate'",
        packed,
        "B64",
        f"echo {hashlib.sha256(src).hexdigest()}  {q(path)} | sha256sum -c --quiet - \\",
        "  || cb_fail 'the health gate script is damaged (sha256 mismatch; user data cut short?)'",
        "cb_itype=$(cb_imds instance-type) || cb_fail 'cannot read instance-type from IMDS'",
        f'PATH="$PATH:{EFA_BIN}" python3 {q(path)} --node "$cb_node" --instance-type '
        f'"$cb_itype" {" ".join(args)} \\',
        '  || cb_fail "health check failed on $cb_node ($cb_itype): see the gate\'s lines above"',
    ]


def render_slurm_join(j: SlurmJoin) -> list[str]:
    """The join block: IMDSv2 (instance id, the node-name tag from instance metadata tags),
    the munge key from Secrets Manager, the Slurm configuration from SSM Parameter Store, then
    munged and ``slurmd -N <node>``. Any missing piece stops the script before slurmd starts,
    with one line on stderr (the boot log); the key never reaches the log."""
    q = shlex.quote
    r = j.root.rstrip("/")
    key = f"{r}/etc/munge/munge.key"
    # slurmd(8) --conf-server: host[:port], comma-separated (what infra/config.py accepts).
    host = r"[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?(:[0-9]{1,5})?"
    conf_re = f"^{host}(,{host})*$"
    lines = [
        JOIN_BEGIN,
        "cb_fail() {",
        '  echo "coreburst: Slurm join failed: $*; slurmd not started, this node does not '
        'register" >&2',
        "  exit 1",
        "}",
        f"cb_region={q(j.region)}",
        f"cb_tag_key={q(j.node_tag_key)}",
        f"cb_secret={q(j.munge_key_secret_arn)}",
        f"cb_param={q(j.slurm_conf_parameter_arn)}",
    ]
    if j.install_packages:
        # From the image's own apt sources (a fresh image may have no package lists yet);
        # slurm-client for scontrol, with which a node that fails its gate takes itself out
        # (Debian's slurmd does not depend on it).
        apt = "DEBIAN_FRONTEND=noninteractive timeout 900 apt-get"
        lines += [
            "if ! command -v slurmd >/dev/null || ! command -v munged >/dev/null; then",
            f"  {{ {apt} update -qq \\",
            f"    && {apt} install -y --no-install-recommends slurmd munge \\",
            "       slurm-client; } \\",
            '    || cb_fail "cannot install slurmd and munge (apt-get); bake them into the AMI"',
            "fi",
        ]
    lines += [
        "command -v slurmd >/dev/null || cb_fail 'slurmd is not installed'",
        "command -v munged >/dev/null || cb_fail 'munged is not installed'",
        "# IMDSv2: a session token first, then every read with it.",
        f"cb_token=$(curl -fsS -X PUT {IMDS}/api/token "
        '-H "X-aws-ec2-metadata-token-ttl-seconds: 21600") \\',
        "  || cb_fail 'no IMDSv2 token (instance metadata service unreachable)'",
        "cb_imds() {",
        f'  curl -fsS -H "X-aws-ec2-metadata-token: $cb_token" "{IMDS}/meta-data/$1"',
        "}",
        "cb_iid=$(cb_imds instance-id) || cb_fail 'cannot read instance-id from IMDS'",
        "# The resume program tags the instance with its Slurm node name after CreateFleet",
        "# returns: wait for the tag (instance metadata tags are updated while it runs).",
        f"cb_deadline=$(( $(date +%s) + {int(j.tag_wait_seconds)} ))",
        'cb_node=""',
        'while [ -z "$cb_node" ]; do',
        '  cb_node=$(cb_imds "tags/instance/$cb_tag_key" 2>/dev/null) || cb_node=""',
        '  if [ -z "$cb_node" ]; then',
        '    [ "$(date +%s)" -lt "$cb_deadline" ] || cb_fail "no $cb_tag_key tag on $cb_iid '
        f"after {int(j.tag_wait_seconds)} s (launched outside the resume program, or instance "
        'metadata tags disabled)"',
        f"    sleep {j.poll_seconds:g}",
        "  fi",
        "done",
        "[[ $cb_node =~ ^[A-Za-z0-9][A-Za-z0-9._-]*$ ]] "
        '|| cb_fail "tag $cb_tag_key is not a Slurm node name"',
        'echo "coreburst: instance $cb_iid is Slurm node $cb_node"',
        "# The munge key (Secrets Manager SecretBinary): written under umask 077, never echoed.",
        f"install -d -m 0700 {q(r + '/etc/munge')}",
        'cb_key_tmp=$(umask 077 && mktemp "${TMPDIR:-/tmp}/coreburst-munge.XXXXXX")',
        'aws secretsmanager get-secret-value --region "$cb_region" --secret-id "$cb_secret" \\',
        '    --query SecretBinary --output text > "$cb_key_tmp" \\',
        '  || { rm -f "$cb_key_tmp"; cb_fail "cannot read the munge key (GetSecretValue on '
        '$cb_secret)"; }',
        'if [ ! -s "$cb_key_tmp" ] || [ "$(head -c 4 "$cb_key_tmp")" = "None" ]; then',
        '  rm -f "$cb_key_tmp"',
        '  cb_fail "secret $cb_secret has no SecretBinary (put the key with aws secretsmanager '
        'put-secret-value --secret-binary fileb:///etc/munge/munge.key)"',
        "fi",
        f'(umask 077 && base64 -d "$cb_key_tmp" > {q(key + ".new")}) \\',
        f'  || {{ rm -f "$cb_key_tmp" {q(key + ".new")}; cb_fail "the munge key secret is not '
        'valid base64"; }',
        'rm -f "$cb_key_tmp"',
        # munged refuses shorter keys ("Keyfile must be at least 32 bytes", munge 0.5.15).
        f"cb_key_bytes=$(wc -c < {q(key + '.new')})",
        '[ "$cb_key_bytes" -ge 32 ] || { rm -f ' + q(key + ".new") + '; cb_fail "the munge key '
        'is $cb_key_bytes bytes; munged needs at least 32"; }',
        f"chmod 0400 {q(key + '.new')}",
        f"chown munge:munge {q(r + '/etc/munge')} {q(key + '.new')}",
        f"mv -f {q(key + '.new')} {q(key)}",
        "# The Slurm configuration (SSM Parameter Store).",
        'cb_conf=$(aws ssm get-parameter --region "$cb_region" --name "$cb_param" '
        "--with-decryption \\",
        "    --query Parameter.Value --output text) \\",
        '  || cb_fail "cannot read the Slurm parameter (GetParameter on $cb_param)"',
        '[ -n "$cb_conf" ] || cb_fail "parameter $cb_param is empty"',
    ]
    if j.conf_mode == "configless":
        lines += [
            f"[[ $cb_conf =~ {conf_re} ]] \\",
            '  || cb_fail "parameter $cb_param is not a conf server (host[:port],...)"',
            "# Configless: slurmd fetches slurm.conf and gres.conf from slurmctld.",
            'cb_opts="-N $cb_node --conf-server $cb_conf"',
            # Debian 12's slurmd.service (and its forerunners) has
            # ConditionPathExists=/etc/slurm/slurm.conf: with none, `systemctl restart slurmd`
            # succeeds and starts nothing. systemd.unit(5), Conditions: an empty assignment
            # resets the list of conditions.
            "# slurmd.service may start only with /etc/slurm/slurm.conf, which configless has "
            "not: lift that condition.",
            f"install -d -m 0755 {q(r + SLURMD_DROP_IN.rsplit('/', 1)[0])}",
            f"printf '[Unit]\\nConditionPathExists=\\n' > {q(r + SLURMD_DROP_IN)}",
            "systemctl daemon-reload || cb_fail 'systemctl daemon-reload failed'",
        ]
    else:
        lines += [
            f"install -d -m 0755 {q(r + '/etc/slurm')}",
            f"printf '%s\\n' \"$cb_conf\" > {q(r + '/etc/slurm/slurm.conf')}",
        ]
        if j.gres_line:
            lines.append(
                f"printf 'NodeName=%s %s\\n' \"$cb_node\" {q(j.gres_line)} "
                f"> {q(r + '/etc/slurm/gres.conf')}"
            )
        lines.append('cb_opts="-N $cb_node"')
    lines += [
        "# The node name for systemd: slurmd.service reads SLURMD_OPTIONS from here.",
        f"install -d -m 0755 {q(r + '/etc/default')} {q(r + '/etc/coreburst')}",
        f'printf \'SLURMD_OPTIONS="%s"\\n\' "$cb_opts" > {q(r + "/etc/default/slurmd")}',
        f"printf '%s\\n' \"$cb_node\" > {q(r + '/etc/coreburst/slurm-node-name')}",
        "systemctl restart munge || cb_fail 'munged did not start'",
        *(_health_gate(j) if j.health_gate else []),
        "systemctl enable slurmd || cb_fail 'cannot enable slurmd'",
        "systemctl restart slurmd || cb_fail 'slurmd did not start'",
        'echo "coreburst: slurmd started as $cb_node"',
        JOIN_END,
    ]
    return lines


def slurm_join_for(
    node: BurstNode,
    cluster: Cluster,
    catalog: Catalog,
    *,
    region: str,
    node_tag_key: str,
    munge_key_secret_arn: str,
    slurm_conf_parameter_arn: str,
    gpu_device_prefix: str = "/dev/nvidia",
) -> SlurmJoin:
    """The join block's settings for ``cluster``'s nodes (GpuCluster renders with this; so
    can a test, without Pulumi): file mode's gres.conf line, the gate's expected counts for
    the cluster's type and its fallbacks."""
    acc = catalog.instance(cluster.instance_type).accelerator
    gres_line = None
    if node.conf_mode == "file" and acc.kind == "nvidia":
        gres_line = f"Name=gpu Type={acc.model.lower()} File={gpu_device_prefix}[0-{acc.count - 1}]"
    types = [cluster.instance_type, *cluster.fallback_instance_types]
    return SlurmJoin(
        region=region,
        munge_key_secret_arn=munge_key_secret_arn,
        slurm_conf_parameter_arn=slurm_conf_parameter_arn,
        conf_mode=node.conf_mode,
        node_tag_key=node_tag_key,
        tag_wait_seconds=node.tag_wait_seconds,
        install_packages=node.install_packages,
        health_gate=node.health_gate,
        gate_expect=gate_expectations(catalog, types, cluster.efa) if node.health_gate else (),
        gate_dcgm=node.health_gate_dcgm,
        gres_line=gres_line,
    )
