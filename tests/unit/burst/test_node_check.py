"""``coreburst burst node-check`` (coreburst/burst/node_check.py) on the outputs in
tests/fixtures/health/ (synthesized from the tools' documented formats, not recorded on
hardware: see that directory's README), and the gate's Slurm side on a recording fake.

Expected counts come from the catalog (p5.48xlarge: 8 GPUs, 32 EFA interfaces).
"""

from __future__ import annotations

import json
import shutil
import stat
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from coreburst.burst import node_check as health
from coreburst.burst.cli import app
from coreburst.common.slurmcmd import slurm_number
from tests.helpers.slurm_fakes import (
    recorded_squeue,
    requeued_job,
    requeued_squeue,
    squeue_json,
)

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "health"
HEALTHY = FIX / "p5-healthy"
P5 = health.expected("p5.48xlarge")


def node(tmp_path: Path, **replace: str | bytes | None) -> Path:
    """The healthy p5 with some probes' outputs replaced (``name=bad/<file>``, bytes, or None
    for a tool that is not installed); ``<name>_rc`` sets an exit status."""
    d = tmp_path / "node"
    shutil.copytree(HEALTHY, d)
    names = {"nvidia_smi": "nvidia-smi", "dcgmi_diag": "dcgmi-diag"}
    for key, value in replace.items():
        if key.endswith("_rc"):
            (d / f"{names.get(key[:-3], key[:-3])}.rc").write_text(str(value))
            continue
        name = names.get(key, key)
        out = d / f"{name}.out"
        if value is None:
            out.unlink()
        elif isinstance(value, bytes):
            out.write_bytes(value)
        else:
            shutil.copy(FIX / value, out)
    return d


def check(d: Path, **kw: object) -> health.Report:
    return health.run_checks(P5, health.Replay(d), **kw)  # type: ignore[arg-type]


def test_the_catalog_gives_what_to_expect() -> None:
    assert (P5.gpus, P5.efa) == (8, 32)
    assert health.expected("p5en.48xlarge").efa == 16
    with pytest.raises(health.HealthInputError, match=r"NVIDIA GPUs .* only"):
        health.expected("trn2.48xlarge")
    with pytest.raises(health.HealthInputError):
        health.expected("m7i.large")


def test_a_healthy_p5_passes_every_check() -> None:
    r = check(HEALTHY, nccl_command="all_reduce_perf -b 8G -e 8G -g 8", nccl_min_busbw=300)
    assert r.passed and r.reason == ""
    assert [(f.check, f.detail) for f in r.findings] == [
        ("gpus", "8 GPUs at full PCIe width"),
        ("dcgm", "dcgmi diag -r 1: 9 results PASS"),
        ("efa", "32 EFA devices"),  # 64 blocks: each device under efa and efa-direct
        ("nccl", "all_reduce_perf 361.4 GB/s busbw at 8589934592 B, no wrong values"),
    ]


@pytest.mark.parametrize(
    ("replace", "reason"),
    [
        ({"nvidia_smi": "bad/nvidia-smi-7-gpus.out"}, "gpus: 7 GPUs, p5.48xlarge has 8"),
        ({"nvidia_smi": "bad/nvidia-smi-x8.out"}, "gpus: PCIe link below full width: GPU5 x8"),
        ({"fi_info": "bad/fi_info-31-devices.out"}, "efa: 31 EFA devices, p5.48xlarge has 32"),
        (
            {"dcgmi_diag": "p5-dcgm-fail/dcgmi-diag.out", "dcgmi_diag_rc": "226"},
            "dcgm: dcgmi diag -r 1: Page Retirement/Row Remap FAIL (GPU 3: GPU 3 has "
            "uncorrectable memory errors",
        ),
        ({"fi_info": b"", "fi_info_rc": "1"}, "efa: fi_info exited 1"),
        ({"nvidia_smi": None}, "gpus: nvidia-smi not found"),
    ],
)
def test_each_fault_fails_with_one_reason(
    tmp_path: Path, replace: dict[str, str | bytes | None], reason: str
) -> None:
    r = check(node(tmp_path, **replace))
    assert not r.passed
    assert r.reason.startswith(reason), r.reason
    assert "\n" not in r.reason and len(r.reason) <= health.REASON_MAX


