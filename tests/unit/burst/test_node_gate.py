"""The boot gate (coreburst/burst/node_gate.py): the self-contained check a burst node's user
data runs before slurmd, with the image's python3 and nothing from coreburst.

It reads the probes as ``coreburst burst node-check`` does (coreburst/burst/node_check.py,
tests/unit/burst/test_node_check.py): here both run over every recorded or synthesized output
in tests/fixtures/health (its README gives each one's source) and must give the same verdict,
line for line. The node's Python is older than this project's: the default image's family
(Deep Learning Base OSS Nvidia Driver GPU AMI, Ubuntu 22.04) lists ``python_location
/usr/bin/python3.10`` and ``dcgm_version 4.7.0`` in its release notes (seen for the ARM64
build of 2026-10-06: https://docs.amazonaws.cn/dlami/latest/devguide/
aws-deep-learning-ami-gpubaseossarm64-ul2204-2026-10-08.html; the x86_64 page was not at hand).
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from coreburst.burst import node_check, node_gate, requeue_hold

HEALTH = Path(__file__).resolve().parents[2] / "fixtures/health"
GATE = Path(node_gate.__file__)
P5 = node_check.Expect("p5.48xlarge", 8, 32)


def _gate_runner(replay: node_check.Replay) -> node_gate.Runner:
    def run(name: str, argv: Sequence[str], timeout_s: float) -> tuple[int, bytes, bytes]:
        try:
            got = replay(name, argv, timeout_s)
        except node_check.ProbeFailedError as exc:
            raise node_gate.ProbeError(str(exc)) from None
        return got.rc, got.out, got.err

    return run


def _cases(tmp: Path) -> list[tuple[str, Path]]:
    """Every replay directory: the three nodes, and p5-healthy with each bad output in place."""
    cases = [(d, HEALTH / d) for d in ("p5-healthy", "p5-dcgm-fail", "recorded-h200")]
    probes = {"nvidia-smi": "nvidia-smi", "dcgmi-diag": "dcgmi-diag", "fi_info": "fi_info"}
    for bad in sorted((HEALTH / "bad").glob("*.out")):
        probe = next((p for p in probes if bad.name.startswith(p + "-")), None)
        if probe is None:
            continue  # nccl: not a boot check (it needs the job's own peers)
        d = tmp / bad.stem
        shutil.copytree(HEALTH / "p5-healthy", d)
        shutil.copy(bad, d / f"{probe}.out")
        cases.append((f"bad/{bad.name}", d))
    return cases


def test_the_gate_judges_every_recorded_output_as_node_check_does(tmp_path: Path) -> None:
    cases = _cases(tmp_path)
    assert len(cases) == 3 + 7
    verdicts = {}
    for label, d in cases:
        replay = node_check.Replay(d)
        want = [(f.check, f.ok, f.detail) for f in node_check.run_checks(P5, replay).findings]
        got = node_gate.run_checks("p5.48xlarge", 8, 32, dcgm=True, runner=_gate_runner(replay))
        assert got == want, label
        verdicts[label] = all(ok for _, ok, _ in got)
    # Not agreement on nothing: only the healthy node passes.
    assert [k for k, ok in verdicts.items() if ok] == ["p5-healthy"]


def test_efa_zero_means_no_efa_probe_and_dcgm_is_optional() -> None:
    calls: list[str] = []

    def runner(name: str, argv: Sequence[str], timeout_s: float) -> tuple[int, bytes, bytes]:
        calls.append(name)
        return 0, (HEALTH / "p5-healthy" / f"{name}.out").read_bytes(), b""

    got = node_gate.run_checks("p5.48xlarge", 8, 0, dcgm=False, runner=runner)
    assert calls == ["nvidia-smi"]
    assert got == [("gpus", True, "8 GPUs at full PCIe width")]


def _run_gate(*args: str, path: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(GATE), *args],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        env={"PATH": path},
    )


def test_bad_usage_is_one_line_and_exit_2() -> None:
    proc = _run_gate("--instance-type", "p5.48xlarge", "--expect", "p5.48xlarge=eight")
    assert proc.returncode == 2
    assert "'p5.48xlarge=eight': give TYPE=GPUS:EFA, e.g. p5.48xlarge=8:32" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_type_the_cluster_does_not_launch_fails(tmp_path: Path) -> None:
    proc = _run_gate("--instance-type", "p4d.24xlarge", "--expect=p5.48xlarge=8:32")
    assert proc.returncode == 1
    assert "FAIL type: p4d.24xlarge is not a type this cluster launches (p5.48xlarge)" in (
        proc.stdout
    )


def test_missing_tools_fail_and_slurmctld_unreachable_is_said(tmp_path: Path) -> None:
    """No nvidia-smi, no fi_info, no scontrol on PATH: the node fails, never passes."""
    proc = _run_gate(
        "--node", "od-1", "--instance-type", "p5.48xlarge", "--expect=p5.48xlarge=8:32",
        path=str(tmp_path),
    )  # fmt: skip
    assert proc.returncode == 1
    assert "  FAIL gpus: nvidia-smi not found: is it installed on the image?" in proc.stdout
    assert "  FAIL efa: fi_info not found: is it installed on the image?" in proc.stdout
    assert "node-gate od-1: slurmctld not told (" in proc.stdout
    assert "od-1 times out at ResumeTimeout" in proc.stdout


@pytest.mark.parametrize("version", [(3, 8), (3, 10)])
def test_the_gate_is_python_3_8_and_standard_library_only(version: tuple[int, int]) -> None:
    src = GATE.read_text()
    tree = ast.parse(src, feature_version=version)
    imported = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Import):
            imported |= {a.name.split(".")[0] for a in n.names}
        elif isinstance(n, ast.ImportFrom):
            imported.add((n.module or "").split(".")[0])
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}, imported
    assert "coreburst" not in imported


# -- the requeue hold: which job the gate lifts, as requeue_hold decides on the controller ----

SLURM = Path(__file__).resolve().parents[2] / "fixtures/slurm"
RECORDED_JOBS = sorted(SLURM.glob("squeue-requeued-*-recorded.json")) + sorted(
    SLURM.glob("squeue-jobs-*-recorded.json")
)


@pytest.mark.parametrize("path", RECORDED_JOBS, ids=lambda p: p.name)
def test_the_gate_holds_as_requeue_hold_does_on_every_recorded_release(path: Path) -> None:
    """Slurm's own output of 22.05, 24.11 and 26.05 (the fixtures README): for every job,
    before-counts and clocks around its begin time, the gate's ``held`` is requeue_hold's."""
    text = path.read_text()
    views = requeue_hold.parse_jobs(text)
    jobs = node_gate.read_jobs(
        lambda argv, **kw: subprocess.CompletedProcess(argv, 0, text.encode(), b"")
    )
    assert jobs is not None and set(jobs) == set(views)
    saw_held = False
    for job, view in views.items():
        for before in (0, view.restarts - 1, view.restarts):
            for now in (0.0, float(view.eligible or 0) - 1, float(view.eligible or 0) + 1, 4e9):
                want = requeue_hold.status(view, now, before) == "held"
                assert node_gate.held(jobs[job], before, now) is want, (job, before, now)
                saw_held |= want
    if "-node-down-" in path.name:
        assert saw_held  # a job requeued by its node going DOWN, begin time ahead: held


class _Slurm:
    """Answers the gate's Slurm commands from a script; records each."""

    def __init__(self, node_jobs: str, reads: list[str]) -> None:
        self.node_jobs, self.reads, self.calls = node_jobs, reads, []

    def __call__(self, argv: list[str], **kw: object) -> subprocess.CompletedProcess[bytes]:
        self.calls.append(" ".join(argv))
        if argv[:2] == ["squeue", "-h"]:
            out = self.node_jobs
        elif argv[0] == "squeue":
            out = self.reads.pop(0) if len(self.reads) > 1 else self.reads[0]
        else:
            out = ""
        return subprocess.CompletedProcess(argv, 0, out.encode(), b"")


