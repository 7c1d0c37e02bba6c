from __future__ import annotations

import json
from pathlib import Path

import matplotlib.image as mpimg
import pytest
from typer.testing import CliRunner

from coreburst.tco.cli import app

EXAMPLES = Path(__file__).parents[3] / "coreburst" / "tco" / "examples"
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


# -- bounded and finite inputs (issue 12, items 16 and 17) --------------------------------------
def test_a_billion_gpus_in_one_row_is_refused_fast(tmp_path: Path) -> None:
    """Before: ~50 s, then MemoryError (one core size tried per node up to the peak)."""
    import time

    f = tmp_path / "d.csv"
    f.write_text("timestamp,gpus\n2026-01-01T00:00Z,8\n2026-01-01T01:00Z,1e9\n")
    plot = tmp_path / "t.png"
    start = time.monotonic()
    _assert_one_line_error(
        ["--demand", str(f), "--utilization-basis", "allocated", "--plot", str(plot)],
        "line 3: gpus '1e9' must be between 0 and 100000",
    )
    assert time.monotonic() - start < 5
    assert not plot.exists()


def test_demand_at_the_bound_is_sized_quickly(tmp_path: Path) -> None:
    """A year of hourly rows swinging up to the 100,000-GPU bound: 12,500 core sizes x 8,760
    hours, sized in seconds (prefix sums), not the minutes a per-size pass over the hours took."""
    import time

    f = tmp_path / "d.csv"
    rows = [f"2026-01-01T00:00Z,{100_000}"] + [
        f"2026-01-{1 + h // 24:02d}T{h % 24:02d}:00Z,{(h * 7919) % 100_000}" for h in range(1, 744)
    ]
    rows += [f"2026-{2 + m:02d}-01T00:00Z,{(m * 4111) % 100_000}" for m in range(10)]
    f.write_text("timestamp,gpus\n" + "\n".join(rows) + "\n")
    start = time.monotonic()
    result = runner.invoke(
        app, ["--demand", str(f), "--utilization-basis", "allocated", "--format", "json"]
    )
    assert result.exit_code == 0, result.output
    assert time.monotonic() - start < 20
    assert json.loads(result.stdout)["core"]["peak_nodes"] == 12_500


def test_too_many_gpus_flag_is_refused() -> None:
    _assert_one_line_error(
        ["--gpus", "1000000000", "--utilization", "50", "--utilization-basis", "measured"],
        "gpus: Input should be less than or equal to 100000",
    )


@pytest.mark.parametrize(
    ("flag", "key"),
    [
        ("--longest-run-hours", "longest_run_hours"),
        ("--hardware-usd-per-node", "owned.hardware_usd_per_node"),
        ("--power-kw", "owned.power_kw"),
        ("--usd-per-kwh", "owned.usd_per_kwh"),
        ("--on-demand-price", "cloud.on_demand_usd_per_node_hour"),
    ],
)
@pytest.mark.parametrize("value", ["inf", "nan"])
def test_non_finite_flags_are_refused(flag: str, key: str, value: str) -> None:
    _assert_one_line_error([*BASE, flag, value], f"{key}: Input should be")


def test_non_finite_scenario_values_are_refused(tmp_path: Path) -> None:
    f = tmp_path / "s.yaml"
    f.write_text(
        "gpus: 8\nutilization_pct: 50\nutilization_basis: measured\nlongest_run_hours: .inf\n"
    )
    _assert_one_line_error(["--scenario", str(f)], "longest_run_hours: Input should be a finite")


def test_json_output_is_strict_json() -> None:
    result = runner.invoke(app, [*BASE, "--format", "json"])

    def refuse(token: str) -> None:
        raise AssertionError(f"non-finite {token} in JSON output")

    json.loads(result.stdout, parse_constant=refuse)


def test_fast_core_sizing_equals_the_hour_by_hour_sum() -> None:
    """size_core (prefix sums) against cost_of_core (the plain per-hour loop) for each size."""
    import random

    from coreburst.tco.demand import CoreCosts, cost_of_core, size_core

    rng = random.Random(12)
    costs = CoreCosts(8, 10.0, 3.0, 0.3, 60.0)
    for _ in range(30):
        demand = [
            rng.choice([0.0, 0.5, 8.0, 8.000000001, 16.0, rng.uniform(0, 100)])
            for _ in range(rng.randint(1, 150))
        ]
        for option in size_core(demand, costs).options:
            slow = cost_of_core(demand, option.nodes, costs)
            assert option.owned_usd == pytest.approx(slow.owned_usd, rel=1e-9, abs=1e-9)
            assert option.burst_usd == pytest.approx(slow.burst_usd, rel=1e-9, abs=1e-9)
            assert option.core_busy_gpu_hours == pytest.approx(slow.core_busy_gpu_hours, abs=1e-6)
            assert option.burst_gpu_hours == pytest.approx(slow.burst_gpu_hours, abs=1e-6)
