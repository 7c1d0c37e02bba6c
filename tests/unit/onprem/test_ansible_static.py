"""ansible-lint (production profile, offline) and syntax checks of the playbooks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
ANSIBLE = ROOT / "ansible"
BIN = Path(sys.executable).parent


def _run(*cmd: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "ANSIBLE_CONFIG": str(ANSIBLE / "ansible.cfg"),
        "NO_COLOR": "1",
    }
    return subprocess.run(
        cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240, check=False
    )


@pytest.mark.parametrize("playbook", ["site.yml", "validate.yml"])
def test_syntax_check(playbook: str) -> None:
    r = _run(str(BIN / "ansible-playbook"), "--syntax-check", str(ANSIBLE / playbook))
    assert r.returncode == 0, r.stdout + r.stderr


def test_ansible_lint_production_profile() -> None:
    r = _run(
        str(BIN / "ansible-lint"),
        "-c",
        str(ANSIBLE / ".ansible-lint"),
        "--offline",
        "--profile",
        "production",
        "--project-dir",
        str(ANSIBLE),
        str(ANSIBLE / "site.yml"),
        str(ANSIBLE / "validate.yml"),
        str(ANSIBLE / "roles"),
    )
    assert r.returncode == 0, r.stdout + r.stderr


def test_no_package_marker_at_ansible_top() -> None:
    # ansible/__init__.py would shadow the real ansible package.
    assert not (ANSIBLE / "__init__.py").exists()


def test_every_role_has_the_standard_layout() -> None:
    for role in sorted((ANSIBLE / "roles").iterdir()):
        for part in ("defaults/main.yml", "tasks/main.yml", "meta/main.yml"):
            assert (role / part).is_file(), f"{role.name}: missing {part}"
