"""The on-prem parsers and Ansible filters on outputs RECORDED on a real machine: one NVIDIA
H200 lent on 2026-12-04 (driver 580.159.04, CUDA 13.0, NCCL 2.28.9, nccl-tests 2.19.6; no
DCGM, no libfabric). tests/fixtures/onprem/recorded-h200/README.md gives each file's command."""

from __future__ import annotations

import importlib.util
import xml.etree.ElementTree as ET
from pathlib import Path
from types import ModuleType

from coreburst.onprem import parsers as p

ROOT = Path(__file__).resolve().parents[3]
RAW = ROOT / "tests" / "fixtures" / "onprem" / "recorded-h200"
H200 = p.Gpu(0, "NVIDIA H200", "580.159.04", 16, 16)
SIZES = [8 << i for i in range(31)]  # -b 8 -e 8G -f 2


def raw(name: str) -> str:
    return (RAW / name).read_text()


def _filters() -> dict:
    path = ROOT / "ansible/filter_plugins/coreburst_onprem.py"
    spec = importlib.util.spec_from_file_location("coreburst_onprem_filters_rec", path)
    assert spec and spec.loader
    mod: ModuleType = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.FilterModule().filters()


# nvidia-smi ----------------------------------------------------------------------------


def test_query_csv_reads_the_same_with_and_without_header_and_units() -> None:
    # --format=csv prints a header and, for these fields, no units at all
    assert raw("nvidia-smi-query-csv.out").splitlines()[0] == (
        "index, name, driver_version, pcie.link.width.current, pcie.link.width.max"
    )
    assert p.parse_nvidia_smi_csv(raw("nvidia-smi-query-csv.out")) == [H200]
    assert p.parse_nvidia_smi_csv(raw("nvidia-smi-query-health.out")) == [H200]
    assert p.parse_nvidia_smi_csv(raw("nvidia-smi-query-health-after.out")) == [H200]


def test_the_parsed_gpu_is_what_the_other_nvidia_smi_views_say() -> None:
    """Driver, name and PCIe width agree with nvidia-smi -q, -q -x, -L, the plain table and
    /proc/driver/nvidia/version."""
    q = raw("nvidia-smi-q.out")
    fields = [tuple(x.strip() for x in ln.split(":", 1)) for ln in q.splitlines() if ":" in ln]
    assert ("Driver Version", H200.driver_version) in fields
    assert ("Attached GPUs", "1") in fields
    assert ("Product Name", H200.name) in fields
    at = q.index("Link Width")
    assert q[at:].split("\n")[1:3] == [
        "                Max                                    : 16x",
        "                Current                                : 16x",
    ]
    root = ET.fromstring(raw("nvidia-smi-q-x.out"))
    assert root.findtext("driver_version") == H200.driver_version
    assert root.findtext("cuda_version") == "13.0"
    assert root.findtext("attached_gpus") == "1"
    widths = root.find("gpu/pci/pci_gpu_link_info/link_widths")
    assert widths is not None
    assert (widths.findtext("max_link_width"), widths.findtext("current_link_width")) == (
        f"{H200.pcie_width_max}x",
        f"{H200.pcie_width_current}x",
    )
    assert raw("nvidia-smi-L.out").startswith(f"GPU 0: {H200.name} (UUID: GPU-")
    assert f"Driver Version: {H200.driver_version}" in raw("nvidia-smi.out")
    assert f"  {H200.driver_version}  " in raw("driver-version.out")


def test_judge_gpus_on_the_real_h200() -> None:
    gpus = p.parse_nvidia_smi_csv(raw("nvidia-smi-query-csv.out"))
    one = p.judge_gpus(
        "h200-1", gpus, expected_count=1, expected_model="NVIDIA H200",
        expected_driver="580", expected_pcie_width=16,
    )  # fmt: skip
    assert [r.status for r in one] == ["pass"] * 4
    eight = p.judge_gpus(
        "h200-1", gpus, expected_count=8, expected_model="NVIDIA H200",
        expected_driver="580.159.04", expected_pcie_width=16,
    )  # fmt: skip
    assert p.failures(eight) == ["h200-1 gpus: count is 1, expected 8"]


def test_the_gpu_filter_takes_the_registered_probe() -> None:
    f = _filters()
    probe = {"stdout": raw("nvidia-smi-query-health.out"), "stderr": "", "rc": 0}
    res = f["coreburst_gpu_checks"](probe, "h200-1", 8, "NVIDIA H200", "580", 16)
    assert f["coreburst_failures"](res) == ["h200-1 gpus: count is 1, expected 8"]


# all_reduce_perf ---------------------------------------------------------------------


