"""`coreburst burst` commands through Typer's runner: output, files, one-line errors."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from coreburst.burst.cli import app
from tests.helpers.burst import CLUSTERS, stack_map, write_stack

runner = CliRunner()


def test_slurm_conf_prints_include_gres_and_reservations(stack_dir: Path) -> None:
    out = runner.invoke(app, ["slurm-conf", "--stack", "t", "--stack-dir", str(stack_dir)])
    assert out.exit_code == 0, out.output
    assert "NodeName=od-[1-2]" in out.output and "Name=gpu Type=h100" in out.output
    assert "# ===== reservations" in out.output


def test_slurm_conf_out_writes_files_and_programs(stack_dir: Path, tmp_path: Path) -> None:
    dest = tmp_path / "etc"
    out = runner.invoke(
        app,
        [
            "slurm-conf",
            "-s",
            "t",
            "--stack-dir",
            str(stack_dir),
            "--out",
            str(dest),
            "--cli",
            "python3 -m coreburst.burst.cli",
        ],
    )
    assert out.exit_code == 0, out.output
    names = sorted(p.name for p in dest.iterdir())
    assert names == [
        "burst.conf",
        "coreburst-burst-resume",
        "coreburst-burst-resume-fail",
        "coreburst-burst-suspend",
        "gres-burst.conf",
        "reservations.sh",
    ]
    prog = dest / "coreburst-burst-resume"
    assert os.access(prog, os.X_OK)
    assert "exec python3 -m coreburst.burst.cli resume --stack t" in prog.read_text()


def test_bad_stack_is_one_line_exit_2(tmp_path: Path) -> None:
    write_stack(tmp_path, "bad", stack_map(CLUSTERS[:1], {"maxTime": "forever"}))
    for args in (
        ["slurm-conf", "-s", "bad"],
        ["resume", "od-1", "-s", "bad"],
        ["slurm-conf", "-s", "missing"],
    ):
        out = runner.invoke(app, [*args, "--stack-dir", str(tmp_path)])
        assert out.exit_code == 2
        assert out.output.count("\n") == 1 and out.output.startswith("error: ")


def test_resume_bad_hostlist_exit_2(stack_dir: Path) -> None:
    out = runner.invoke(app, ["resume", "od-[1-", "-s", "t", "--stack-dir", str(stack_dir)])
    assert out.exit_code == 2 and "hostlist" in out.output
    assert "resume.rejected" in (stack_dir / "a.jsonl").read_text()


def test_unwritable_log_is_exit_2(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    write_stack(
        tmp_path, "x", stack_map(CLUSTERS[:1], {"logFile": str(tmp_path / "file" / "p.log")})
    )
    out = runner.invoke(app, ["suspend", "od-1", "-s", "x", "--stack-dir", str(tmp_path)])
    assert out.exit_code == 2 and "cannot write the burst logs" in out.output


def test_slurm_conf_writes_private_data_cloud_only_for_a_release_that_needs_it(
    stack_dir: Path,
) -> None:
    """``PrivateData=cloud`` replaces the site's PrivateData (slurm.conf keeps the last value);
    22.05 needs it to list powered-down cloud nodes, 23.02 on shows them by default (Slurm's
    RELEASE_NOTES at tag slurm-23-02-7-1) and prints ``PrivateData = none`` for it."""

    def rendered(*extra: str) -> list[str]:
        out = runner.invoke(
            app, ["slurm-conf", "--stack", "t", "--stack-dir", str(stack_dir), *extra]
        )
        assert out.exit_code == 0, out.output
        return [ln for ln in out.output.splitlines() if ln.startswith("PrivateData")]

    assert rendered("--slurm-release", "22.05") == ["PrivateData=cloud"]
    assert rendered("--slurm-release", "24.11") == []
    assert rendered("--slurm-release", "slurm-wlm 26.05.5") == []


def test_slurm_conf_refuses_a_release_that_is_not_one(stack_dir: Path, tmp_path: Path) -> None:
    dest = tmp_path / "etc"
    for bad in ("latest", "2.x", "5.04"):
        out = runner.invoke(
            app,
            ["slurm-conf", "-s", "t", "--stack-dir", str(stack_dir), "--out", str(dest),
             "--slurm-release", bad],
        )  # fmt: skip
        assert out.exit_code == 2
        assert out.output.strip() == (
            f"error: --slurm-release {bad!r}: not a Slurm release; e.g. 24.11"
        )
    assert not dest.exists()


def test_slurm_conf_without_slurm_here_renders_for_current_releases_and_says_so(
    stack_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    out = runner.invoke(app, ["slurm-conf", "--stack", "t", "--stack-dir", str(stack_dir)])
    assert out.exit_code == 0, out.output
    assert "warning: no Slurm here to tell the controller's release" in out.output
    assert "\nPrivateData=" not in out.output