@pytest.mark.parametrize(
    ("replace", "reason"),
    [
        (
            {"nvidia_smi": "bad/nvidia-smi-not-utf8.out"},
            "gpus: nvidia-smi printed bytes that are not UTF-8 (at byte ",
        ),
        (
            {"nvidia_smi": "bad/nvidia-smi-garbled.out"},
            "gpus: nvidia-smi output not in the --query-gpu csv,noheader,nounits form",
        ),
        (
            {"dcgmi_diag": "bad/dcgmi-diag-hostengine-down.out", "dcgmi_diag_rc": "255"},
            "dcgm: dcgmi exited 255",
        ),
        ({"dcgmi_diag": "bad/dcgmi-diag-hostengine-down.out"}, "dcgm: dcgmi diag -j printed no"),
        ({"dcgmi_diag": "bad/dcgmi-diag-dcgm4-layout.out"}, "dcgm: dcgmi diag -j JSON has no"),
        ({"dcgmi_diag": b'{"DCGM GPU Diagnostic": {"test_categories": []}}'}, "dcgm: dcgmi"),
        ({"fi_info": b"provider: efa\n\x00garbage\n"}, "efa: fi_info output unreadable"),
        ({"fi_info": b"\n"}, "efa: fi_info printed no provider"),
    ],
)
def test_malformed_or_non_utf8_output_is_a_failure_never_a_pass(
    tmp_path: Path, replace: dict[str, str | bytes | None], reason: str
) -> None:
    r = check(node(tmp_path, **replace))
    assert not r.passed and r.reason.startswith(reason), r.reason
    assert r.reason.isascii() and "\n" not in r.reason


def test_nccl_wrong_values_and_low_bandwidth_fail(tmp_path: Path) -> None:
    wrong = check(node(tmp_path, nccl="bad/nccl-wrong-values.out"), nccl_command="x")
    assert wrong.reason.startswith("nccl: nccl_wrong 8 (expected 0)"), wrong.reason
    slow = check(node(tmp_path / "b", nccl="bad/nccl-slow.out"), nccl_command="x",
                 nccl_min_busbw=300)  # fmt: skip
    assert slow.reason.startswith("nccl: nccl_busbw 180.90 GB/s"), slow.reason
    # Without a floor only correctness counts.
    assert check(node(tmp_path / "c", nccl="bad/nccl-slow.out"), nccl_command="x").passed


def test_the_real_runner_reports_missing_tools_timeouts_and_exit_status(tmp_path: Path) -> None:
    with pytest.raises(health.ProbeFailedError, match="not found"):
        health.run_subprocess("x", [str(tmp_path / "nope")], 5)
    slow = tmp_path / "slow"
    slow.write_text(f"#!{sys.executable}\nimport time; time.sleep(5)\n")
    slow.chmod(slow.stat().st_mode | stat.S_IEXEC)
    with pytest.raises(health.ProbeFailedError, match=r"timed out after 0\.5s"):
        health.run_subprocess("x", [str(slow)], 0.5)
    got = health.run_subprocess("x", ["sh", "-c", "echo hi; echo oops >&2; exit 3"], 5)
    assert (got.rc, got.out, got.err) == (3, b"hi\n", b"oops\n")


# Far ahead of any test's now: a recorded hold (its eligible_time 71 s after the recording's
# requeue) still ahead when the test runs.
AHEAD = 4102444800  # 2100-01-01


def _held_after_down(jobs: str) -> str:
    """Each job as real 22.05 listed job 2 of tests/fixtures/slurm/squeue-requeued-22.05-
    node-down-recorded.json right after its node was set DOWN (pending, restart 1,
    ``state_reason`` None and held: its eligible_time ahead, here moved to :data:`AHEAD`)."""
    return squeue_json(
        *(requeued_job("22.05", "node-down", 2, j, eligible_time=AHEAD) for j in jobs.split())
    )


class RecordingSlurm:
    """Records scontrol/squeue calls; squeue answers with the job ids given (made up here in
    squeue's ``-h -o %A`` form: one id per line) and ``--json`` with ``listed`` (default: the
    22.05 recording's document listing no job) until ``state=down`` was sent, then with
    ``after_down`` (default: the jobs as 22.05 listed a job its node's DOWN requeued, held)."""

    def __init__(
        self, jobs: str = "", fail: str | None = None, listed: str = "", after_down: str = ""
    ) -> None:
        self.calls: list[tuple[str, ...]] = []
        self.jobs, self.fail, self.listed = jobs, fail, listed or squeue_json()
        self.after_down = after_down or _held_after_down(jobs)

    def scontrol(self, *args: str) -> str:
        self.calls.append(("scontrol", *args))
        if self.fail and any(self.fail in a for a in args):
            raise RuntimeError(f"scontrol update failed (1): {self.fail}")
        return ""

    def squeue(self, *args: str) -> str:
        self.calls.append(("squeue", *args))
        if self.fail and any(self.fail in a for a in args):
            raise RuntimeError(f"squeue {' '.join(args)} failed (1): {self.fail}")
        if args[:1] != ("--json",):
            return self.jobs
        down = any(c[:1] == ("scontrol",) and "state=down" in c for c in self.calls)
        return self.after_down if down else self.listed


