"""site.yml and validate.yml run for real through ansible-runner, local connection.

Hardware probes (nvidia-smi, ibstat, sminfo, dcgmi, all_reduce_perf, nv-fabricmanager,
journalctl) are replaced on PATH by scripts that print the synthesized fixtures; each
inventory host gets its own PATH, so one validate run covers every scenario.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from coreburst.onprem.cli import app
from coreburst.onprem.fleet import Fleet, write_inventory
from coreburst.onprem.runner import run_playbook
from tests.helpers.apt_sandbox import MODULE_PYTHON

pytestmark = pytest.mark.integration

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "onprem"
FLEET = Path(__file__).resolve().parents[3] / "ansible" / "fleet.example.yml"

# probe -> (fixture, exit code, stream)
HEALTHY: dict[str, tuple[str, int, str]] = {
    "nvidia-smi": ("nvidia_smi_healthy.csv", 0, "out"),
    "ibstat": ("ibstat_healthy.txt", 0, "out"),
    "sminfo": ("sminfo_master.txt", 0, "out"),
    "dcgmi": ("dcgmi_diag_pass.txt", 0, "out"),
    "all_reduce_perf": ("all_reduce_perf_healthy.txt", 0, "out"),
    "nv-fabricmanager": ("fabricmanager_version_ok.txt", 0, "out"),
    "journalctl": ("journalctl_xid_none.txt", 0, "out"),
}
# scenario -> (probe overrides, a substring the failure message must contain)
SCENARIOS: dict[str, tuple[dict[str, tuple[str, int, str]], str]] = {
    "healthy": ({}, ""),
    "gpu7": ({"nvidia-smi": ("nvidia_smi_7gpus.csv", 0, "out")}, "gpus: count is 7, expected 8"),
    "rate200": (
        {"ibstat": ("ibstat_rate200.txt", 0, "out")},
        "mlx5_3/1: rate is 200, expected 400",
    ),
    "nosm": (
        {"sminfo": ("sminfo_no_sm.txt", 1, "err")},
        "fabric: no subnet manager answered sminfo, expected an SMINFO_MASTER",
    ),
    "busbw60": (
        {"all_reduce_perf": ("all_reduce_perf_60pct.txt", 0, "out")},
        "busbw is 270.00 GB/s (60% of theoretical), expected >= 360.00 GB/s",
    ),
    "dcgmfail": (
        {"dcgmi": ("dcgmi_diag_fail.txt", 1, "out")},
        "diag -r 1 diagnostic: result is Fail (3) GPU: 3, expected Pass",
    ),
    "fmmismatch": (
        {"nv-fabricmanager": ("fabricmanager_version_mismatch.txt", 0, "out")},
        "nv-fabricmanager: version is 550.54.15, expected 550.90.07",
    ),
    "xid": (
        {"journalctl": ("journalctl_xid_79.txt", 0, "out")},
        "PCI:0000:9a:00: XID 79 since 1 hour ago",
    ),
}


def _fake_probes(bindir: Path, probes: dict[str, tuple[str, int, str]]) -> None:
    bindir.mkdir(parents=True)
    for name, (fixture, rc, stream) in probes.items():
        redirect = " >&2" if stream == "err" else ""
        script = bindir / name
        script.write_text(
            f"#!/bin/sh\ncat {shlex.quote(str(FIX / fixture))}{redirect}\nexit {rc}\n"
        )
        script.chmod(0o755)


def _local(**extra: Any) -> dict[str, Any]:
    return {"ansible_connection": "local", "ansible_python_interpreter": MODULE_PYTHON, **extra}


def _fleet(nodes: list[dict[str, Any]], **fleet_vars: Any) -> Fleet:
    data = yaml.safe_load(FLEET.read_text())
    data["nodes"] = nodes
    data["vars"] = {"coreburst_become": False, **fleet_vars}
    return Fleet.model_validate(data)


@pytest.fixture(scope="module")
def validate_report(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, dict[str, Any], str]:
    tmp = tmp_path_factory.mktemp("validate")
    nodes = []
    for i, (name, (overrides, _)) in enumerate(SCENARIOS.items()):
        bindir = tmp / name / "bin"
        _fake_probes(bindir, {**HEALTHY, **overrides})
        env = {"PATH": f"{bindir}:/usr/bin:/bin"}
        node: dict[str, Any] = {
            "name": name,
            "groups": ["dgx_nodes", "subnet_managers"] if i < 2 else ["dgx_nodes"],
            "vars": _local(acceptance_probe_environment=env),
        }
        if i < 2:
            node["sm_priority"] = 15 - i
        nodes.append(node)
    inv = write_inventory(_fleet(nodes), tmp / "hosts.yml")
    report = tmp / "report.json"
    result = CliRunner().invoke(
        app, ["validate", "--inventory", str(inv), "--report", str(report), "--quiet"]
    )
    return result.exit_code, json.loads(report.read_text()), result.output


def test_validate_exit_code_is_1_on_failures(
    validate_report: tuple[int, dict[str, Any], str],
) -> None:
    code, report, _ = validate_report
    assert code == 1
    assert report["exit_code"] == 1
    assert set(report["hosts"]) == set(SCENARIOS)


def test_healthy_node_passes_every_check(validate_report: tuple[int, dict[str, Any], str]) -> None:
    host = validate_report[1]["hosts"]["healthy"]
    assert host["status"] == "ok"
    assert host["failed"] == 0
    checks = {c["check"] for c in host["checks"]}
    assert {"gpu_count", "xid", "ib_rate", "sm_master", "dcgm_diag", "nccl_busbw"} <= checks
    assert "fabricmanager_version" in checks
    assert all(c["status"] == "pass" for c in host["checks"])


@pytest.mark.parametrize("scenario", [s for s in SCENARIOS if s != "healthy"])
def test_degraded_node_fails_with_its_message(
    scenario: str, validate_report: tuple[int, dict[str, Any], str]
) -> None:
    host = validate_report[1]["hosts"][scenario]
    expected_msg = SCENARIOS[scenario][1]
    failed = [c for c in host["checks"] if c["status"] == "fail"]
    assert failed, host
    assert any(expected_msg in c["message"] and scenario in c["message"] for c in failed), failed
    # Only the injected fault fails: every other layer of that node still passes.
    assert len({c["check"] for c in failed}) == 1
    for c in failed:
        assert {"node", "device", "measured", "expected", "message"} <= set(c)
    # The play stops the node at the assert, whose message carries the same text.
    assert host["status"] == "failed"
    assert any(expected_msg in e for e in host["errors"])


def test_site_is_idempotent_in_a_sandbox(tmp_path: Path) -> None:
    # a: DGX node that also runs OpenSM; b: a dedicated subnet manager host.
    nodes = [
        {
            "name": f"sandbox-{x}",
            "groups": groups,
            "sm_priority": prio,
            "ipoib": [{"name": "ibp24s0", "address": f"10.20.0.{prio}/16"}],
            "vars": _local(coreburst_root=str(tmp_path / x)),
        }
        for x, prio, groups in (
            ("a", 15, ["dgx_nodes", "subnet_managers"]),
            ("b", 14, ["subnet_managers"]),
        )
    ]
    inv = write_inventory(_fleet(nodes, coreburst_manage_system=False), tmp_path / "hosts.yml")
    first = run_playbook("apply", inv)
    assert first.exit_code == 0, first.to_json()
    assert all(h.changed > 0 for h in first.hosts.values())

    etc = tmp_path / "a" / "etc"
    partitions = (etc / "opensm" / "partitions.conf").read_text()
    assert "Default=0x7fff, ipoib, mtu=5 : ALL=full;" in partitions
    assert "sm_priority 15" in (etc / "opensm" / "opensm.conf").read_text()
    b_etc = tmp_path / "b" / "etc"
    assert "sm_priority 14" in (b_etc / "opensm" / "opensm.conf").read_text()
    assert (b_etc / "chrony" / "chrony.conf").exists()  # baseline on the dedicated SM host
    assert not (b_etc / "nhc").exists()  # but no GPU-node roles
    nhc = (etc / "nhc" / "nhc.conf").read_text()
    assert "sandbox-a || check_hw_ib 400 mlx5_7:1" in nhc
    # Driver and fabric manager are locked to the branch, not to one build.
    for pref in ("coreburst-nvidia-fabricmanager", "coreburst-nvidia-driver"):
        assert "Pin: version 550.*" in (etc / "apt" / "preferences.d" / pref).read_text()
    doca = (etc / "apt" / "sources.list.d" / "doca.list").read_text()
    assert f"signed-by={etc}/apt/keyrings/doca.asc" in doca
    assert 'Unattended-Upgrade "0"' in (etc / "apt" / "apt.conf.d" / "20auto-upgrades").read_text()
    assert (
        "memlock unlimited"
        in (etc / "security" / "limits.d" / "90-coreburst-rdma.conf").read_text()
    )
    assert (etc / "netplan" / "60-coreburst-ipoib.yaml").stat().st_mode & 0o777 == 0o600

    second = run_playbook("apply", inv)
    assert second.exit_code == 0, second.to_json()
    changed = {h: r.changed_tasks for h, r in second.hosts.items() if r.changed}
    assert changed == {}


def test_unreachable_host_exits_2(tmp_path: Path) -> None:
    inv = tmp_path / "hosts.yml"
    inv.write_text(
        yaml.safe_dump(
            {
                "all": {
                    "children": {
                        "dgx_nodes": {
                            "hosts": {
                                "dgx-gone": {
                                    "ansible_host": "127.0.0.1",
                                    "ansible_port": 1,
                                    "ansible_connection": "ssh",
                                }
                            }
                        }
                    }
                }
            }
        )
    )
    result = CliRunner().invoke(app, ["validate", "-i", str(inv), "--quiet", "--tags", "gpu"])
    assert result.exit_code == 2
    assert "error: unreachable host(s): dgx-gone" in result.output
    assert "Traceback" not in result.output


def test_site_check_mode_writes_nothing(tmp_path: Path) -> None:
    nodes = [
        {
            "name": f"check-{x}",
            "groups": ["dgx_nodes", "subnet_managers"] if x == "a" else ["subnet_managers"],
            "sm_priority": prio,
            "vars": _local(coreburst_root=str(tmp_path / x)),
        }
        for x, prio in (("a", 15), ("b", 14))
    ]
    inv = write_inventory(_fleet(nodes, coreburst_manage_system=False), tmp_path / "hosts.yml")
    # The subnet manager layer: assert, directory, then templates into that missing directory.
    out = run_playbook("apply", inv, check=True, tags="sm")
    assert out.exit_code == 0, out.to_json()
    assert all(h.changed > 0 for h in out.hosts.values())  # it would change things...
    assert not (tmp_path / "a").exists()  # ...but wrote nothing
    assert not (tmp_path / "b").exists()
