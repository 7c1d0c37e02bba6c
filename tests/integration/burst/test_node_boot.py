"""A burst node boots on the default image (issue 32 item 2): the example burst stack's user
data (Pulumi.burst.yaml, cluster ``od``: p5.48xlarge on the Deep Learning Base AMI), run whole
by bash in real Debian with its real slurmd, munge, python3 and coreutils, reaches the start of
slurmd; with a failing health check it does not, and says why.

Where it runs: ``make test-slurm SLURM=<release>`` runs it on the host (22.05) and in the
Debian chroots of 24.11 and 26.05 (.ci/slurm-chroot.sh; the module imports the Slurm lab's
``slurm_release``, which puts it there). The user data runs in a throwaway root: a private mount
namespace (``unshare --mount --net``, loopback only) in which an overlay of ``/`` (its writes
go to a tmpfs) is the chroot, so the host, or the Debian chroot, is never changed; the test
checks that too.

What is made up, all by us (tests/helpers/node_boot.py, each saying which document it follows):
IMDSv2 (``curl``), the AWS CLI (``aws``: the munge key secret, the Slurm parameter),
``systemctl`` (records; ``restart slurmd`` reads the real slurmd.service and its drop-ins,
skips the start on an unmet ``ConditionPathExists`` as systemd does, and runs the real
``slurmd -V``), ``scontrol``
(records), ``apt-get`` (records and fails: Debian here has slurmd and munge, so it must not
run), the CloudWatch agent's ``amazon-cloudwatch-agent-ctl``, and ``nvidia-smi`` and ``fi_info``
answering from tests/fixtures/health: ``p5-healthy`` (synthesized from the tools' documented
formats) and ``recorded-h200`` (RECORDED on a real one-GPU H200 machine, without DCGM and
libfabric). ``fi_info`` sits where the EFA installer puts it, /opt/amazon/efa/bin, which is not
on cloud-init's PATH.
"""

from __future__ import annotations

import base64
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from coreburst.sandbox.slurmlab import slurm_release
from tests.helpers.node_boot import (
    FAKE_AWS,
    FAKE_CURL,
    FAKE_PROBE,
    HEALTH,
    RECORDER,
    burst_user_data,
)

REPO = Path(__file__).resolve().parents[3]
REGION = "us-east-1"
SECRET_ARN = "arn:aws:secretsmanager:us-east-1:123456789012:secret:slurm-munge-key-AbCdEf"
PARAM_ARN = "arn:aws:ssm:us-east-1:123456789012:parameter/coreburst/burst/slurm/conf-server"
CONF_SERVER = "slurmctld.example.internal:6817"  # Pulumi.burst.yaml's node.confServer
NODE = "od-1"
KEY = bytes((i * 53 + 7) % 256 for i in range(1024))  # made up: 1024 bytes, as mungekey writes

# MADE UP BY US: systemctl(1) for the user data, recording each call. `restart slurmd` reads this
# Debian's own slurmd.service and the drop-ins in /etc/systemd/system/slurmd.service.d as
# systemd.unit(5) says (drop-ins after the unit, in name order; ConditionPathExists= with an
# empty value resets the conditions; "!" negates) and, as systemd does, starts nothing and exits
# 0 when a condition fails; else it records the start with the real slurmd's version.
FAKE_SYSTEMCTL = (
    RECORDER
    + r"""[ "$*" = "restart slurmd" ] || exit 0
for unit in /etc/systemd/system/slurmd.service /lib/systemd/system/slurmd.service \
    /usr/lib/systemd/system/slurmd.service; do [ -e "$unit" ] && break; done
[ -e "$unit" ] || { echo "slurmd-unit missing" >> "$FAKE_LOG"; exit 5; }
conds=$(cat "$unit" /etc/systemd/system/slurmd.service.d/*.conf 2>/dev/null | awk -F= '
  /^ConditionPathExists=/ { if ($2 == "") n = 0; else c[++n] = $2 }
  END { for (i = 1; i <= n; i++) print c[i] }')
for p in $conds; do
  case $p in '!'*) [ ! -e "${p#!}" ] ;; *) [ -e "$p" ] ;; esac || {
    echo "slurmd-unit skipped: ConditionPathExists=$p ($unit)" >> "$FAKE_LOG"; exit 0; }
done
echo "slurmd-unit started: $(slurmd -V)" >> "$FAKE_LOG"
"""
)
FAKE_APT = RECORDER + "exit 100\n"  # MADE UP BY US: apt-get must not be needed here
# In a private mount namespace: an overlay of / on a tmpfs, the user data run chrooted into it;
# what it wrote is copied out (upper/) before the namespace, and the overlay, go away.
THROWAWAY_ROOT = r"""
set -euo pipefail
t=$1; shift
# Every mount below must stay in this namespace: none may be shared with another.
! grep -q ' shared:' /proc/self/mountinfo \
  || { echo "mounts here are shared: not mounting" >&2; exit 3; }
ov=$t/ov; mkdir -p "$ov"
mount -t tmpfs tmpfs "$ov"
mkdir "$ov/u" "$ov/w" "$ov/m"
mount -t overlay overlay -o "lowerdir=/,upperdir=$ov/u,workdir=$ov/w" "$ov/m"
m=$ov/m
mount -t proc proc "$m/proc"
mount --rbind /dev "$m/dev"
mkdir -p "$m$t" && mount --bind "$t" "$m$t"
ip link set lo up
install -D -m 0755 "$t/bin/amazon-cloudwatch-agent-ctl" \
  "$m/opt/aws/amazon-cloudwatch-agent/bin/amazon-cloudwatch-agent-ctl"
install -D -m 0755 "$t/efa/fi_info" "$m/opt/amazon/efa/bin/fi_info"
rc=0
chroot "$m" /usr/bin/env -i "$@" /bin/bash "$t/user-data" > "$t/stdout" 2> "$t/stderr" || rc=$?
cp -a "$ov/u" "$t/upper"
exit $rc
"""