def test_the_gate_takes_a_failed_node_out_and_requeues_its_job_at_once(tmp_path: Path) -> None:
    slurm = RecordingSlurm(jobs="41\n")
    events: list[dict[str, object]] = []
    lines: list[str] = []
    code = health.node_check(
        "od-1",
        P5,
        runner=health.Replay(FIX / "p5-dcgm-fail"),
        gate=True,
        instance_id="i-0abc",
        audit=lambda event, **f: events.append({"event": event, **f}),
        slurm=slurm,
        echo=lines.append,
    )
    assert code == 1
    why = (
        "dcgm: dcgmi diag -r 1: Page Retirement/Row Remap FAIL (GPU 3: GPU 3 has uncorrectable "
        "memory errors and row remapping failed)"
    )
    updates = [c[2:] for c in slurm.calls if c[:2] == ("scontrol", "update")]
    assert updates[0] == ("nodename=od-1", "state=down", f"reason={health.HEALTH_REASON}: {why}")
    assert updates[1][1].startswith(f"comment={health.HEALTH_REASON} ")
    assert "on i-0abc: " in updates[1][1] and updates[1][1].endswith("returned to the pool")
    assert updates[2] == ("nodename=od-1", "state=power_down_force")
    assert updates[3][0] == "jobid=41" and updates[3][1].startswith(
        "AdminComment=coreburst: burst node od-1 failed its health check (dcgm: "
    )
    assert updates[4] == ("jobid=41", "StartTime=now")  # requeued and held: lifted
    assert slurm.calls[0] == ("squeue", "-h", "-w", "od-1", "-o", "%A")  # read before DOWN
    (ev,) = events
    assert ev["event"] == "health.failed" and ev["jobs"] == ["41"] and ev["reason"] == why
    assert ev["hold_lifted"] == ["41"]
    assert lines[-2] == f"node-check od-1: FAILED: {why}"
    assert lines[-1] == "node-check od-1: set DOWN, powered down (instance replaced); requeued 41"


# Real ``squeue --json --states=all`` output of each release (tests/fixtures/slurm/README.md):
# job 1's AdminComment is a site's own text, "site: project=alpha  Partition=fake | ops", and its
# user's Comment reads like the rest of a ``scontrol -o`` line.
SITE_1 = "site: project=alpha  Partition=fake | ops"


@pytest.mark.parametrize("release", ["22.05", "24.11", "26.05"])
def test_the_health_note_keeps_the_sites_comment_and_another_kind_of_note(release: str) -> None:
    """Job 1 (the recording: a site's AdminComment) on the failed node: the health note is
    added after the site's text, exactly, and nothing of the user's Comment; read once, with
    every job."""
    listed = json.dumps(recorded_squeue(release))
    slurm = RecordingSlurm(jobs="1\n", listed=listed)
    health.fail_node(
        "od-1", "gpus: 7 GPUs", slurm, now=lambda: datetime(2026, 12, 4, 1, 2, 3, tzinfo=UTC)
    )
    # once before the DOWN (comments, restart counts), once after it (the requeue hold)
    assert slurm.calls.count(("squeue", "--json", "--states=all")) == 2
    (note,) = [c[3] for c in slurm.calls if c[2:3] == ("jobid=1",) and "AdminComment" in c[3]]
    assert note == (
        f"AdminComment={SITE_1} | coreburst: burst node od-1 failed "
        "its health check (gpus: 7 GPUs); requeued 2026-12-04 01:02:03Z"
    )
    assert "keep me" not in note


def test_a_job_comment_that_cannot_be_read_is_left_alone() -> None:
    slurm = RecordingSlurm(jobs="7\n", fail="--json")  # squeue --json fails
    events: list[dict[str, object]] = []
    health.fail_node("od-2", "gpus: 7 GPUs", slurm, lambda e, **f: events.append(f))
    assert not [c for c in slurm.calls if any(str(a).startswith("AdminComment=") for a in c)]
    assert slurm.calls[2][:4] == ("scontrol", "update", "nodename=od-2", "state=down")
    # nor is its hold lifted blind: Slurm could not say it holds the job
    assert ("scontrol", "update", "jobid=7", "StartTime=now") not in slurm.calls
    assert events[0]["hold_lifted"] == []
    errors = events[0]["slurm_errors"]
    assert isinstance(errors, list)
    assert "job 7: AdminComment unreadable or full, not noted" in errors


