"""Issue 33 item 6: a power program ends before Slurm gives up on it, saying why in one line,
even against an EC2 endpoint that accepts connections and never answers (it held resume and
suspend for 362 s: 6 attempts x botocore's 60 s read timeout). Every AWS call has connect and
read timeouts and a total deadline from the stack's ResumeTimeout / SuspendTimeout
(coreburst/burst/ec2io.py ``budget``), counted from the program's start.

Short limits keep the test short: ResumeTimeout 6 s (AWS deadline 3 s), SuspendTimeout 4 s
(3.2 s). scontrol is a stand-in made up here (it records its arguments and succeeds): the
lab tests run the real one; here only the EC2 side is under test."""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import cli_runner
from tests.helpers.burst import CLUSTERS, stack_map, write_stack

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def silent_endpoint() -> Iterator[str]:
    """http://127.0.0.1:<port>: accepts every connection, reads nothing, answers nothing."""
    srv = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            held.append(conn)

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.getsockname()[1]}"
    finally:
        stop.set()
        t.join(5)
        for c in held:
            c.close()
        srv.close()


def _run(tmp_path: Path, endpoint: str, program: str) -> tuple[int, str, float, list[str]]:
    burst = {
        "logFile": str(tmp_path / "p.log"),
        "auditLog": str(tmp_path / "a.jsonl"),
        "resumeTimeout": 6,
        "suspendTimeout": 4,
    }
    write_stack(tmp_path, "t", stack_map(CLUSTERS[:1], burst))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    scontrol = bin_dir / "scontrol"
    scontrol.write_text(f'#!/bin/sh\necho "$*" >> {tmp_path / "scontrol.calls"}\n')
    scontrol.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "SLURM_", "PYTHON"))}
    env.update(
        {
            "PATH": f"{bin_dir}:{env.get('PATH', '/usr/bin:/bin')}",
            "PYTHONPATH": str(REPO),
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_EC2_METADATA_DISABLED": "true",
        }
    )
    t0 = time.monotonic()
    proc = cli_runner.run(
        [sys.executable, "-m", "coreburst.burst.cli", program, "od-1", "--stack", "t",
         "--stack-dir", str(tmp_path)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    took = time.monotonic() - t0
    calls = (tmp_path / "scontrol.calls").read_text().splitlines() if program == "resume" else []
    return proc.returncode, proc.stderr, took, calls


def test_resume_ends_before_resume_timeout_and_says_why(
    tmp_path: Path, silent_endpoint: str
) -> None:
    rc, err, took, calls = _run(tmp_path, silent_endpoint, "resume")
    assert took < 6, f"resume took {took:.1f} s, past ResumeTimeout=6 s"
    assert rc == 1 and err.count("\n") == 1 and "Traceback" not in err, err
    host = silent_endpoint.removeprefix("http://")
    assert err.startswith(f"error: resume: EC2 ({host}) gave no answer within the power ")
    assert "AWS deadline of 3 s (half of ResumeTimeout=6 s" in err
    assert "ReadTimeoutError" in err and err.rstrip().endswith("nodes failed: od-1")
    # Slurm was told: the node is DOWN with the reason, and powered down (the job requeues).
    assert "update nodename=od-1 state=down reason=(Code:DeadlineExceeded)" in calls[0]


def test_suspend_ends_before_suspend_timeout_and_says_why(
    tmp_path: Path, silent_endpoint: str
) -> None:
    rc, err, took, _ = _run(tmp_path, silent_endpoint, "suspend")
    assert took < 4, f"suspend took {took:.1f} s, past SuspendTimeout=4 s"
    assert rc == 1 and err.count("\n") == 1 and "Traceback" not in err, err
    assert "AWS deadline of 3.2 s (80% of SuspendTimeout=4 s" in err
    log = (tmp_path / "p.log").read_text()
    assert "gave no answer within the power program's AWS deadline" in log
    assert "Traceback" not in log
