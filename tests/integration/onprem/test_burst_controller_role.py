"""The slurm_burst_controller role against a temporary controller tree (issue 15, item 5).

Real: ``coreburst burst slurm-conf`` renders the fragments from a stack file; ansible-playbook
runs the role on localhost (lineinfile, blockinfile, copy, template); ansible-lint (production
profile) lints it. Made up by us: the controller's slurm.conf and gres.conf (a few lines in
slurm.conf(5) / gres.conf(5) syntax) and ``scontrol`` (a recorder standing in for
``scontrol reconfigure``, which scontrol(1) documents as "Instruct all Slurm daemons to re-read
the configuration file"). ``Include`` is slurm.conf(5)'s: "If a line begins with the word
Include followed by whitespace and then a file name, that file will be included inline".
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers.apt_sandbox import ANSIBLE, BIN, MODULE_PYTHON, run_role

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
STACK = "lab"
SLURM_CONF = "ClusterName=core\nSlurmctldHost=slurm-ctl-01\nNodeName=dgx[01-04] CPUs=224\n"
GRES_CONF = "NodeName=dgx[01-04] Name=gpu Type=h100 File=/dev/nvidia[0-7]\n"


def _stack_file(where: Path) -> Path:
    """A burst stack (keys of infra/config.py and coreburst/burst/config.py), made up here."""
    config = {
        "aws:region": "us-east-1",
        "coreburst:availabilityZone": "us-east-1a",
        "coreburst:tags": {
            "team": "ml",
            "project": "llm",
            "costCenter": "cc-1",
            "environment": "dev",
        },
        "coreburst:budget": {"monthlyUsd": 100000},
        "coreburst:clusters": [
            {"name": "p5", "instanceType": "p5.48xlarge", "nodes": 4, "capacity": {"model": "spot"}}
        ],
        "coreburst:burst": {"coreNodes": "dgx[01-04]"},
    }
    path = where / f"Pulumi.{STACK}.yaml"
    path.write_text(yaml.safe_dump({"config": config}))
    return path


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Rendered once for the module: the role only reads them (checked at teardown)."""
    tmp_path = tmp_path_factory.mktemp("burst-render")
    stack_dir = tmp_path / "stacks"
    stack_dir.mkdir()
    _stack_file(stack_dir)
    out = tmp_path / "rendered"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "coreburst",
            "burst",
            "slurm-conf",
            "--stack",
            STACK,
            "--stack-dir",
            str(stack_dir),
            "--out",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    before = _tree(out)
    yield out
    assert _tree(out) == before, "a test changed the shared rendered fragments"


@pytest.fixture
def controller(tmp_path: Path) -> Path:
    root = tmp_path / "controller"
    (root / "etc/slurm").mkdir(parents=True)
    (root / "etc/slurm/slurm.conf").write_text(SLURM_CONF)
    (root / "etc/slurm/gres.conf").write_text(GRES_CONF)
    return root


def _vars(tmp_path: Path, rendered: Path, controller: Path, **extra: Any) -> dict[str, Any]:
    scontrol = tmp_path / "scontrol"
    scontrol.write_text(
        f'#!/bin/sh\n# made up: records the call\necho "$*" >> {tmp_path}/scontrol.log\n'
    )
    scontrol.chmod(0o755)
    return {
        "coreburst_root": str(controller),
        "coreburst_manage_system": False,
        "slurm_burst_controller_src": str(rendered),
        "slurm_burst_controller_stack": STACK,
        "slurm_burst_controller_region": "us-east-1",
        "slurm_burst_controller_reconfigure": True,
        "slurm_burst_controller_reconfigure_command": [str(scontrol), "reconfigure"],
        **extra,
    }


def _recap(out: str) -> dict[str, int]:
    m = re.search(
        r"localhost\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", out
    )
    assert m, out
    return dict(zip(("ok", "changed", "unreachable", "failed"), map(int, m.groups()), strict=True))