@pytest.mark.parametrize(
    ("release", "step", "like", "lifted"),
    [
        ("22.05", "node-down", 2, True),  # reason None, eligible_time ahead: held
        ("24.11", "node-down", 2, True),
        ("26.05", "node-down", 2, False),  # --requeue=expedite: EXPEDITING, no hold
        ("24.11", "requeued", 1, False),  # PENDING, COMPLETING: not yet requeued
        ("22.05", "lifted", 1, False),  # eligible since StartTime=now
    ],
)
def test_only_a_job_slurm_holds_is_lifted(release: str, step: str, like: int, lifted: bool) -> None:
    """The job after its node went DOWN as each release listed it (recorded), at the
    recording's moment: lifted only where Slurm holds it."""
    after = requeued_squeue(release, step)
    (job,) = [j for j in after["jobs"] if j["job_id"] == like]
    # the recording's moment: just after the requeue (a requeue resets submit_time), or the
    # lift for the lifted job
    at = slurm_number(job["eligible_time" if step == "lifted" else "submit_time"])
    assert at is not None
    before = squeue_json(requeued_job(release, "requeued", 2, like, restart_cnt=0))
    slurm = RecordingSlurm(jobs=f"{like}\n", listed=before, after_down=json.dumps(after))
    events: list[dict[str, object]] = []
    health.fail_node(
        "od-1", "gpus: 7 GPUs", slurm, lambda e, **f: events.append(f), wait_s=0,
        now=lambda: datetime.fromtimestamp(at + 1, UTC),
    )  # fmt: skip
    lift = ("scontrol", "update", f"jobid={like}", "StartTime=now")
    assert (lift in slurm.calls) is lifted
    assert events[0]["hold_lifted"] == ([str(like)] if lifted else [])


def test_a_slurm_failure_does_not_stop_the_other_steps() -> None:
    slurm = RecordingSlurm(jobs="7\n", fail="state=down")
    events: list[dict[str, object]] = []
    jobs = health.fail_node(
        "od-2", "gpus: 7 GPUs", slurm, lambda e, **f: events.append(f),
        now=lambda: datetime(2026, 12, 4, 1, 2, 3, tzinfo=UTC),
    )  # fmt: skip
    assert jobs == ["7"]
    assert ("scontrol", "update", "nodename=od-2", "state=power_down_force") in slurm.calls
    assert events[0]["slurm_errors"] == ["scontrol update failed (1): state=down"]


def test_a_pass_touches_no_slurm_and_is_audited() -> None:
    slurm = RecordingSlurm()
    events: list[str] = []
    assert health.node_check(
        "od-1", P5, runner=health.Replay(HEALTHY), gate=True, slurm=slurm,
        audit=lambda e, **f: events.append(e), echo=lambda _: None,
    ) == 0  # fmt: skip
    assert slurm.calls == [] and events == ["health.passed"]


def test_cli_exit_codes_and_one_line_errors(tmp_path: Path) -> None:
    cli = CliRunner()
    ok = cli.invoke(app, ["node-check", "--instance-type", "p5.48xlarge", "--replay", str(HEALTHY)])
    assert ok.exit_code == 0 and ok.output.splitlines()[-1] == "node-check p5.48xlarge: passed"
    bad = cli.invoke(
        app, ["node-check", "--instance-type", "p5.48xlarge", "--replay", str(FIX / "p5-dcgm-fail")]
    )
    assert bad.exit_code == 1 and "FAILED: dcgm:" in bad.output.splitlines()[-1]
    for args, msg in [
        (["--instance-type", "trn2.48xlarge"], "NVIDIA GPUs (nvidia-smi, DCGM) only"),
        (["--gate", "--instance-type", "p5.48xlarge"], "--gate needs --node"),
        ([], "give --instance-type, or --stack with --node"),
        (["--instance-type", "p5.48xlarge", "--replay", str(tmp_path / "x")], "no such directory"),
        (
            ["--instance-type", "p5.48xlarge", "--nccl-command", "a 'b"],
            "--nccl-command: No closing",
        ),
    ]:
        r = cli.invoke(app, ["node-check", *args])
        assert r.exit_code == 2, (args, r.output)
        assert r.output.count("\n") == 1 and msg in r.output and "Traceback" not in r.output


def test_fixtures_say_where_their_format_comes_from() -> None:
    for f in sorted(FIX.rglob("*.out")):
        if "recorded-h200" in f.parts:  # real output, byte for byte: its README says so
            continue
        text = f.read_bytes()
        if f.name.startswith("dcgmi-diag") and text.lstrip().startswith(b"{"):
            assert (
                "not recorded on hardware" in json.loads(text)["_fixture"]
                or "SYNTHESIZED" in (json.loads(text)["_fixture"])
            ), f
        elif f.name != "dcgmi-diag-hostengine-down.out":
            assert text.startswith(b"# SYNTHESIZED, not recorded on hardware"), f
    assert "not recorded on hardware" in (FIX / "README.md").read_text()
