"""The wheel works outside a checkout (issue 24): built from this tree, installed into a new
virtual environment in a temporary directory, and run from a directory that holds only a
user's stack files. Nothing is downloaded: the wheel's dependencies are the ones `make setup`
installed (the dev environment's site-packages, added by a .pth line; its editable
``coreburst`` is not, since a .pth inside that directory is never read), and the wheel itself
is installed with ``--no-deps --no-index``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
PURELIB = "import sysconfig; print(sysconfig.get_paths()['purelib'])"


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The new environment's bin directory."""
    base = tmp_path_factory.mktemp("wheel")
    wheels = base / "dist"
    # A copy of the tree (tracked files only), so the build leaves nothing in the checkout.
    src = base / "src"
    files = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.split(b"\0")
    for f in filter(None, files):
        rel = Path(os.fsdecode(f))
        dest = src / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        if (ROOT / rel).is_symlink():
            dest.symlink_to(os.readlink(ROOT / rel))
        elif (ROOT / rel).is_file():
            shutil.copy2(ROOT / rel, dest)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "--wheel-dir", str(wheels), str(src)],
        check=True, capture_output=True,
    )  # fmt: skip
    (wheel,) = wheels.glob("coreburst-*.whl")
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = Path(
        subprocess.run(
            [str(venv / "bin" / "python"), "-c", PURELIB],
            capture_output=True, text=True, check=True,
        ).stdout.strip()
    )  # fmt: skip
    (site / "make-setup-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps", "--no-index",
         str(wheel)],
        check=True, capture_output=True,
    )  # fmt: skip
    yield venv / "bin"