def _job(state: object, restarts: int, reason: str = "None") -> str:
    import json

    return json.dumps(
        {"jobs": [{"job_id": 7, "job_state": state, "restart_cnt": restarts,
                   "state_reason": reason, "eligible_time": 0}]}
    )  # fmt: skip


def test_a_failed_gate_lifts_the_hold_once_slurm_has_requeued_the_job() -> None:
    """Made up after the recorded 24.11 sequence (squeue-requeued-24.11-*: CONFIGURING, then
    PENDING+COMPLETING, then PENDING with Reason=BeginTime)."""
    slurm = _Slurm(
        "7\n",
        [
            _job(["RUNNING", "CONFIGURING"], 0),
            _job(["PENDING", "COMPLETING"], 1, "BeginTime"),
            _job(["PENDING"], 1, "BeginTime"),
        ],
    )
    said = node_gate.tell_slurm("od-1", "gpus: 1 of 8", slurm, sleep=lambda s: None)
    assert said.endswith("; requeue hold lifted on job 7"), said
    assert [c for c in slurm.calls if c.startswith("scontrol")] == [
        "scontrol update nodename=od-1 state=down reason=coreburst: health check failed: "
        "gpus: 1 of 8",
        "scontrol update nodename=od-1 state=power_down_force",
        "scontrol update jobid=7 StartTime=now",
    ]


def test_no_hold_is_lifted_blind_or_past_the_wait() -> None:
    # squeue unreadable: the node is still taken out, the hold is left to Slurm
    slurm = _Slurm("7\n", ["not json"])
    said = node_gate.tell_slurm("od-1", "efa: 0 of 32", slurm, sleep=lambda s: None)
    assert said.endswith("squeue unreadable, requeue holds left to Slurm")
    assert not [c for c in slurm.calls if "jobid=" in c]
    # still completing when the wait ends: nothing lifted
    ticks = iter(range(100))
    slurm = _Slurm("7\n", [_job(["RUNNING"], 0), _job(["PENDING", "COMPLETING"], 1, "BeginTime")])
    said = node_gate.tell_slurm(
        "od-1", "efa: 0 of 32", slurm, sleep=lambda s: None, clock=lambda: float(next(ticks))
    )
    assert "lifted" not in said and not [c for c in slurm.calls if "jobid=" in c]
    # no job on the node: one squeue, no JSON read
    slurm = _Slurm("", [])
    node_gate.tell_slurm("od-1", "efa: 0 of 32", slurm)
    assert [c for c in slurm.calls if c.startswith("squeue")] == ["squeue -h -w od-1 -o %A"]
