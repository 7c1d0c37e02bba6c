"""Bad input to `coreburst burst` is one line naming what is wrong and how to fix it, exit 2,
no traceback, nothing done. The power programs also write it to their log file
(``coreburst:burst.logFile``): slurmctld keeps none of their output."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from coreburst.burst.cli import app
from tests import cli_runner
from tests.helpers.burst import CLUSTERS, stack_map, write_stack

REPO = Path(__file__).resolve().parents[3]
runner = CliRunner()


def _one_line(text: str) -> str:
    assert text.count("\n") == 1 and text.startswith("error: "), text
    assert "Traceback" not in text and "Logging error" not in text
    return text.removeprefix("error: ").rstrip("\n")


@pytest.mark.parametrize(
    ("value", "needle"),
    [("dgx[01-", "'[' without ']'"), ("dgx[4-1]", "runs backwards"), ("a,,b", "empty name")],
)
def test_bad_core_nodes_fail_slurm_conf_before_anything_is_written(
    tmp_path: Path, value: str, needle: str
) -> None:
    """A coreNodes that is no hostlist was rendered as ``SuspendExcNodes=dgx[01-`` (exit 0);
    it now fails when the stack is read, naming the key, the value and the fix."""
    write_stack(tmp_path, "bad", stack_map(CLUSTERS[:1], {"coreNodes": value}))
    out_dir = tmp_path / "etc"
    for extra in ([], ["--out", str(out_dir)]):
        out = runner.invoke(app, ["slurm-conf", "-s", "bad", "--stack-dir", str(tmp_path), *extra])
        assert out.exit_code == 2
        line = _one_line(out.output)
        assert line.startswith(f"coreburst:burst.coreNodes: {value!r}")
        assert needle in line and "Slurm hostlist such as dgx[01-16]" in line
    assert not out_dir.exists()


def test_good_core_nodes_still_render(tmp_path: Path) -> None:
    write_stack(tmp_path, "ok", stack_map(CLUSTERS[:1], {"coreNodes": "dgx[01-04],login1"}))
    out = runner.invoke(app, ["slurm-conf", "-s", "ok", "--stack-dir", str(tmp_path)])
    assert out.exit_code == 0, out.output
    assert "SuspendExcNodes=dgx[01-04],login1\n" in out.output


@pytest.fixture
def lab(tmp_path: Path) -> Path:
    write_stack(
        tmp_path,
        "t",
        stack_map(
            CLUSTERS[:2],
            {"logFile": str(tmp_path / "p.log"), "auditLog": str(tmp_path / "a.jsonl")},
        ),
    )
    return tmp_path


def _program(lab: Path, argv: list[bytes], env: dict[bytes, bytes] | None = None) -> str:
    """Run ``python -m coreburst.burst.cli`` as slurmctld would (argv as raw bytes, a C locale); any
    AWS
    call would go to a closed port and exit 1, so exit 2 also says nothing was attempted.
    Returns its one stderr line (asserted to be the only output)."""
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("AWS_", "SLURM_", "LC_", "PYTHON")) and k != "LANG"
    }
    base.update(
        {
            "LC_ALL": "C",
            "AWS_ENDPOINT_URL": "http://127.0.0.1:1",
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_MAX_ATTEMPTS": "1",
            "AWS_EC2_METADATA_DISABLED": "true",
        }
    )
    full: dict[bytes, bytes] = {os.fsencode(k): os.fsencode(v) for k, v in base.items()}
    full.update(env or {})
    stack = [b"--stack", b"t", b"--stack-dir", os.fsencode(lab)]
    proc = cli_runner.run(  # a process of its own, forked by a server started in a C locale
        [os.fsencode(sys.executable), b"-m", b"coreburst.burst.cli", *argv, *stack],
        cwd=REPO,
        env=full,
        capture_output=True,
        timeout=60,
        check=False,
    )
    stderr = proc.stderr.decode("utf-8")  # escaped: the line itself is valid UTF-8
    assert proc.returncode == 2, stderr
    assert proc.stdout == b""
    return _one_line(stderr)


@pytest.mark.parametrize("program", ["resume", "suspend", "resume-fail"])
def test_hostlist_that_is_not_utf8_is_one_line_and_logged(lab: Path, program: str) -> None:
    """``resume $'od-\\xff'``: was a ``--- Logging error ---`` traceback on stderr and no log
    line; now the bytes are shown escaped, on stderr and in burst-power.log."""
    line = _program(lab, [program.encode(), b"od-\xff"])
    assert "'od-\\xff' is not UTF-8" in line and "e.g. p5-[1-4]" in line
    log = (lab / "p.log").read_text(encoding="utf-8")
    assert f"ERROR {program} od-\\xff: {line}\n" in log
    events = [json.loads(x) for x in (lab / "a.jsonl").read_text().splitlines()]
    assert events == [
        {
            "ts": events[0]["ts"],
            "event": f"{program}.rejected",
            "hostlist": "od-\\xff",
            "error": line,
        }
    ]


def test_resume_file_path_that_is_not_utf8_is_one_line_and_logged(lab: Path) -> None:
    line = _program(lab, [b"resume", b"od-1"], {b"SLURM_RESUME_FILE": b"/nonexistent/\xfe.json"})
    assert line == (
        "SLURM_RESUME_FILE /nonexistent/\\xfe.json: cannot read (No such file or directory)"
    )
    assert line in (lab / "p.log").read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("program", "hostlist", "resume_file", "needle"),
    [
        ("suspend", "zz-1", None, "zz-1 not burst nodes of this stack (its nodes: od-[1-2],sp-"),
        ("resume-fail", "od-[1-", None, "hostlist: 'od-[1-': '[' without ']'"),
        ("resume", "od-9", None, "od-9 not burst nodes of this stack"),
        ("resume", "od-1", "{not json", "SLURM_RESUME_FILE "),
        ("resume", "od-1", '{"jobs": [{"job_id": 1}]}', "jobs[0] needs job_id and nodes"),
        ("resume", "od-1", '{"jobs": [{"job_id": 1, "nodes": "od-[1"}]}', "jobs[0].nodes"),
    ],
)
def test_every_rejection_reaches_the_log_file(
    lab: Path, program: str, hostlist: str, resume_file: str | None, needle: str
) -> None:
    env = {}
    if resume_file is not None:
        (lab / "r.json").write_text(resume_file)
        env["SLURM_RESUME_FILE"] = str(lab / "r.json")
    out = runner.invoke(app, [program, hostlist, "-s", "t", "--stack-dir", str(lab)], env=env)
    assert out.exit_code == 2
    line = _one_line(out.output)
    assert needle in line
    assert f"ERROR {program} {hostlist}: {line}\n" in (lab / "p.log").read_text()
    (event,) = [json.loads(x) for x in (lab / "a.jsonl").read_text().splitlines()]
    assert event["event"] == f"{program}.rejected" and event["error"] == line
