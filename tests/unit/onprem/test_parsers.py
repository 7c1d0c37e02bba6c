"""Parsers and judges on healthy and degraded (synthesized) probe outputs."""

from __future__ import annotations

from pathlib import Path

import pytest

from coreburst.onprem import parsers as p

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "onprem"
HCAS = [{"name": f"mlx5_{i}", "rate": 400} for i in range(8)]


def fx(name: str) -> str:
    return (FIX / name).read_text()


def failed(results: list[p.CheckResult]) -> list[p.CheckResult]:
    return [r for r in results if r.status == "fail"]


# ibstat -------------------------------------------------------------------------------


def test_ibstat_healthy_all_ports_pass() -> None:
    hcas = p.parse_ibstat(fx("ibstat_healthy.txt"))
    assert sorted(hcas) == [f"mlx5_{i}" for i in range(8)]
    port = hcas["mlx5_0"].ports[1]
    assert (port.state, port.physical_state, port.rate, port.base_lid) == (
        "Active",
        "LinkUp",
        400,
        48,
    )
    assert hcas["mlx5_0"].ca_type == "MT4129"
    assert failed(p.judge_ib_ports("dgx-01", hcas, HCAS)) == []


def test_ibstat_rate_200_names_node_port_and_values() -> None:
    hcas = p.parse_ibstat(fx("ibstat_rate200.txt"))
    [bad] = failed(p.judge_ib_ports("dgx-01", hcas, HCAS))
    assert bad.check == "ib_rate"
    assert (bad.device, bad.measured, bad.expected) == ("mlx5_3/1", 200, 400)
    assert bad.message == "dgx-01 mlx5_3/1: rate is 200, expected 400"


def test_ibstat_initializing_hints_at_missing_sm() -> None:
    hcas = p.parse_ibstat(fx("ibstat_initializing.txt"))
    msgs = [r.message for r in failed(p.judge_ib_ports("dgx-01", hcas, HCAS))]
    assert any("mlx5_5/1" in m and "Initializing" in m and "no subnet manager" in m for m in msgs)
    assert "dgx-01 mlx5_6/1: physical state is Polling, expected LinkUp" in msgs


def test_ibstat_missing_hca_fails() -> None:
    hcas = p.parse_ibstat(fx("ibstat_healthy.txt"))
    [bad] = failed(p.judge_ib_ports("dgx-01", hcas, [{"name": "mlx5_9", "rate": 400}]))
    assert bad.message == "dgx-01 mlx5_9: HCA is absent, expected present"


# nvidia-smi ---------------------------------------------------------------------------


def _judge_gpus(text: str) -> list[p.CheckResult]:
    gpus = p.parse_nvidia_smi_csv(text)
    return p.judge_gpus(
        "dgx-01",
        gpus,
        expected_count=8,
        expected_model="NVIDIA H100 80GB HBM3",
        expected_driver="550.90.07",
        expected_pcie_width=16,
    )


def test_nvidia_smi_healthy() -> None:
    gpus = p.parse_nvidia_smi_csv(fx("nvidia_smi_healthy.csv"))
    assert len(gpus) == 8
    assert gpus[7] == p.Gpu(7, "NVIDIA H100 80GB HBM3", "550.90.07", 16, 16)
    assert failed(_judge_gpus(fx("nvidia_smi_healthy.csv"))) == []


def test_nvidia_smi_seven_gpus() -> None:
    [bad] = failed(_judge_gpus(fx("nvidia_smi_7gpus.csv")))
    assert bad.message == "dgx-01 gpus: count is 7, expected 8"


def test_nvidia_smi_pcie_width_x8() -> None:
    [bad] = failed(_judge_gpus(fx("nvidia_smi_x8_width.csv")))
    assert (bad.check, bad.device, bad.measured, bad.expected) == (
        "pcie_width",
        "GPU2",
        "x8",
        "x16",
    )


def test_nvidia_smi_header_tolerated_and_driver_mismatch() -> None:
    bad = failed(_judge_gpus(fx("nvidia_smi_with_header.csv")))
    assert len(bad) == 8
    assert bad[0].message == "dgx-01 GPU0: driver version is 550.54.15, expected 550.90.07"


