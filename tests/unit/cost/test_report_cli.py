"""``coreburst cost report`` end to end on the recorded 22.05 lab (its saved ``sacct --json``
and burst audit log, tests/fixtures/slurm/sacct-fixtures.md): table, CSV, JSON and PNG agree;
bad input is one line and exit 2."""

from __future__ import annotations

import json
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import pytest
from typer.testing import CliRunner

from coreburst.cost.report import app
from coreburst.sandbox.slurmlab import STACK_YAML
from coreburst.tco.cli import build_scenario
from coreburst.tco.model import scenario_gpu_hour_price

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
SACCT = REPO / "tests" / "fixtures" / "slurm" / "sacct-22.05-recorded.json"
AUDIT = HERE / "burst-audit-recorded.jsonl"
WINDOW = ["--since", "2026-12-04", "--until", "2026-12-05"]
SCENARIO = REPO / "coreburst" / "tco" / "examples" / "team8_85pct.yaml"


@pytest.fixture(name="stack_dir")
def stack_dir_fixture(tmp_path: Path) -> Path:
    text = STACK_YAML.format(
        lab=tmp_path, burst_port_base=30000, suspend_time=4, resume_timeout=40, suspend_timeout=4
    )
    (tmp_path / "Pulumi.lab.yaml").write_text(text)
    return tmp_path


def _run(stack_dir: Path, *args: str) -> tuple[int, str, str]:
    res = CliRunner().invoke(
        app,
        ["report", *WINDOW, "--stack", "lab", "--stack-dir", str(stack_dir),
         "--sacct-json", str(SACCT), "--audit-log", str(AUDIT), *args],
    )  # fmt: skip
    return res.exit_code, res.stdout, res.stderr


def test_json_csv_and_table_agree(stack_dir: Path, tmp_path: Path) -> None:
    code, out, err = _run(stack_dir, "--gpu-hour-usd", "2.35", "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    rows = {r["group"]: r for r in doc["rows"]}
    assert rows["ml"]["core_usd"] == 0.02 and rows["ml"]["jobs"] == 2
    assert doc["idle"]["burst_gpu_h"] == round(288 / 3600, 3)
    assert doc["total"]["burst_usd"] == 0.61  # 40 s of p5.48xlarge at $55.04/h
    for col in ("core_usd", "burst_usd", "total_usd"):
        assert sum(round(r[col] * 100) for r in [*doc["rows"], doc["idle"]]) == round(
            doc["total"][col] * 100
        )
    code, csv_out, _ = _run(stack_dir, "--gpu-hour-usd", "2.35", "--format", "csv")
    lines = [line.split(",") for line in csv_out.splitlines()]
    assert lines[0][0] == "team" and lines[-1][0] == "total"
    assert Fraction(lines[-1][-1]) == Fraction(str(doc["total"]["total_usd"]))
    plot = tmp_path / "cost.png"
    code, table, _ = _run(stack_dir, "--gpu-hour-usd", "2.35", "--plot", str(plot))
    assert code == 0
    assert "(idle burst instances)" in table and "$0.61" in table and f"plot: {plot}" in table
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_owned_rate_from_the_tco_scenario(stack_dir: Path) -> None:
    import yaml

    code, out, err = _run(stack_dir, "--scenario", str(SCENARIO), "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    model = scenario_gpu_hour_price(build_scenario(yaml.safe_load(SCENARIO.read_text()), {}))
    assert Decimal(doc["owned_usd_per_gpu_hour"]) == Decimal(repr(model))
    assert doc["owned_price_source"] == f"TCO scenario {SCENARIO}"


def test_without_an_owned_price_core_is_unpriced(stack_dir: Path) -> None:
    code, out, _ = _run(stack_dir, "--format", "json")
    doc = json.loads(out)
    assert code == 0 and doc["total"]["core_usd"] is None and doc["total"]["total_usd"] is None
    code, table, _ = _run(stack_dir)
    assert "unpriced" in table and "$0.00 " not in table.split("total")[-1].split("\n")[0]
    code, csv_out, _ = _run(stack_dir, "--format", "csv")
    assert csv_out.splitlines()[-1].endswith(",unpriced")


def test_teams_file(stack_dir: Path, tmp_path: Path) -> None:
    teams = tmp_path / "teams.yaml"
    teams.write_text("ml: vision\nresearch: vision\n")
    _, out, _ = _run(stack_dir, "--teams", str(teams), "--format", "json")
    assert [r["group"] for r in json.loads(out)["rows"]] == ["vision"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--since", "soon"], "--since 'soon': give a duration"),
        (["--since", "2026-12-05", "--until", "2026-12-04"], "is not before --until"),
        (["--gpu-hour-usd", "abc"], "--gpu-hour-usd 'abc': give a number"),
        (["--gpu-hour-usd", "-1"], "from 0 to 1,000,000"),
        (["--plot", "cost.svg"], "ending in .png"),
        (["--stack", "nope"], "no stack 'nope'"),
        (["--teams", "__TMP__/teams.yaml"], "mapping of Slurm account to team"),
        (["--sacct-json", "__TMP__/bad.json"], "not UTF-8"),
        (["--audit-log", "__TMP__/audit.jsonl"], "line 1: not an audit record"),
        (["--scenario", "__TMP__/teams.yaml"], "--scenario"),
    ],
)
def test_bad_input_is_one_line_exit_2(
    stack_dir: Path, tmp_path: Path, args: list[str], message: str
) -> None:
    (tmp_path / "teams.yaml").write_text("- not a mapping\n")
    (tmp_path / "bad.json").write_bytes(b'{"jobs": [{"user": "\xff"}]}')
    (tmp_path / "audit.jsonl").write_text("{torn\n")
    args = [a.replace("__TMP__", str(tmp_path)) for a in args]
    code, out, err = _run(stack_dir, *args)
    assert code == 2, (out, err)
    assert message in err and err.count("\n") == 1 and "Traceback" not in err
    assert out == ""