def _tree(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def _scontrol_calls(tmp_path: Path) -> list[str]:
    log = tmp_path / "scontrol.log"
    return log.read_text().splitlines() if log.exists() else []


def test_role_installs_once_and_second_run_changes_nothing(
    tmp_path: Path, rendered: Path, controller: Path
) -> None:
    extravars = _vars(tmp_path, rendered, controller)
    first = run_role("slurm_burst_controller", tmp_path, extravars)
    assert first.returncode == 0, first.stdout + first.stderr
    assert _recap(first.stdout)["changed"] > 0
    assert _scontrol_calls(tmp_path) == ["reconfigure"]  # the handler, once

    slurm_conf = (controller / "etc/slurm/slurm.conf").read_text()
    assert slurm_conf == SLURM_CONF + "Include burst.conf\n"
    # burst.conf next to slurm.conf, byte for byte what the renderer wrote.
    assert (controller / "etc/slurm/burst.conf").read_bytes() == (
        rendered / "burst.conf"
    ).read_bytes()
    gres = (controller / "etc/slurm/gres.conf").read_text()
    assert gres.startswith(GRES_CONF)
    assert "NodeName=p5-[1-4] Name=gpu Type=h100 File=/dev/nvidia[0-7]" in gres
    assert gres.count("# BEGIN coreburst burst nodes") == 1
    # The programs at the paths burst.conf names, executable.
    for name in (
        "coreburst-burst-resume",
        "coreburst-burst-suspend",
        "coreburst-burst-resume-fail",
    ):
        prog = controller / "usr/local/sbin" / name
        assert prog.read_bytes() == (rendered / name).read_bytes()
        assert stat.S_IMODE(prog.stat().st_mode) == 0o755
    burst_conf = (controller / "etc/slurm/burst.conf").read_text()
    assert "ResumeProgram=/usr/local/sbin/coreburst-burst-resume\n" in burst_conf
    env = controller / "etc/coreburst/burst.env"
    text = env.read_text()
    assert "export AWS_REGION=us-east-1\n" in text and f"export COREBURST_STACK={STACK}\n" in text
    assert "AWS_SECRET_ACCESS_KEY" not in text and "AWS_ACCESS_KEY_ID" not in text
    assert stat.S_IMODE(env.stat().st_mode) == 0o640
    # The env file is valid sh: source it and read the region back.
    r = subprocess.run(
        ["sh", "-c", f". {env} && echo $AWS_REGION $AWS_DEFAULT_REGION"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert r.stdout.split() == ["us-east-1", "us-east-1"]
    assert (controller / "var/log/coreburst").is_dir()
    state = controller / "var/lib/coreburst"  # the spend gate writes its commitments here
    assert state.is_dir() and stat.S_IMODE(state.stat().st_mode) == 0o2770

    second = run_role("slurm_burst_controller", tmp_path, extravars)
    assert second.returncode == 0, second.stdout + second.stderr
    assert _recap(second.stdout)["changed"] == 0, second.stdout
    assert (controller / "etc/slurm/slurm.conf").read_text().count("Include burst.conf") == 1
    assert _scontrol_calls(tmp_path) == ["reconfigure"]  # not again


def test_an_existing_include_is_kept_not_doubled(
    tmp_path: Path, rendered: Path, controller: Path
) -> None:
    conf = controller / "etc/slurm/slurm.conf"
    conf.write_text(SLURM_CONF + "Include /etc/slurm/burst.conf\nPartitionName=core Nodes=ALL\n")
    r = run_role("slurm_burst_controller", tmp_path, _vars(tmp_path, rendered, controller))
    assert r.returncode == 0, r.stdout + r.stderr
    lines = conf.read_text().splitlines()
    assert [x for x in lines if "burst.conf" in x] == ["Include burst.conf"]
    assert lines[-1] == "PartitionName=core Nodes=ALL"  # replaced in place


def _run_check(workdir: Path, extravars: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    playbook = workdir / "play-check.yml"
    playbook.write_text(
        "- hosts: all\n  gather_facts: false\n  roles:\n    - slurm_burst_controller\n"
    )
    varsfile = workdir / "vars-check.json"
    varsfile.write_text(
        json.dumps(
            {
                "ansible_connection": "local",
                "ansible_python_interpreter": MODULE_PYTHON,
                "coreburst_become": False,
                **extravars,
            }
        )
    )
    env = {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "ANSIBLE_CONFIG": str(ANSIBLE / "ansible.cfg"),
        "ANSIBLE_ROLES_PATH": str(ANSIBLE / "roles"),
        "ANSIBLE_LOCAL_TEMP": str(workdir / ".ansible-tmp"),
        "ANSIBLE_NOCOLOR": "1",
    }
    cmd = [str(BIN / "ansible-playbook"), "-i", "localhost,", "-e", f"@{varsfile}"]
    return subprocess.run(
        [*cmd, "--check", "--diff", str(playbook)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )


def test_check_mode_writes_nothing(tmp_path: Path, rendered: Path, controller: Path) -> None:
    before = _tree(controller)
    r = _run_check(tmp_path, _vars(tmp_path, rendered, controller))
    assert r.returncode == 0, r.stdout + r.stderr
    assert _recap(r.stdout)["changed"] > 0  # it reports what it would do ...
    assert "+Include burst.conf" in r.stdout
    assert _tree(controller) == before  # ... and does none of it
    assert not (controller / "usr").exists() and not (controller / "var").exists()
    assert _scontrol_calls(tmp_path) == []


def test_refuses_programs_rendered_for_another_stack(
    tmp_path: Path, rendered: Path, controller: Path
) -> None:
    before = _tree(controller)
    r = run_role(
        "slurm_burst_controller",
        tmp_path,
        _vars(tmp_path, rendered, controller, slurm_burst_controller_stack="prod"),
    )
    assert r.returncode != 0
    assert f"was rendered for stack {STACK}, not prod" in r.stdout
    assert _tree(controller) == before


def test_refuses_a_credentials_file_others_can_read(
    tmp_path: Path, rendered: Path, controller: Path
) -> None:
    creds = controller / "etc/coreburst/aws-credentials"
    creds.parent.mkdir(parents=True)
    creds.write_text("[default]\n")  # made up; no key material
    creds.chmod(0o644)
    extravars = _vars(
        tmp_path,
        rendered,
        controller,
        slurm_burst_controller_aws_shared_credentials_file="/etc/coreburst/aws-credentials",
    )
    r = run_role("slurm_burst_controller", tmp_path, extravars)
    assert r.returncode != 0 and "readable by it alone (chmod 0600)" in r.stdout
    creds.chmod(0o600)
    r = run_role("slurm_burst_controller", tmp_path, extravars)
    assert r.returncode == 0, r.stdout + r.stderr
    env = (controller / "etc/coreburst/burst.env").read_text()
    assert "export AWS_SHARED_CREDENTIALS_FILE=/etc/coreburst/aws-credentials\n" in env


def test_playbook_syntax_and_ansible_lint() -> None:
    env = {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "ANSIBLE_CONFIG": str(ANSIBLE / "ansible.cfg"),
        "NO_COLOR": "1",
    }
    run = {"cwd": ROOT, "env": env, "capture_output": True, "text": True, "timeout": 240}
    r = subprocess.run(
        [str(BIN / "ansible-playbook"), "--syntax-check", str(ANSIBLE / "burst_controller.yml")],
        check=False,
        **run,  # type: ignore[arg-type]
    )
    assert r.returncode == 0, r.stdout + r.stderr
    r = subprocess.run(
        [
            str(BIN / "ansible-lint"),
            "-c",
            str(ANSIBLE / ".ansible-lint"),
            "--offline",
            "--profile",
            "production",
            "--project-dir",
            str(ANSIBLE),
            str(ANSIBLE / "burst_controller.yml"),
            str(ANSIBLE / "roles/slurm_burst_controller"),
        ],
        check=False,
        **run,  # type: ignore[arg-type]
    )
    assert r.returncode == 0, r.stdout + r.stderr


def test_the_documented_inventory_matches_the_controller_play() -> None:
    """docs/burst.md's command names ansible/inventory.example.ini; its play targets the group
    slurm_controller. An inventory without it matched no hosts and exited 0 (issue 32)."""
    docs = (ROOT / "docs" / "burst.md").read_text(encoding="utf-8")
    (command,) = [ln for ln in docs.splitlines() if ln.startswith("ansible-playbook ")]
    argv = command.rstrip("\\").split()
    assert argv[1:4] == ["-i", "ansible/inventory.example.ini", "ansible/burst_controller.yml"]
    env = {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "ANSIBLE_CONFIG": str(ANSIBLE / "ansible.cfg"),
        "NO_COLOR": "1",
    }
    r = subprocess.run(
        [str(BIN / "ansible-playbook"), *argv[1:4], "--list-hosts"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.search(r"hosts \(1\):\s+slurm-ctl-01", r.stdout), r.stdout
