"""Lustre in the node boot script: EFA-enabled file systems get the client set up the way the
FSx for Lustre user guide documents, before the mount.

"Configuring EFA clients" (https://docs.aws.amazon.com/fsx/latest/LustreGuide/configure-efa-clients.html):
- Step 1: on a Deep Learning AMI the EFA driver (and Lustre client) are pre-installed (the GPU
  clusters boot the DLAMI, resolved from its SSM parameter).
- Step 2, Quick setup: ``curl -O https://docs.aws.amazon.com/fsx/latest/LustreGuide/samples/
  configure-efa-fsx-lustre-client.zip``, ``unzip configure-efa-fsx-lustre-client.zip``, ``cd
  configure-efa-fsx-lustre-client``, ``sudo ./setup.sh``; it "Configures TCP and EFA interfaces"
  and creates ``/etc/systemd/system/configure-efa-fsx-lustre-client.service`` for reboots.
- Step 3: ``sudo lnetctl net show`` views the configured interfaces; the table lists p5, p5e,
  p5en (and p6) types; trn2 is excluded ("excluding the trn2 instance family").
The shell logic is run for real with bash and unzip; only ``curl`` (the network) is replaced.
"""

from __future__ import annotations

import base64
import io
import os
import shutil
import stat
import subprocess
import zipfile
from pathlib import Path

import pytest

from infra.offline import Evaluation
from infra.userdata import EFA_LUSTRE_CLIENT_ZIP, render_user_data
from tests.helpers.prereq import require

DOC_ZIP = (
    "https://docs.aws.amazon.com/fsx/latest/LustreGuide/samples/configure-efa-fsx-lustre-client.zip"
)
SERVICE = "configure-efa-fsx-lustre-client.service"


def _script(ev: Evaluation, cluster: str) -> str:
    return base64.b64decode(ev.named(f"{cluster}-lt").inputs["userData"]).decode()


def test_documented_package_url() -> None:
    assert EFA_LUSTRE_CLIENT_ZIP == DOC_ZIP


def test_prod_p5en_configures_efa_before_mounting(prod: Evaluation) -> None:
    script = _script(prod, "train-p5en")
    steps = [
        f"curl -fsSLO {DOC_ZIP}",
        "unzip -q configure-efa-fsx-lustre-client.zip",
        "cd configure-efa-fsx-lustre-client",
        "./setup.sh",
        "lnetctl net show --net efa",
        "mount -t lustre",
    ]
    positions = [script.index(s) for s in steps]
    assert positions == sorted(positions), "documented order: download, unzip, cd, setup, mount"
    assert f"x-systemd.requires={SERVICE}" in script
    assert "@tcp:/abcdefgh" in script  # clients still name the MGS by its TCP NID
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)


def test_trn2_and_non_efa_lustre_mount_over_tcp(prod: Evaluation, dev: Evaluation) -> None:
    # trn2 is excluded by the user guide; dev's file system is not EFA-enabled.
    for script in (_script(prod, "train-trn2"), _script(dev, "dev-p5")):
        assert "setup.sh" not in script and "lnetctl" not in script
        assert "mount -t lustre" in script
        subprocess.run(["bash", "-n"], input=script, text=True, check=True)


def _efa_block(mount_point: Path) -> str:
    script = render_user_data("nvidia", "fs-1.fsx.example", "abcd", str(mount_point), True)
    start = script.index('lustre_opts="')
    end = script.index(f"mkdir -p {mount_point}")
    return "set -euo pipefail\n" + script[start:end] + 'echo "OPTS=$lustre_opts"\n'


def _fake_tools(bin_dir: Path, setup_rc: int, log: Path) -> None:
    """curl writes a package shaped like AWS's (a folder with setup.sh); lnetctl logs."""
    bin_dir.mkdir()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        info = zipfile.ZipInfo("configure-efa-fsx-lustre-client/setup.sh")
        info.external_attr = (0o755 | stat.S_IFREG) << 16
        z.writestr(info, f'#!/bin/sh\necho "setup.sh in $(pwd)" >> {log}\nexit {setup_rc}\n')
    pkg = bin_dir / "package.zip"
    pkg.write_bytes(buf.getvalue())
    curl = bin_dir / "curl"
    curl.write_text(f'#!/bin/sh\necho "curl $*" >> {log}\ncp {pkg} "$(basename "$2")"\n')
    lnetctl = bin_dir / "lnetctl"
    lnetctl.write_text(f'#!/bin/sh\necho "lnetctl $*" >> {log}\n')
    for tool in (curl, lnetctl):
        tool.chmod(0o755)


@pytest.mark.parametrize("setup_rc", [0, 1])
def test_efa_block_runs_setup_and_falls_back_to_tcp(tmp_path: Path, setup_rc: int) -> None:
    if shutil.which("unzip") is None:
        require("needs unzip (Debian package unzip)")
    log = tmp_path / "calls.log"
    _fake_tools(tmp_path / "bin", setup_rc, log)
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}"}
    out = subprocess.run(
        ["bash", "-c", _efa_block(tmp_path / "fsx")],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    calls = log.read_text().splitlines()
    assert calls[0] == f"curl -fsSLO {DOC_ZIP}"
    assert calls[1].startswith("setup.sh in ") and calls[1].endswith(
        "/configure-efa-fsx-lustre-client"
    )
    if setup_rc == 0:
        assert calls[2] == "lnetctl net show --net efa"
        assert out.stdout.strip().endswith(f"x-systemd.requires={SERVICE}")
        assert out.stderr == ""
    else:
        assert len(calls) == 2
        assert SERVICE not in out.stdout  # no boot-time dependency on a service never created
        assert "mounting over TCP" in out.stderr
