"""Fleet model, inventory rendering, the runner's event handling and CLI bad-input paths."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from coreburst.onprem.cli import app
from coreburst.onprem.fleet import Fleet, FleetError, inventory_names, load_fleet, render_inventory
from coreburst.onprem.runner import EventTracker, HostReport, RunOutcome, check_limit, summary_table

ROOT = Path(__file__).resolve().parents[3]
FLEET = ROOT / "ansible" / "fleet.example.yml"
FIX = ROOT / "tests" / "fixtures" / "onprem"


def _fleet_data() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(FLEET.read_text())
    return data


def _write(tmp_path: Path, data: Any, name: str = "fleet.yml") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return path


# fleet --------------------------------------------------------------------------------


def test_example_fleet_renders_the_example_inventory_shape() -> None:
    inv = render_inventory(load_fleet(FLEET))
    example = yaml.safe_load((ROOT / "ansible/inventory/example/hosts.yml").read_text())
    assert inventory_names(inv) == inventory_names(example)
    children = inv["all"]["children"]
    assert children["subnet_managers"]["hosts"] == {
        "dgx-01": {"coreburst_sm_priority": 15},
        "dgx-02": {"coreburst_sm_priority": 14},
    }
    assert children["dgx_nodes"]["vars"]["coreburst_gpu_count"] == 8
    assert inv["all"]["vars"]["coreburst_driver_version"] == "550.90.07"


def test_example_group_vars_match_the_example_fleet() -> None:
    """The hand-written group_vars and the fleet file must describe the same fleet."""
    inv = render_inventory(load_fleet(FLEET))
    gv = ROOT / "ansible/inventory/example/group_vars"
    for group, rendered in (
        ("all", inv["all"]["vars"]),
        ("dgx_nodes", inv["all"]["children"]["dgx_nodes"]["vars"]),
    ):
        written = yaml.safe_load((gv / f"{group}.yml").read_text())
        for key, value in written.items():
            if key in rendered:
                assert rendered[key] == value, key


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.update(colour="red"), "colour: Extra inputs are not permitted"),
        (lambda d: d["nodes"][0].update(groups=["gpu_nodes"]), "nodes.0.groups.0"),
        (lambda d: d["nodes"][1].update(sm_priority=15), "priorities must be distinct"),
        (lambda d: d["nodes"][1].update(groups=["dgx_nodes"]), "need at least 2"),
        (lambda d: d["nodes"][0].update(sm_priority=16), "less than or equal to 15"),
        (lambda d: d["expectations"]["hcas"][0].update(rate=300), "expectations.hcas.0.rate"),
        (
            lambda d: d["software"].update(fabricmanager_version="550.54.15"),
            "must equal driver_version 550.90.07",
        ),
    ],
)
def test_bad_fleet_is_one_line_naming_the_key(tmp_path: Path, mutate: Any, message: str) -> None:
    data = _fleet_data()
    mutate(data)
    with pytest.raises(FleetError, match=message) as exc:
        load_fleet(_write(tmp_path, data))
    assert "\n" not in str(exc.value)


def test_malformed_yaml(tmp_path: Path) -> None:
    with pytest.raises(FleetError, match=r"line 2 malformed YAML"):
        load_fleet(_write(tmp_path, "name: x\n  nodes: [\n"))
    with pytest.raises(FleetError, match="expected a YAML mapping"):
        load_fleet(_write(tmp_path, "- a\n- b\n"))


def test_check_limit() -> None:
    groups, hosts = {"all", "dgx_nodes", "subnet_managers"}, {"dgx-01"}
    check_limit("dgx_nodes:!dgx-01,dgx-*", groups, hosts)
    with pytest.raises(FleetError, match="--limit 'gpu_nodes' matches no group or host"):
        check_limit("dgx_nodes:gpu_nodes", groups, hosts)


# runner event handling ----------------------------------------------------------------


def _ev(event: str, host: str, task: str = "t", **res: Any) -> dict[str, Any]:
    return {"event": event, "event_data": {"host": host, "task": task, "res": res}}


def test_event_tracker_counts_and_collects_checks() -> None:
    checks = [{"check": "gpu_count", "status": "fail", "message": "dgx-01 gpus: count is 7"}]
    t = EventTracker()
    for e in (
        {"event": "playbook_on_task_start", "event_data": {"task": "Query GPUs"}},
        _ev("runner_on_ok", "dgx-01", changed=False),
        _ev("runner_on_ok", "dgx-01", task="Write", changed=True),
        _ev("runner_on_ok", "dgx-01", ansible_facts={"acceptance_results": checks}),
        _ev("runner_on_failed", "dgx-01", task="Assert", msg="dgx-01 gpus: count is 7"),
        _ev("runner_on_unreachable", "dgx-02", msg="ssh: connect refused\n"),
        {"event": "verbose", "stdout": "noise"},
    ):
        assert t(e) is True
    a, b = t.hosts["dgx-01"], t.hosts["dgx-02"]
    assert (a.ok, a.changed, a.failed, a.changed_tasks) == (3, 1, 1, ["Write"])
    assert a.failed_checks == checks
    assert a.errors == ["Assert: dgx-01 gpus: count is 7"]
    assert b.unreachable and b.errors == ["unreachable: ssh: connect refused"]


def test_report_json_and_summary_table() -> None:
    hr = HostReport(status="failed", checks=[{"status": "fail", "message": "m"}])
    out = RunOutcome("validate", "validate.yml", 2, 1, {"dgx-01": hr})
    data = json.loads(out.to_json())
    assert data["hosts"]["dgx-01"]["checks"] == [{"status": "fail", "message": "m"}]
    assert summary_table(out).row_count == 1


# filter plugin ------------------------------------------------------------------------


def _plugin() -> ModuleType:
    path = ROOT / "ansible/filter_plugins/coreburst_onprem.py"
    spec = importlib.util.spec_from_file_location("coreburst_onprem_filters", path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_filter_plugin_judges_registered_results() -> None:
    f = _plugin().FilterModule().filters()
    probe = {"stdout": (FIX / "ibstat_rate200.txt").read_text(), "rc": 0}
    res = f["coreburst_ib_checks"](probe, "dgx-01", [{"name": "mlx5_3", "rate": 400}])
    assert f["coreburst_failures"](res) == ["dgx-01 mlx5_3/1: rate is 200, expected 400"]
    sm = {"stdout": "", "stderr": (FIX / "sminfo_no_sm.txt").read_text(), "rc": 1}
    assert f["coreburst_failures"](f["coreburst_sm_checks"](sm, "dgx-01"))


def test_filter_plugin_reports_a_missing_probe() -> None:
    f = _plugin().FilterModule().filters()
    missing = {"stdout": "", "rc": 2, "msg": "[Errno 2] No such file or directory: b'nvidia-smi'"}
    res = f["coreburst_gpu_checks"](missing, "dgx-01", 8, "NVIDIA H100 80GB HBM3", "550.90.07", 16)
    assert res[0]["message"].startswith("dgx-01 nvidia-smi: probe failed with rc=2 ([Errno 2]")


# CLI bad input: one line on stderr, exit 2, no traceback ------------------------------


def _cli(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


def _assert_bad_input(result: Any, fragment: str) -> None:
    assert result.exit_code == 2, result.output
    assert fragment in result.output
    assert "Traceback" not in result.output
    assert len([ln for ln in result.output.splitlines() if ln.startswith("error:")]) == 1


def test_cli_unknown_group_in_limit() -> None:
    r = _cli("validate", "--fleet", str(FLEET), "--limit", "gpu_nodes")
    _assert_bad_input(r, "error: --limit 'gpu_nodes' matches no group or host")


def test_cli_malformed_fleet(tmp_path: Path) -> None:
    r = _cli("apply", "--fleet", str(_write(tmp_path, "nodes: [\n")))
    _assert_bad_input(r, "malformed YAML")


def test_cli_malformed_inventory(tmp_path: Path) -> None:
    r = _cli("validate", "--inventory", str(_write(tmp_path, "all: {children: [\n", "hosts.yml")))
    _assert_bad_input(r, "malformed YAML")


def test_cli_needs_exactly_one_source() -> None:
    _assert_bad_input(_cli("validate"), "exactly one of --fleet")


def test_cli_render_inventory(tmp_path: Path) -> None:
    out = tmp_path / "inv" / "hosts.yml"
    assert _cli("render-inventory", str(FLEET), "-o", str(out)).exit_code == 0
    assert "dgx_nodes" in yaml.safe_load(out.read_text())["all"]["children"]
    r = _cli("render-inventory", str(FLEET))
    assert r.exit_code == 0 and yaml.safe_load(r.output)["all"]["vars"]["coreburst_fleet"]


def test_cli_render_inventory_bad_fleet(tmp_path: Path) -> None:
    data = _fleet_data()
    data["nodes"][0]["gpus"] = 8
    r = _cli("render-inventory", str(_write(tmp_path, data)))
    _assert_bad_input(r, "nodes.0.gpus: Extra inputs are not permitted")


def test_fleet_model_is_strict() -> None:
    assert Fleet.model_config.get("extra") == "forbid"


def test_live_progress_shows_each_host() -> None:
    import io

    from rich.console import Console

    from coreburst.onprem.runner import _progress

    buf = io.StringIO()
    console = Console(file=buf, width=120, force_terminal=False)
    progress = _progress(console)
    assert progress is not None
    t = EventTracker(progress)
    with progress:
        t({"event": "playbook_on_task_start", "event_data": {"task": "Run dcgmi diag"}})
        t(_ev("runner_on_ok", "dgx-01", task="Run dcgmi diag", changed=False))
    text = buf.getvalue()
    assert "dgx-01" in text and "ok=1 changed=0 failed=0" in text and "Run dcgmi diag" in text


# hostile input (issue 12, item 15) ----------------------------------------------------


def test_cli_render_inventory_on_a_directory(tmp_path: Path) -> None:
    """Before: IsADirectoryError traceback (the reader caught only FileNotFoundError)."""
    r = _cli("render-inventory", str(tmp_path))
    _assert_bad_input(r, f"cannot read fleet file {tmp_path}: it is a directory")
    r = _cli("validate", "--inventory", str(tmp_path / "nope.yml"))
    _assert_bad_input(r, "no such")


def test_cli_render_inventory_into_a_directory(tmp_path: Path) -> None:
    r = _cli("render-inventory", str(FLEET), "-o", str(tmp_path))
    _assert_bad_input(r, f"cannot write inventory {tmp_path}: it is a directory")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("mutate", "where", "value"),
    [
        (lambda d, v: d["nodes"][0].update(address=v), "nodes.0.address", "10.10.0.999"),
        (lambda d, v: d["nodes"][0].update(address=v), "nodes.0.address", "256.10.0.1"),
        (lambda d, v: d["nodes"][0].update(address=v), "nodes.0.address", "10.10.0"),
        (lambda d, v: d["nodes"][0].update(address=v), "nodes.0.address", "fd00::zz"),
        (lambda d, v: d["nodes"][0].update(address=v), "nodes.0.address", "dgx 01"),
        (
            lambda d, v: d["nodes"][0]["ipoib"][0].update(address=v),
            "nodes.0.ipoib.0.address",
            "10.20.0.999/16",
        ),
        (
            lambda d, v: d["nodes"][0]["ipoib"][0].update(address=v),
            "nodes.0.ipoib.0.address",
            "10.20.0.11/33",
        ),
        (
            lambda d, v: d["nodes"][0]["ipoib"][0].update(address=v),
            "nodes.0.ipoib.0.address",
            "10.20.0.11",
        ),
    ],
)
def test_invalid_addresses_are_not_rendered(
    tmp_path: Path, mutate: Any, where: str, value: str
) -> None:
    """Before: 10.10.0.999 went into the inventory as ansible_host. Whether a value is an IP
    address is Python's ipaddress module's call (RFC 791 dotted quad, RFC 4291 for IPv6)."""
    data = _fleet_data()
    mutate(data, value)
    out = tmp_path / "out" / "hosts.yml"
    r = _cli("render-inventory", str(_write(tmp_path, data)), "-o", str(out))
    _assert_bad_input(r, f"{where}: {value!r} is n")
    assert not out.exists(), "nothing is written for a bad fleet"


def test_host_names_and_ipv6_are_valid_ansible_hosts(tmp_path: Path) -> None:
    data = _fleet_data()
    data["nodes"][0]["address"] = "dgx-01.lab.example.com"
    data["nodes"][1]["address"] = "fd00::12"
    r = _cli("render-inventory", str(_write(tmp_path, data)))
    assert r.exit_code == 0, r.output
    hosts = yaml.safe_load(r.output)["all"]["children"]["dgx_nodes"]["hosts"]
    addresses = {h["ansible_host"] for h in hosts.values() if h and "ansible_host" in h}
    assert {"dgx-01.lab.example.com", "fd00::12"} <= addresses