def test_nvidia_smi_empty_output_counts_zero() -> None:
    [bad] = failed(_judge_gpus("NVIDIA-SMI has failed because it couldn't communicate\n"))
    assert bad.measured == 0


# XID ----------------------------------------------------------------------------------


def test_xid_none() -> None:
    assert p.parse_xid_journal(fx("journalctl_xid_none.txt")) == []
    assert failed(p.judge_xid("dgx-01", [])) == []


def test_xid_events_each_reported() -> None:
    events = p.parse_xid_journal(fx("journalctl_xid_79.txt"))
    assert [(e.pci, e.code) for e in events] == [("PCI:0000:9a:00", 79), ("PCI:0000:18:00", 48)]
    bad = failed(p.judge_xid("dgx-03", events))
    assert bad[0].message.startswith("dgx-03 PCI:0000:9a:00: XID 79 since 1 hour ago")
    assert bad[0].expected == "no XID"


# sminfo -------------------------------------------------------------------------------


def test_sminfo_master() -> None:
    info = p.parse_sminfo(fx("sminfo_master.txt"))
    assert info == p.SmInfo(1, "0xa088c20300671234", 15, "SMINFO_MASTER")
    assert failed(p.judge_sminfo("dgx-01", info)) == []


def test_sminfo_standby_is_not_a_master() -> None:
    [bad] = failed(p.judge_sminfo("dgx-01", p.parse_sminfo(fx("sminfo_standby.txt"))))
    assert bad.measured == "SMINFO_STANDBY"
    assert bad.expected == "SMINFO_MASTER"


def test_sminfo_no_sm() -> None:
    assert p.parse_sminfo(fx("sminfo_no_sm.txt")) is None
    [bad] = failed(p.judge_sminfo("dgx-01", None))
    assert "no subnet manager answered sminfo" in bad.message


# dcgmi diag ---------------------------------------------------------------------------


def test_dcgmi_pass() -> None:
    tests = p.parse_dcgmi_diag(fx("dcgmi_diag_pass.txt"))
    names = [t.name for t in tests]
    assert "DCGM Version" not in names  # metadata rows are not tests
    assert {"Denylist", "pcie", "memory", "diagnostic"} <= set(names)
    assert {t.code for t in tests} == {0}
    assert failed(p.judge_dcgmi("dgx-01", tests, 2)) == []


def test_dcgmi_fail_names_test_and_gpu() -> None:
    tests = p.parse_dcgmi_diag(fx("dcgmi_diag_fail.txt"))
    [bad] = failed(p.judge_dcgmi("dgx-01", tests, 2))
    assert bad.device == "diag -r 2 diagnostic"
    assert bad.measured == "Fail (3) GPU: 3"
    assert bad.expected == "Pass"


@pytest.mark.parametrize(("word", "code"), [("Skip", 1), ("Warn", 2)])
def test_dcgmi_pass_only(word: str, code: int) -> None:
    tests = p.parse_dcgmi_diag(f"| memory                    | {word}                          |\n")
    [bad] = failed(p.judge_dcgmi("dgx-01", tests, 1))
    assert bad.measured == f"{word} ({code})"
    assert failed(p.judge_dcgmi("dgx-01", tests, 1, allowed=("Pass", word))) == []


def test_dcgmi_no_output_fails() -> None:
    [bad] = failed(p.judge_dcgmi("dgx-01", p.parse_dcgmi_diag("Error: unable to connect\n"), 1))
    assert "no test results" in bad.message


# all_reduce_perf ----------------------------------------------------------------------


def test_nccl_healthy_judges_largest_size_not_average() -> None:
    res = p.parse_all_reduce_perf(fx("all_reduce_perf_healthy.txt"))
    assert len(res.rows) == 31
    assert res.rows[-1].size == 8589934592
    assert res.out_of_bounds == 0
    assert res.avg_busbw == pytest.approx(96.4231)  # far below 80 %: the average is not judged
    assert failed(p.judge_nccl("dgx-01", res, 450.0, 0.8)) == []