def test_the_real_sweep_is_read_row_by_row() -> None:
    """nccl-tests 2.19.6's layout: 13 columns, in-place algbw in exponent form (``3e+06``),
    the ``# Collective test concluded`` trailer; one rank, so busbw 0.00 throughout."""
    text = raw("all_reduce_perf-sweep.out")
    assert "  1.42   3e+06    0.00       0" in text  # the narrow-column exponent form
    res = p.parse_all_reduce_perf(text)
    assert [r.size for r in res.rows] == SIZES
    assert {(r.busbw_oop, r.busbw_ip, r.wrong_oop, r.wrong_ip) for r in res.rows} == {
        (0.0, 0.0, 0, 0)
    }
    assert (res.out_of_bounds, res.avg_busbw) == (0, 0.0)


def test_nccl_debug_info_lines_do_not_change_the_reading() -> None:
    quiet = p.parse_all_reduce_perf(raw("all_reduce_perf-8G.out"))
    debug_text = raw("all_reduce_perf-8G-debug.out")
    assert "NCCL INFO NCCL version 2.28.9+cuda13.0" in debug_text
    debug = p.parse_all_reduce_perf(debug_text)
    for res in (quiet, debug):
        assert [(r.size, r.busbw_oop, r.wrong_oop, r.wrong_ip) for r in res.rows] == [
            (8589934592, 0.0, 0, 0)
        ]
        assert (res.out_of_bounds, res.avg_busbw) == (0, 0.0)


def test_judge_nccl_on_one_gpu_fails_the_floor_and_passes_correctness() -> None:
    res = p.parse_all_reduce_perf(raw("all_reduce_perf-sweep.out"))
    assert p.failures(p.judge_nccl("h200-1", res, 370.0)) == [
        "h200-1 all_reduce_perf size 8589934592B: busbw is 0.00 GB/s (0% of theoretical), "
        "expected >= 296.00 GB/s (80% of 370)"
    ]
    f = _filters()
    probe = {"stdout": raw("all_reduce_perf-8G.out"), "stderr": "", "rc": 0}
    res_f = f["coreburst_nccl_checks"](probe, "h200-1", 370, 0.8)
    assert [(r["check"], r["status"]) for r in res_f] == [
        ("nccl_busbw", "fail"), ("nccl_wrong", "pass"), ("nccl_out_of_bounds", "pass"),
    ]  # fmt: skip


def test_a_wrong_count_in_g_notation_keeps_its_row() -> None:
    """nccl-tests prints #wrong with ``%6g`` (util.cu, writeBenchmarkLineBody), so from a
    million wrong elements on the cell reads ``1e+06``, ``2.14748e+09``; the recording shows
    the same switch to exponents in its algbw column. Such a row was dropped (int("1e+06")
    failed), hiding the largest size and its wrong values. The line below is the recorded 8G
    row with only its in-place #wrong cell changed, as nccl-tests would print 2^31 wrong."""
    real = raw("all_reduce_perf-8G.out")
    row = next(ln for ln in real.splitlines() if ln.strip().startswith("8589934592"))
    assert row.endswith("   7e+06    0.00       0")
    bad = row[:-6] + "%6g" % 2**31  # the cell is "  %6g"
    assert bad.endswith("   7e+06    0.00  2.14748e+09")
    (r,) = p.parse_all_reduce_perf(real.replace(row, bad)).rows
    assert (r.size, r.wrong_oop, r.wrong_ip) == (8589934592, 0, 2147480000)
    assert (
        p.parse_all_reduce_perf(row.replace("       0", "   1e+06", 1)).rows[0].wrong_oop == 10**6
    )


# tools that are not installed ------------------------------------------------------------


def test_missing_dcgmi_and_fi_info_are_recorded_as_exit_127() -> None:
    rcs = {ln.split("\t")[0]: ln.split("\t")[1] for ln in raw("commands.tsv").splitlines()[1:]}
    for name, tool in [
        ("dcgmi-discovery", "dcgmi"), ("dcgmi-diag-r1-j", "dcgmi"),
        ("fi_info-efa", "fi_info"), ("fi_info-l", "fi_info"),
    ]:  # fmt: skip
        assert rcs[name] == "127"
        assert raw(f"{name}.out") == ""
        assert raw(f"{name}.err") == f"bash: line 1: {tool}: command not found\n"
    assert raw("command-v-each.out").splitlines() == [
        f"{t}: not found (command -v rc 1)"
        for t in ("dcgmi", "nv-hostengine", "fi_info", "all_reduce_perf")
    ]
    # one GPU, no NVLink in use: nvidia-smi nvlink -s prints nothing and exits 0
    assert (raw("nvidia-smi-nvlink-s.out"), rcs["nvidia-smi-nvlink-s"]) == ("", "0")


def test_the_dcgm_filter_names_a_missing_dcgmi() -> None:
    f = _filters()
    probe = {"stdout": "", "stderr": raw("dcgmi-diag-r1-j.err"), "rc": 127}
    assert p.parse_dcgmi_diag(probe["stdout"]) == []
    assert f["coreburst_failures"](f["coreburst_dcgm_checks"](probe, "h200-1", 1)) == [
        "h200-1 dcgmi: probe failed with rc=127 (bash: line 1: dcgmi: command not found), "
        "expected rc=0",
        "h200-1 dcgmi diag -r 1: no test results parsed, expected PASS",
    ]
