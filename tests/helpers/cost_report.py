"""``coreburst cost report`` on the recorded 22.05 lab: its saved ``sacct --json``
(tests/fixtures/slurm/sacct-fixtures.md), its window, and ``scontrol``/``sacctmgr`` stand-ins on
PATH that print the recorded node list and the node events. The events are **made up** in the
recorded layout (sacctmgr-events-22.05-recorded.txt) at the recorded jobs' times: the cluster's
records start at 01:06:40, core2 drained a minute."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from coreburst.sandbox.slurmlab import STACK_YAML

REPO = Path(__file__).resolve().parents[2]
COST_TESTS = REPO / "tests" / "unit" / "cost"
SACCT = REPO / "tests" / "fixtures" / "slurm" / "sacct-22.05-recorded.json"
WINDOW = ["--since", "2026-12-04T01:00", "--until", "2026-12-04T02:00"]
NODES = COST_TESTS / "scontrol-show-node-22.05-recorded.txt"
EVENTS = (
    "burstlab||1796346400|Unknown||Cluster|Cluster Registered TRES\n"
    "burstlab|core2|1796346500|1796346560|DRAIN|Node|fan swap\n"
    "burstlab|od-1|1796346400|1796346527|IDLE~|Node|Powered down\n"
)


@pytest.fixture(autouse=True, name="slurm_bin")
def slurm_bin_fixture(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """scontrol (22.05: refuses --json) and sacctmgr stand-ins first on PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (tmp_path / "events.txt").write_text(EVENTS)
    scripts = {
        "scontrol": '[ "$1" = --json ] && { echo "scontrol: unrecognized option \'--json\'" >&2;'
        f' exit 1; }}\ncat "${{FAKE_NODES:-{NODES}}}"\n',
        "sacctmgr": f'cat "${{FAKE_EVENTS:-{tmp_path / "events.txt"}}}"\n',
    }
    for name, body in scripts.items():
        (bin_dir / name).write_text("#!/bin/sh\n" + body)
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    return bin_dir


@pytest.fixture(name="stack_dir")
def stack_dir_fixture(tmp_path: Path) -> Path:
    text = STACK_YAML.format(
        lab=tmp_path, burst_port_base=30000, suspend_time=4, resume_timeout=40, suspend_timeout=4
    )
    (tmp_path / "Pulumi.lab.yaml").write_text(text)
    return tmp_path
