"""The one Slurm command runner (coreburst.common.slurmcmd): each way a command can fail is
one line that names it, and the tool, SLURM_CONF and environment are the ones asked for."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from coreburst.common.slurmcmd import SlurmError, SlurmTools, call, run_tool


def _tool(bin_dir: Path, name: str, body: str) -> None:
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
    (bin_dir / name).chmod(0o755)


def test_each_failure_is_one_line_naming_the_command(tmp_path: Path) -> None:
    _tool(tmp_path, "slow", "sleep 5")
    _tool(tmp_path, "fails", "echo 'first' >&2; echo 'fatal: Unable to contact' >&2; exit 2")
    _tool(tmp_path, "latin1", r"printf 'caf\351\n'")
    (tmp_path / "noexec").write_text("")
    cases = [
        ("nowhere", (), "not found: install slurm-client"),
        ("slow", ("-o", "show", "nodes", "x"), "slow -o show nodes timed out after 0.3s"),
        ("fails", ("a",), "fails a failed (2): first fatal: Unable to contact"),
        ("latin1", (), "latin1 printed bytes that are not UTF-8 (at byte 3)"),
        ("noexec", (), "noexec: Permission denied"),
    ]
    for tool, args, said in cases:
        with pytest.raises(SlurmError) as err:
            run_tool(tool, *args, bin_dir=tmp_path, timeout_s=0.3)
        assert said in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_a_long_stderr_keeps_its_end() -> None:
    done = call("sh", "-c", "printf 'x%.0s' $(seq 1 500) >&2; echo ' the fatal' >&2; exit 1")
    assert done.said.endswith("x the fatal") and len(done.said) == 303
    with pytest.raises(SlurmError, match=r"failed \(1\): \.\.\.x+ the fatal$"):
        done.check()


def test_conf_and_env_reach_the_tool_and_the_runner_can_be_played(tmp_path: Path) -> None:
    seen: list[tuple[list[str], dict[str, str]]] = []

    def fake(argv: list[str], **kw: Any) -> subprocess.CompletedProcess[bytes]:
        seen.append((argv, kw["env"]))
        return subprocess.CompletedProcess(argv, 0, b"ok\n", b"")

    got = run_tool(
        "sacct", "--json", bin_dir=tmp_path, conf=tmp_path / "slurm.conf", env={"TZ": "UTC"},
        run=fake,
    )  # fmt: skip
    assert got == "ok\n"
    assert seen == [
        (
            [str(tmp_path / "sacct"), "--json"],
            {"TZ": "UTC", "SLURM_CONF": str(tmp_path / "slurm.conf")},
        )
    ]


def test_slurm_tools_tell_the_daemon_setting_for_a_missing_tool(tmp_path: Path) -> None:
    with pytest.raises(SlurmError, match=r"not found: install slurm-client or set slurm_bin_dir$"):
        SlurmTools(tmp_path).squeue("-h")
    _tool(tmp_path, "scontrol", 'echo "$SLURM_CONF $*"')
    conf = tmp_path / "slurm.conf"
    assert SlurmTools(tmp_path, conf).scontrol("-o", "show") == f"{conf} -o show\n"
