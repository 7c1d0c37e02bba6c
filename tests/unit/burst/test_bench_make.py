"""``make bench-burst`` runs the resume benchmark at both sizes issue 15 asks for (64 and 500
nodes). Checked with GNU make itself (``make -n`` prints the recipe without running it): in
``$(or $(SIZES),64,500)`` make splits on the commas, so the default was 64 alone and the
500-node figures were never printed (GNU make manual, "Functions for Conditionals": ``or``
takes each comma-separated argument; ``if``'s else-part keeps its commas)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from tests.helpers.prereq import require

REPO = Path(__file__).resolve().parents[3]


def _recipe(*args: str) -> str:
    out = subprocess.run(
        ["make", "-n", "-C", str(REPO), "bench-burst", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    (line,) = [x for x in out.splitlines() if "benchmarks/burst_resume.py" in x]
    return line


def test_bench_burst_defaults_to_64_and_500_nodes() -> None:
    if shutil.which("make") is None:
        require("GNU make is not installed")
    assert _recipe().endswith("--sizes 64,500")
    assert _recipe("SIZES=1000").endswith("--sizes 1000")


def test_bench_burst_also_times_requeue_to_running_and_replays_capacity() -> None:
    """Issue 31 item 4: ``make bench-burst`` prints requeue -> running per cause; issue 33
    item 1: and the capacity replay's holds, backoffs and waits."""
    if shutil.which("make") is None:
        require("GNU make is not installed")
    out = subprocess.run(
        ["make", "-n", "-C", str(REPO), "bench-burst"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert any(x.endswith("benchmarks/requeue_restart.py") for x in out.splitlines())
    assert any(x.endswith("benchmarks/capacity_replay.py") for x in out.splitlines())