def _run(bin_dir: Path, cwd: Path, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    env = {
        # The new environment first; then the dev one's scripts (ansible-playbook), which
        # `pip install 'coreburst[onprem]'` would have put beside `coreburst`.
        "PATH": f"{bin_dir}:{Path(sys.executable).parent}:/usr/bin:/bin",
        "HOME": str(cwd),
        "LANG": "C.UTF-8",
        "COLUMNS": "120",
    }
    out = subprocess.run(
        [str(bin_dir / "coreburst"), *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    if ok:
        assert out.returncode == 0, f"{args}: {out.stdout[-2000:]}{out.stderr[-2000:]}"
    return out


def test_the_wheel_imports_from_its_install_not_the_checkout(installed: Path) -> None:
    out = subprocess.run(
        [str(installed / "python"), "-c",
         "import coreburst, guardrails, infra, policies; "
         "print(coreburst.__file__, guardrails.__file__, infra.__file__, policies.__file__)"],
        cwd="/", capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert str(ROOT) not in out and "site-packages" in out, out
    names = subprocess.run(
        [str(installed / "python"), "-c",
         "import importlib.util as u; print([n for n in ('common', 'burst', 'tco', 'onprem', "
         "'sandbox', 'coreburst.sandbox') if u.find_spec(n)])"],
        cwd="/", capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    assert names == "[]"  # one import root; the sandbox is not in the wheel


def test_commands_run_on_a_copied_stack_directory(installed: Path, tmp_path: Path) -> None:
    """`coreburst --help`, `plan`, `tco`, `guardrails check-config`, `burst slurm-conf` and
    `onprem` in check mode, from a directory holding copies of the example files only."""
    for name in ("Pulumi.yaml", "Pulumi.dev.yaml", "Pulumi.burst.yaml"):
        shutil.copy2(ROOT / name, tmp_path / name)
    shutil.copy2(ROOT / "guardrails" / "examples" / "guardrails.yaml", tmp_path / "g.yaml")
    # The example fleet with one node run locally in check mode (the shape
    # tests/integration/onprem/test_onprem_playbooks.py uses): nothing is written.
    fleet = yaml.safe_load((ROOT / "ansible" / "fleet.example.yml").read_text())
    fleet["vars"] = {"coreburst_become": False, "coreburst_manage_system": False}
    fleet["nodes"] = [
        {
            "name": f"check-{x}",
            "groups": ["dgx_nodes", "subnet_managers"] if x == "a" else ["subnet_managers"],
            "sm_priority": prio,
            "vars": {
                "ansible_connection": "local",
                "ansible_python_interpreter": str(installed / "python"),
                "coreburst_root": str(tmp_path / "root" / x),
            },
        }
        for x, prio in (("a", 15), ("b", 14))
    ]
    (tmp_path / "fleet.yml").write_text(yaml.safe_dump(fleet))

    assert "plan" in _run(installed, tmp_path, "--help").stdout
    plan = _run(installed, tmp_path, "plan", "-s", "dev", "--format", "json")
    doc = json.loads(plan.stdout)
    assert doc["stack"] == "dev" and doc["totals"]["monthlyUsd"] > 0
    # The stack's policy config travels in the wheel: no silent run at defaults.
    assert doc["policies"]["config"].endswith("policies/config/dev.json"), doc["policies"]
    tco = _run(
        installed, tmp_path, "tco", "--gpus", "8", "--utilization", "25",
        "--utilization-basis", "measured", "--format", "json",
    )  # fmt: skip
    assert json.loads(tco.stdout)
    _run(installed, tmp_path, "guardrails", "check-config", "g.yaml")
    out = tmp_path / "slurm"
    _run(installed, tmp_path, "burst", "slurm-conf", "--stack", "burst", "--out", str(out))
    assert "SuspendExcNodes" in (out / "burst.conf").read_text()
    inv = _run(installed, tmp_path, "onprem", "render-inventory", "fleet.yml")
    assert "check-a" in inv.stdout and "check-b" in inv.stdout
    # The playbooks and roles come from the wheel.
    _run(
        installed, tmp_path, "onprem", "apply", "--fleet", "fleet.yml", "--check", "--tags", "sm",
        "--quiet",
    )  # fmt: skip
    assert not (tmp_path / "root").exists()  # check mode wrote nothing


def test_version_license_and_the_controller_install_come_from_the_wheel(
    installed: Path, tmp_path: Path
) -> None:
    """`coreburst --version` reads the wheel's metadata, which carries the license text; the
    programs `burst install` writes run the wheel's own coreburst by absolute path."""
    import tomllib

    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert _run(installed, tmp_path, "--version").stdout == f"coreburst {version}\n"
    site = Path(
        subprocess.run(
            [str(installed / "python"), "-c", PURELIB], capture_output=True, text=True, check=True
        ).stdout.strip()
    )
    (dist,) = site.glob("coreburst-*.dist-info")
    assert "Apache License" in (dist / "licenses" / "LICENSE").read_text()
    assert "License-Expression: Apache-2.0" in (dist / "METADATA").read_text()

    if os.geteuid() != 0:  # install sets owners; its own tests cover the rest
        return
    shutil.copy2(ROOT / "Pulumi.burst.yaml", tmp_path / "Pulumi.burst.yaml")
    etc = tmp_path / "etc"
    (etc / "slurm").mkdir(parents=True)
    (etc / "slurm" / "slurm.conf").write_text("ClusterName=core\n")
    out = _run(
        installed, tmp_path, "burst", "install", "--stack", "burst", "--stack-dir", str(tmp_path),
        "--slurm-conf", str(etc / "slurm" / "slurm.conf"), "--slurm-user", "root",
        "--env-file", str(etc / "coreburst" / "burst.env"),
        "--state-dir", str(tmp_path / "state"), "--slurm-release", "22.05",
        "--cli", f"{installed / 'coreburst'} burst", "--dry-run",
    )  # fmt: skip
    assert f"would write {etc}/slurm/burst.conf (0644 root:root)" in out.stdout
    # Without --cli it finds the wheel's own coreburst (beside the interpreter running it).
    probe = subprocess.run(
        [str(installed / "python"), "-c",
         "from coreburst.burst.install import cli_argv; print(cli_argv()[0])"],
        capture_output=True, text=True, check=True, cwd="/",
    ).stdout.strip()  # fmt: skip
    assert probe == str(installed / "coreburst")
