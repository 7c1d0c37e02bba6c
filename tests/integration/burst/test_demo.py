"""``coreburst burst demo`` (coreburst/sandbox/burst_demo.py) on the real lab: it shows the overflow
and
the clean-up within its two minutes, stops everything it started (also on Ctrl-C), and on a
machine without root or Slurm says so in one line with exit 2."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil  # type: ignore[import-untyped]
import pytest
import typer
from typer.testing import CliRunner

from coreburst.sandbox import burst_demo
from coreburst.sandbox.slurmlab import missing_prerequisite
from tests.helpers.prereq import require

pytestmark = pytest.mark.integration

DEMO = [sys.executable, "-m", "coreburst.sandbox.burst_demo"]


def _leftovers() -> list[str]:
    """Processes still running from a demo lab: its directory is in their command line, or,
    for a job step (slurmstepd writes its title over its command line), in the SLURM_CONF of
    its environment."""
    found = []
    for p in psutil.process_iter(["pid", "cmdline", "name"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if "coreburst-burst-demo-" in cmd:
            found.append(f"{p.info['pid']} {cmd[:120]}")
        elif p.info["name"] == "slurmstepd":
            try:
                environ = Path(f"/proc/{p.info['pid']}/environ").read_bytes()
                alive = p.status() != psutil.STATUS_ZOMBIE
            except (OSError, psutil.Error):
                continue
            if alive and b"coreburst-burst-demo-" in environ:
                found.append(f"{p.info['pid']} {cmd[:120]}")
    return found


def test_without_slurm_binaries_one_line_exit_2(tmp_path: Path) -> None:
    """An empty PATH: the real shutil.which finds no munged/slurmctld; one line, exit 2,
    naming the Debian packages."""
    out = subprocess.run(
        DEMO,
        check=False,
        env={**os.environ, "PATH": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2
    assert out.stdout == ""
    (line,) = out.stderr.strip().splitlines()
    assert "apt-get install -y slurmctld slurmd slurm-client munge" in line
    assert "munged" in line and "root" in line


def test_not_root_one_line_exit_2(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    app = typer.Typer()
    app.command()(burst_demo.demo)
    res = CliRunner().invoke(app, [])
    assert res.exit_code == 2
    (line,) = res.output.strip().splitlines()
    assert "must run as root" in line and "apt-get install" in line


def _need_lab() -> None:
    require(missing_prerequisite())


def test_demo_overflows_and_stops_everything() -> None:
    """The whole demo: every check holds, the timeline names the instance, its type and the
    CreateFleet count, it ends well inside two minutes, and no daemon of it is left."""
    _need_lab()
    t0 = time.monotonic()
    out = subprocess.run(DEMO, check=False, capture_output=True, text=True, timeout=150)
    took = time.monotonic() - t0
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert took < 120
    text = out.stdout
    assert "✗" not in text and text.count("✓") == 6
    assert re.search(r"CreateFleet → i-[0-9a-f]+ p5\.48xlarge \(on-demand\) for node od-\d", text)
    assert re.search(r"CreateFleet → i-[0-9a-f]+ p5\.48xlarge \(spot\) for node sp-1", text)
    assert re.search(r"\(od-\d\): terminated", text)
    assert "RUNNING on od-" in text and "RUNNING on sp-1" in text
    # The timeline is in seconds from the start, increasing within the poll's resolution.
    stamps = [float(m) for m in re.findall(r"^\s*(\d+\.\d)s ", text, re.M)]
    assert stamps and stamps[-1] < 120
    assert _leftovers() == []


def test_ctrl_c_stops_everything() -> None:
    """SIGINT while jobs wait for burst nodes: exit 130, and munged, slurmctld, the slurmds and
    moto are gone."""
    _need_lab()
    proc = subprocess.Popen(DEMO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen = []
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 60
        for line in proc.stdout:
            seen.append(line)
            if "submitted jobs" in line or time.monotonic() > deadline:
                break
        assert any("submitted jobs" in s for s in seen), "".join(seen)
        assert _leftovers(), "the lab should be running now"
        moto = [
            c.pid for c in psutil.Process(proc.pid).children() if "moto" in " ".join(c.cmdline())
        ]
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    assert proc.returncode == 130, "".join(seen) + rest
    assert "interrupted" in rest and "stopped" in rest
    assert _leftovers() == []
    for pid in moto:
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
