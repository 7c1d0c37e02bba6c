from __future__ import annotations

import json
from pathlib import Path

import matplotlib.image as mpimg
import pytest
from typer.testing import CliRunner

from infra.tco.cli import app

EXAMPLES = Path(__file__).parents[3] / "infra" / "tco" / "examples"
runner = CliRunner()
BASE = ["--gpus", "8", "--utilization", "50", "--utilization-basis", "measured"]


@pytest.mark.parametrize("name", ["team8_25pct", "team8_85pct", "lab256_bursty"])
def test_example_scenarios_print_a_recommendation(name: str) -> None:
    result = runner.invoke(app, ["--scenario", str(EXAMPLES / f"{name}.yaml")])
    assert result.exit_code == 0, result.output
    assert "Recommendation:" in result.output
    assert "Rule of thumb:" in result.output


def test_example_verdicts() -> None:
    def verdict(name: str) -> str:
        out = runner.invoke(app, ["--scenario", str(EXAMPLES / name), "--format", "json"])
        assert out.exit_code == 0, out.output
        return str(json.loads(out.stdout)["recommendation"]["verdict"])

    assert verdict("team8_25pct.yaml") == "cloud"
    assert verdict("team8_85pct.yaml") == "own"
    assert verdict("lab256_bursty.yaml") == "hybrid"


def test_json_output_and_flags_override_scenario() -> None:
    result = runner.invoke(
        app,
        [
            "--scenario",
            str(EXAMPLES / "team8_25pct.yaml"),
            "--utilization",
            "85",
            "--format",
            "json",
        ],
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["utilization_pct"] == pytest.approx(85)
    assert data["utilization_basis"] == "measured"
    assert {o["name"] for o in data["options"]} >= {"on-demand", "spot", "owned", "commit-3y"}


def test_allocated_basis_warns_in_table() -> None:
    result = runner.invoke(
        app, ["--gpus", "8", "--utilization", "60", "--utilization-basis", "allocated"]
    )
    assert result.exit_code == 0, result.output
    assert "allocated utilization" in result.output
    assert "warning: utilization is allocated" in result.output


def test_plot_is_a_png_of_the_expected_size(tmp_path: Path) -> None:
    out = tmp_path / "tco.png"
    result = runner.invoke(app, [*BASE, "--plot", str(out)])
    assert result.exit_code == 0, result.output
    image = mpimg.imread(out)
    assert image.shape[:2] == (500, 1200)


def _assert_one_line_error(args: list[str], fragment: str) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error:")
    assert fragment in lines[0]


def test_negative_price_is_rejected() -> None:
    _assert_one_line_error([*BASE, "--on-demand-price", "-5"], "on_demand_usd_per_node_hour")


def test_negative_hardware_price_is_rejected() -> None:
    _assert_one_line_error([*BASE, "--hardware-usd-per-node", "-1"], "hardware_usd_per_node")


def test_utilization_over_100_is_rejected() -> None:
    _assert_one_line_error(
        ["--gpus", "8", "--utilization", "120", "--utilization-basis", "measured"],
        "utilization_pct",
    )


def test_missing_basis_is_rejected() -> None:
    _assert_one_line_error(["--gpus", "8", "--utilization", "50"], "utilization_basis")


def test_empty_demand_file_is_rejected(tmp_path: Path) -> None:
    f = tmp_path / "d.csv"
    f.write_text("")
    _assert_one_line_error(["--demand", str(f), "--utilization-basis", "allocated"], "empty")


def test_malformed_demand_csv_is_rejected(tmp_path: Path) -> None:
    f = tmp_path / "d.csv"
    f.write_text("timestamp,gpus\n2026-01-01T00:00Z,8\nnot-a-time,8\n")
    _assert_one_line_error(["--demand", str(f), "--utilization-basis", "allocated"], "line 3")


def test_missing_demand_file_is_rejected(tmp_path: Path) -> None:
    _assert_one_line_error(
        ["--demand", str(tmp_path / "nope.csv"), "--utilization-basis", "allocated"],
        "cannot read demand file",
    )


def test_unknown_scenario_key_is_rejected(tmp_path: Path) -> None:
    f = tmp_path / "s.yaml"
    f.write_text("gpus: 8\nutilization_pct: 50\nutilization_basis: measured\ncolour: red\n")
    _assert_one_line_error(["--scenario", str(f)], "colour")


def test_bad_yaml_scenario_is_rejected(tmp_path: Path) -> None:
    f = tmp_path / "s.yaml"
    f.write_text("gpus: [8\n")
    _assert_one_line_error(["--scenario", str(f)], "not valid YAML")


def test_unknown_instance_type_is_rejected() -> None:
    _assert_one_line_error([*BASE, "--instance-type", "p9.huge"], "p9.huge")
