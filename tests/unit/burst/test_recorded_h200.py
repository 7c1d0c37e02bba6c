"""``coreburst burst node-check`` on outputs RECORDED on a real machine: one NVIDIA H200 lent on
2026-12-04 (driver 580.159.04, CUDA 13.0, NCCL 2.28.9, nccl-tests 2.19.6; no DCGM, no
libfabric). tests/fixtures/health/recorded-h200/ is that replay directory; its README gives
each file's exact command, and tests/fixtures/onprem/recorded-h200/ the whole recording.

What a user of a p5en.48xlarge check sees on that machine: the GPU count fails (1 of 8), the
missing tools are named as not installed, and the one-GPU all-reduce is correct at 0 GB/s busbw.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from coreburst.burst import node_check
from coreburst.burst.cli import app
from coreburst.onprem.parsers import parse_nvidia_smi_csv

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
REC = FIXTURES / "health" / "recorded-h200"
RAW = FIXTURES / "onprem" / "recorded-h200"
NCCL = "all_reduce_perf -b 8G -e 8G -g 1"
P5EN = node_check.expected("p5en.48xlarge")
NOT_FOUND = (
    "not found (exit 127; is it installed on the image?): bash: line 1: {0}: command not found"
)


def test_the_replay_files_are_the_recording_byte_for_byte() -> None:
    """The replay directory is copies of the raw recording (its README says which)."""
    same = {
        "nvidia-smi.out": "nvidia-smi-query-health.out",
        "dcgmi-diag.out": "dcgmi-diag-r1-j.out",
        "dcgmi-diag.err": "dcgmi-diag-r1-j.err",
        "fi_info.out": "fi_info-efa.out",
        "fi_info.err": "fi_info-efa.err",
        "nccl.out": "all_reduce_perf-8G.out",
    }
    for replay, raw in same.items():
        assert (REC / replay).read_bytes() == (RAW / raw).read_bytes(), replay
    rcs = dict(line.split("\t")[:2] for line in (RAW / "commands.tsv").read_text().splitlines()[1:])
    assert (REC / "dcgmi-diag.rc").read_text().strip() == rcs["dcgmi-diag-r1-j"] == "127"
    assert (REC / "fi_info.rc").read_text().strip() == rcs["fi_info-efa"] == "127"
    assert rcs["nvidia-smi-query-health"] == rcs["all_reduce_perf-8G"] == "0"
    assert "RECORDED" in (REC / "README.md").read_text()
    assert "RECORDED" in (RAW / "README.md").read_text()


def test_one_h200_fails_a_p5en_check_on_its_gpu_count() -> None:
    report = node_check.run_checks(P5EN, node_check.Replay(REC), nccl_command=NCCL)
    assert [(f.check, f.ok, f.detail) for f in report.findings] == [
        ("gpus", False, "1 GPUs, p5en.48xlarge has 8"),
        ("dcgm", False, "dcgmi " + NOT_FOUND.format("dcgmi")),
        ("efa", False, "fi_info " + NOT_FOUND.format("fi_info")),
        ("nccl", True, "all_reduce_perf 0.0 GB/s busbw at 8589934592 B, no wrong values"),
    ]
    assert not report.passed
    assert report.reason == "gpus: 1 GPUs, p5en.48xlarge has 8"


def test_the_cli_prints_the_verdict_a_user_sees() -> None:
    r = CliRunner().invoke(
        app,
        ["node-check", "--instance-type", "p5en.48xlarge", "--replay", str(REC),
         "--nccl-command", NCCL],
    )  # fmt: skip
    assert r.exit_code == 1, r.output
    assert r.output.splitlines() == [
        "  FAIL gpus: 1 GPUs, p5en.48xlarge has 8",
        "  FAIL dcgm: dcgmi " + NOT_FOUND.format("dcgmi"),
        "  FAIL efa: fi_info " + NOT_FOUND.format("fi_info"),
        "  ok   nccl: all_reduce_perf 0.0 GB/s busbw at 8589934592 B, no wrong values",
        "node-check p5en.48xlarge: FAILED: gpus: 1 GPUs, p5en.48xlarge has 8",
    ]


def test_the_real_nvidia_smi_line_is_read_whole() -> None:
    """One GPU at its full PCIe width, the driver nvidia-smi -q and the kernel module report."""
    text = (REC / "nvidia-smi.out").read_text()
    one = node_check.Expect("one-h200", gpus=1, efa=0)
    assert node_check.judge_gpus(text, one) == "1 GPUs at full PCIe width"
    (gpu,) = parse_nvidia_smi_csv(text)
    assert (gpu.index, gpu.name, gpu.pcie_width_current, gpu.pcie_width_max) == (
        0, "NVIDIA H200", 16, 16,
    )  # fmt: skip
    q = (RAW / "nvidia-smi-q.out").read_text()
    assert f"Driver Version                                         : {gpu.driver_version}\n" in q
    assert f"  {gpu.driver_version}  " in (RAW / "driver-version.out").read_text()
    assert gpu.driver_version == "580.159.04"


def test_a_busbw_floor_fails_the_one_gpu_all_reduce() -> None:
    """One rank moves nothing between ranks: nccl-tests prints busbw 0.00, a real answer."""
    report = node_check.run_checks(
        node_check.Expect("one-h200", 1, 0), node_check.Replay(REC), dcgm=False,
        nccl_command=NCCL, nccl_min_busbw=100.0,
    )  # fmt: skip
    nccl = report.findings[-1]
    assert (nccl.check, nccl.ok) == ("nccl", False)
    assert nccl.detail == "nccl_busbw 0.00 GB/s (expected >= 100.00 GB/s (100% of 100))"


def test_exit_127_is_a_tool_that_is_not_installed(tmp_path: Path) -> None:
    """Through a shell (a wrapper, a replay of a shell recording) a missing tool is exit 127
    with the shell's "command not found": named as not installed, like the direct call's
    FileNotFoundError, and the recorded stderr is kept in the reason."""
    if shutil.which("fi_info"):
        pytest.skip("fi_info is installed here")
    argv = ["bash", "-c", "fi_info -p efa -t FI_EP_RDM"]
    got = node_check.run_subprocess("fi_info", argv, 30)
    assert (got.rc, got.out) == (127, b"")
    # bash 5.1+ says "bash: line 1: fi_info: ...", as recorded; older bash leaves out "line 1: "
    assert got.err.endswith(b"fi_info: command not found\n")
    assert (REC / "fi_info.err").read_bytes() == b"bash: line 1: fi_info: command not found\n"
    with pytest.raises(node_check.ProbeFailedError, match=r"^fi_info not found: is it installed"):
        node_check.run_subprocess("fi_info", ["fi_info", "-p", "efa"], 30)
    # a replay directory without the .err file: no stderr, still "not found"
    d = tmp_path / "node"
    shutil.copytree(REC, d)
    (d / "fi_info.err").unlink()
    report = node_check.run_checks(P5EN, node_check.Replay(d), dcgm=False)
    assert (
        report.findings[1].detail == "fi_info not found (exit 127; is it installed on the image?)"
    )
