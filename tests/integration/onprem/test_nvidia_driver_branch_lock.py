"""nvidia_driver / nvidia_fabricmanager lock a driver branch, not one build; real apt decides.

NVIDIA's driver installation guide, "Version locking"
(https://docs.nvidia.com/datacenter/tesla/driver-installation-guide/version-locking.html):
where a repository carries several branches, lock onto one with the distribution's mechanism,
for APT an apt_preferences(5) pin on "<branch>.*" for every package held. Archives keep only
recent builds, so the old exact pin (``pkg=550.90.07-*``) stops installing when they move.

The repository is a local stand-in (conftest.py): made-up builds 550.127.05 and 550.144.03 of
the branch and 560.35.03 of the next one, under the role's package names. Package names that do
not carry the branch (cuda-drivers; from 590 on, every Ubuntu driver package, per the guide's
"Recent updates") are the case where a newer branch shares the name; the pin covers both.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.apt_sandbox import AptRepo, AptSandbox, build_deb, run_role

pytestmark = pytest.mark.integration

DRIVER = [
    "nvidia-driver-550-server",
    "nvidia-utils-550-server",
    "nvidia-compute-utils-550-server",
    "libnvidia-compute-550-server",
]
FM = "nvidia-fabricmanager-550"
OLD, NEW, NEXT_BRANCH = "550.127.05-0ubuntu1", "550.144.03-0ubuntu1", "560.35.03-0ubuntu1"


def _vars(box: AptSandbox, repo: AptRepo) -> dict[str, Any]:
    return {
        "coreburst_root": str(box.root),
        "coreburst_manage_system": True,
        "coreburst_driver_branch": "550",
        "coreburst_driver_version": "550.90.07",
        "coreburst_nvswitch": True,
        "nvidia_driver_repo_url": repo.url,
        "nvidia_driver_key_url": repo.url + "keys/cuda.asc",
        # Real services are not ours to start on the test machine.
        "nvidia_driver_persistenced_enabled": False,
    }


def _fake_fabricmanager(bindir: Path, version: str) -> dict[str, str]:
    """nv-fabricmanager stand-in printing the documented --version line (made up)."""
    bindir.mkdir(parents=True, exist_ok=True)
    probe = bindir / "nv-fabricmanager"
    probe.write_text(f"#!/bin/sh\necho 'Fabric Manager version is : {version}'\n")
    probe.chmod(0o755)
    return {"PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}"}


def test_branch_lock_takes_newest_build_of_the_branch_and_survives_the_archive_moving(
    tmp_path: Path, sandbox: AptSandbox, repo: AptRepo
) -> None:
    for version in (OLD, NEW, NEXT_BRANCH):
        for name in [*DRIVER, FM]:
            build_deb(repo.path, name, version)
    repo.publish()
    repo.key.export_armored(repo.path / "keys" / "cuda.asc")

    env = {**sandbox.env, **_fake_fabricmanager(tmp_path / "bin", "550.144.03")}
    out = run_role(
        ["nvidia_driver", "nvidia_fabricmanager"],
        tmp_path,
        _vars(sandbox, repo),
        env=env,
        skip_tags="services",
    )
    assert out.returncode == 0, out.stdout + out.stderr
    for name in DRIVER:
        assert sandbox.installed(name) == NEW, name
        assert sandbox.candidate(name) == NEW, name
    # Fabric manager lands at the driver's build, not at 560 and not at the configured 550.90.07.
    assert sandbox.installed(FM) == NEW

    prefs = sandbox.root / "etc/apt/preferences.d/coreburst-nvidia-driver"
    assert "Pin: version 550.*" in prefs.read_text()
    # The pin is what holds the branch: without it apt's candidate is the next branch.
    saved = prefs.read_text()
    prefs.unlink()
    assert sandbox.candidate(DRIVER[0]) == NEXT_BRANCH
    prefs.write_text(saved)

    # The archive moves: 550.127.05 is gone. The old exact pin no longer installs...
    for deb in repo.path.glob(f"*_{OLD}_all.deb"):
        deb.unlink()
    repo.publish()
    fresh = AptSandbox(tmp_path / "fresh-node")
    fresh.check()
    (fresh.root / "etc/apt/sources.list.d/stand-in.list").write_text(
        f"deb [signed-by={repo.path / 'keys' / 'cuda.asc'}] {repo.url} /\n"
    )
    assert fresh.run("apt-get", "update").returncode == 0
    old_way = fresh.run("apt-get", "install", "-s", f"{DRIVER[0]}={OLD.partition('-')[0]}-*")
    assert old_way.returncode == 100, old_way.stdout + old_way.stderr
    assert "not found" in old_way.stderr

    # ...while the branch lock installs a fresh node from what the archive has now.
    (fresh.root / "etc/apt/sources.list.d/stand-in.list").unlink()
    out = run_role(
        ["nvidia_driver", "nvidia_fabricmanager"],
        tmp_path,
        _vars(fresh, repo),
        env={**fresh.env, **_fake_fabricmanager(tmp_path / "bin", "550.144.03")},
        skip_tags="services",
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert [fresh.installed(n) for n in [*DRIVER, FM]] == [NEW] * 5


def test_fabricmanager_mismatch_fails_the_play(
    tmp_path: Path, sandbox: AptSandbox, repo: AptRepo
) -> None:
    for name in [*DRIVER, FM]:
        build_deb(repo.path, name, NEW)
    repo.publish()
    repo.key.export_armored(repo.path / "keys" / "cuda.asc")
    # A node whose fabric manager reports another build than the driver it was installed for.
    env = {**sandbox.env, **_fake_fabricmanager(tmp_path / "bin", "550.127.05")}
    out = run_role(
        ["nvidia_driver", "nvidia_fabricmanager"],
        tmp_path,
        _vars(sandbox, repo),
        env=env,
        skip_tags="services",
    )
    assert out.returncode != 0
    assert "nv-fabricmanager: version is 550.127.05, expected 550.144.03" in out.stdout