def _boot(tmp: Path, health: str) -> tuple[subprocess.CompletedProcess[str], list[str], Path]:
    """Run the user data once; (the run, the recorded calls, the files it wrote)."""
    if os.geteuid() != 0:
        pytest.fail("needs root (unshare, overlay mount, chroot): run it as make test-slurm does")
    script = burst_user_data(REPO / "Pulumi.burst.yaml", "od", SECRET_ARN, PARAM_ARN)
    (tmp / "user-data").write_text(script)
    fake = tmp / "fake"
    fake.mkdir()
    # The root is an overlay of / alone: what lies on other mounts (the working tree in a
    # chroot) is copied into the work directory, which is bound in.
    shutil.copytree(HEALTH / health, tmp / "health")
    (fake / "secret.b64").write_text(base64.b64encode(KEY).decode() + "\n")
    tools = {
        "curl": FAKE_CURL,
        "aws": FAKE_AWS,
        "systemctl": FAKE_SYSTEMCTL,
        "scontrol": RECORDER,
        "squeue": RECORDER,
        "apt-get": FAKE_APT,
        "amazon-cloudwatch-agent-ctl": RECORDER,
        "nvidia-smi": FAKE_PROBE.replace("$FAKE_PROBE_NAME", "nvidia-smi"),
        "dcgmi": FAKE_PROBE.replace("$FAKE_PROBE_NAME", "dcgmi-diag"),
    }
    for d, name, text in [("bin", n, t) for n, t in tools.items()] + [
        ("efa", "fi_info", FAKE_PROBE.replace("$FAKE_PROBE_NAME", "fi_info"))
    ]:
        (tmp / d).mkdir(exist_ok=True)
        (tmp / d / name).write_text(text)
        (tmp / d / name).chmod(0o755)
    log = tmp / "calls.log"
    env = {
        # cloud-init's PATH, the fakes first
        "PATH": f"{tmp}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "LANG": "C.UTF-8",
        "FAKE_LOG": str(log),
        "FAKE_DIR": str(fake),
        "FAKE_HEALTH": str(tmp / "health"),
        "FAKE_TOKEN": "AQAEAFakeToken==",
        "FAKE_IID": "i-0123456789abcdef0",
        "FAKE_TAG_KEY": "coreburst-slurm-node",
        "FAKE_TAG_AFTER": "0",
        "FAKE_NODE": NODE,
        "FAKE_PARAM": CONF_SERVER,
        "FAKE_DENY": "",
    }
    argv = ["bash", "-c", THROWAWAY_ROOT, "_", str(tmp), *(f"{k}={v}" for k, v in env.items())]
    # Mounts made private in the new namespace; in a chroot (make test-slurm's, whose
    # namespace is private already) / is no mount point and keeps its propagation.
    for propagation in ("private", "unchanged"):
        proc = subprocess.run(
            ["unshare", "--mount", "--net", "--propagation", propagation, "--", *argv],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if "cannot change root filesystem propagation" not in proc.stderr:
            break
    out = (tmp / "stdout").read_text() if (tmp / "stdout").exists() else ""
    err = (tmp / "stderr").read_text() if (tmp / "stderr").exists() else proc.stderr
    run = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    calls = log.read_text().splitlines() if log.exists() else []
    return run, calls, tmp / "upper"


# The files a run may write on the host if the throwaway root leaked.
WATCHED = [
    "/etc/default/slurmd",
    "/etc/munge/munge.key",
    "/etc/coreburst/slurm-node-name",
    "/usr/local/lib/coreburst/node-gate.py",
    "/opt/aws/amazon-cloudwatch-agent/etc/coreburst.json",
    "/etc/systemd/system/slurmd.service.d/coreburst-configless.conf",
]


def _snapshot() -> dict[str, bytes | None]:
    return {p: Path(p).read_bytes() if Path(p).is_file() else None for p in WATCHED}


def test_the_default_image_boots_to_slurmd(tmp_path: Path) -> None:
    before = _snapshot()
    run, calls, upper = _boot(tmp_path, "p5-healthy")
    assert _snapshot() == before, "the user data changed this machine"
    assert run.returncode == 0, run.stderr
    # The health gate ran with the image's own python3, no coreburst installed, and passed.
    assert "  ok   gpus: 8 GPUs at full PCIe width" in run.stdout
    assert "  ok   efa: 32 EFA devices" in run.stdout
    assert f"node-gate {NODE}: passed" in run.stdout
    assert f"coreburst: slurmd started as {NODE}" in run.stdout
    # This Debian's slurmd.service, with the user data's drop-in, starts its own slurmd.
    version = next(c for c in calls if c.startswith("slurmd-unit "))
    assert version.startswith("slurmd-unit started: "), version
    steps = [c.split(" -", 1)[0] for c in calls if not c.startswith(("curl", "aws", "slurmd-"))]
    assert steps[-6:] == [
        "systemctl daemon-reload",  # the configless drop-in
        "systemctl restart munge",
        "nvidia-smi",
        "fi_info",  # found in /opt/amazon/efa/bin
        "systemctl enable slurmd",
        "systemctl restart slurmd",
    ]
    assert not [c for c in calls if c.startswith(("apt-get", "scontrol", "dcgmi"))]
    major, minor = slurm_release()
    assert re.search(rf" {major}\.{minor:02d}\.\d+$", version), version
    assert (upper / "etc/default/slurmd").read_text() == (
        f'SLURMD_OPTIONS="-N {NODE} --conf-server {CONF_SERVER}"\n'
    )
    assert (upper / "etc/munge/munge.key").read_bytes() == KEY
    gate = (upper / "usr/local/lib/coreburst/node-gate.py").read_bytes()
    assert gate == (REPO / "coreburst/burst/node_gate.py").read_bytes()
    assert base64.b64encode(KEY).decode()[:24] not in run.stdout + run.stderr


def test_a_failing_check_stops_before_slurmd_and_says_why(tmp_path: Path) -> None:
    """The recorded H200 machine (one GPU, no libfabric) booting as a p5.48xlarge."""
    run, calls, _ = _boot(tmp_path, "recorded-h200")
    assert run.returncode == 1
    assert "  FAIL gpus: 1 GPUs, p5.48xlarge has 8" in run.stdout
    assert "  FAIL efa: fi_info not found (exit 127; is it installed on the image?)" in run.stdout
    assert f"node-gate {NODE}: FAILED: gpus: 1 GPUs, p5.48xlarge has 8" in run.stdout
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith(f"coreburst: Slurm join failed: health check failed on {NODE}")
    assert last.endswith("slurmd not started, this node does not register")
    assert not [c for c in calls if c.startswith("systemctl") and "slurmd" in c]
    # slurmctld is asked to take the node out (the job requeues, the instance is ended).
    assert [c for c in calls if c.startswith("scontrol")] == [
        f"scontrol update nodename={NODE} state=down reason=coreburst: health check failed: "
        "gpus: 1 GPUs, p5.48xlarge has 8",
        f"scontrol update nodename={NODE} state=power_down_force",
    ]
    # and which jobs were on it, whose requeue hold it lifts (none here: squeue lists none)
    assert [c for c in calls if c.startswith("squeue")] == [f"squeue -h -w {NODE} -o %A"]