def test_nccl_busbw_60_percent() -> None:
    res = p.parse_all_reduce_perf(fx("all_reduce_perf_60pct.txt"))
    [bad] = failed(p.judge_nccl("dgx-01", res, 450.0, 0.8))
    assert bad.check == "nccl_busbw"
    assert bad.measured == "270.00 GB/s"
    assert "(60% of theoretical), expected >= 360.00 GB/s" in bad.message


def test_nccl_wrong_and_out_of_bounds() -> None:
    res = p.parse_all_reduce_perf(fx("all_reduce_perf_wrong.txt"))
    bad = {r.check: r for r in failed(p.judge_nccl("dgx-01", res, 450.0))}
    assert set(bad) == {"nccl_wrong", "nccl_out_of_bounds"}
    assert bad["nccl_wrong"].measured == 8
    assert bad["nccl_out_of_bounds"].measured == 4


def test_nccl_no_rows() -> None:
    res = p.parse_all_reduce_perf("all_reduce_perf: command not found\n")
    checks = {r.check for r in failed(p.judge_nccl("dgx-01", res, 450.0))}
    assert checks == {"nccl_busbw"}


def test_nccl_configurable_fraction() -> None:
    res = p.parse_all_reduce_perf(fx("all_reduce_perf_60pct.txt"))
    assert failed(p.judge_nccl("dgx-01", res, 450.0, 0.5)) == []


# fabric manager -----------------------------------------------------------------------


def test_fabricmanager_ok_and_mismatch() -> None:
    ok = p.parse_fabricmanager_version(fx("fabricmanager_version_ok.txt"))
    assert ok == "550.90.07"
    assert failed(p.judge_fabricmanager("dgx-01", ok, "550.90.07")) == []
    bad_v = p.parse_fabricmanager_version(fx("fabricmanager_version_mismatch.txt"))
    [bad] = failed(p.judge_fabricmanager("dgx-01", bad_v, "550.90.07"))
    assert bad.message == "dgx-01 nv-fabricmanager: version is 550.54.15, expected 550.90.07"


def test_fabricmanager_missing() -> None:
    [bad] = failed(p.judge_fabricmanager("dgx-01", p.parse_fabricmanager_version(""), "550.90.07"))
    assert bad.measured == "not installed"


def test_failures_helper_accepts_dicts() -> None:
    res = p.judge_fabricmanager("n", "1", "2")
    assert p.failures([r.as_dict() for r in res]) == p.failures(res) == [res[0].message]


# driver branch lock ---------------------------------------------------------------------


def test_a_branch_expectation_accepts_any_build_of_the_branch_only() -> None:
    """nvidia_driver locks apt to a branch (NVIDIA driver installation guide, "Version
    locking"), so a fresh node gets the newest build the repository serves: validation by
    default expects the branch, and an exact build only when one is configured."""
    smi = fx("nvidia_smi_healthy.csv")  # every GPU on 550.90.07
    gpus = p.parse_nvidia_smi_csv(smi)
    kw = {"expected_count": 8, "expected_model": "NVIDIA H100 80GB HBM3", "expected_pcie_width": 16}
    assert failed(p.judge_gpus("dgx-01", gpus, expected_driver="550", **kw)) == []
    assert len(failed(p.judge_gpus("dgx-01", gpus, expected_driver="560", **kw))) == 8
    assert len(failed(p.judge_gpus("dgx-01", gpus, expected_driver="550.144.03", **kw))) == 8
    # A "55" prefix is not the 550 branch.
    assert not p.driver_matches("550.90.07", "55")


def test_fabricmanager_must_equal_the_running_driver_build() -> None:
    """Fabric manager's version must equal the driver's (NVIDIA Fabric Manager user guide):
    with a branch expectation, the build nvidia-smi reports on the node is the reference."""
    assert failed(p.judge_fabricmanager("dgx-01", "550.90.07", "550", "550.90.07")) == []
    [bad] = failed(p.judge_fabricmanager("dgx-01", "550.144.03", "550", "550.90.07"))
    assert bad.message == "dgx-01 nv-fabricmanager: version is 550.144.03, expected 550.90.07"
    # Without the nvidia-smi probe only the branch can be checked.
    assert failed(p.judge_fabricmanager("dgx-01", "550.144.03", "550")) == []
    assert failed(p.judge_fabricmanager("dgx-01", "560.35.03", "550"))
