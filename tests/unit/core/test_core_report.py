"""``coreburst core report`` and ``coreburst core price``: allocated versus measured GPU-hours
per team and user from the daemon's state (SQLite), the owned price from the TCO model through
the one formula in common/pricing.py, a PNG plot, and one-line errors (exit 2)."""

from __future__ import annotations

import json
import struct
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from common.catalog import load_catalog
from common.pricing import owned_gpu_hour_usd
from coreburst.cli import app
from guardrails.state import State
from tco.model import (
    Scenario,
    load_defaults,
    owned_monthly,
    owned_usd_per_gpu_hour,
    resolve_rates,
    scenario_gpu_hour_price,
)

ROOT = Path(__file__).resolve().parents[3]
SCENARIO = ROOT / "tco" / "examples" / "team8_85pct.yaml"


@pytest.fixture
def cfg(tmp_path: Path) -> Path:
    now = datetime.now(UTC)
    st = State(tmp_path / "g.db")
    runs = [  # (job, account, user, allocated, used): ml 412 GPU-h, 38 % idle of the measured
        ("1", "ml", "ann", 300.0, 150.0),
        ("2", "ml", "bob", 100.0, 98.4),
        ("3", "ml", "bob", 12.0, None),  # blind: unmeasured, never idle
        ("4", "vision", "cy", 50.0, 50.0),
    ]
    for job, acct, user, alloc, used in runs:
        st.record_core_usage(
            f"{job}:1", now - timedelta(hours=1), job_id=job, user=user, account=acct,
            partition="core", start=now - timedelta(days=2), gpus=8, allocated_gpu_h=alloc,
            used_gpu_h=used, state="busy" if used else "blind",
        )  # fmt: skip
    st.record_core_usage(
        "9:1", now - timedelta(days=9), job_id="9", user="old", account="ml", partition="core",
        start=now - timedelta(days=10), gpus=8, allocated_gpu_h=999.0, used_gpu_h=0.0,
        state="idle",
    )  # fmt: skip  # outside --since 7d
    st.add_spend(now, "ml", burn=10.0, today=100.0, mtd=4210.0, proj=9000.0)
    st.close()
    path = tmp_path / "g.yaml"
    path.write_text(
        f'state: {{path: "{tmp_path}/g.db", audit_log: "{tmp_path}/a.jsonl"}}\n'
        "spend: {scopes: [{name: account}, {name: ml, tag_key: team, tag_value: ml}]}\n"
        "core_idle: {gpu_hour_usd: 1.9}\n"
    )
    return path


def test_the_team_line_shows_core_and_burst(cfg: Path) -> None:
    r = CliRunner().invoke(app, ["core", "report", "--config", str(cfg), "--since", "7d"])
    assert r.exit_code == 0, r.output
    assert (
        "team ml: core 412 GPU-h at $1.90 = $783, burst $4,210 month-to-date; 38 % of "
        "allocated GPU-hours idle (12 GPU-h unmeasured)"
    ) in r.output
    assert "team vision: core 50 GPU-h at $1.90 = $95; 0 % of allocated GPU-hours idle" in r.output
    assert "price: core_idle.gpu_hour_usd" in r.output


def test_json_for_dashboards(cfg: Path, tmp_path: Path) -> None:
    png = tmp_path / "core.png"
    r = CliRunner().invoke(
        app,
        ["core", "report", "--config", str(cfg), "--format", "json", "--plot", str(png),
         "--gpu-hour-usd", "2"],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["usd_per_gpu_hour"] == 2.0 and doc["price_source"] == "--gpu-hour-usd"
    ml = next(t for t in doc["teams"] if t["team"] == "ml")
    assert ml == {
        "team": "ml", "user": None, "jobs": 3, "allocated_gpu_h": 412.0, "used_gpu_h": 248.4,
        "idle_gpu_h": 151.6, "unmeasured_gpu_h": 12.0, "idle_pct": 37.9, "core_usd": 824.0,
        "idle_usd": 303.2, "burst_usd_mtd": 4210.0,
    }  # fmt: skip
    bob = next(u for u in doc["users"] if u["user"] == "bob")
    assert (bob["allocated_gpu_h"], bob["unmeasured_gpu_h"]) == (112.0, 12.0)
    assert doc["total"]["allocated_gpu_h"] == 462.0  # the 9-day-old run is out
    head = png.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", head[16:24]) == (1200, 500)  # IHDR width, height


def test_the_price_comes_from_the_tco_models_amortised_costs(cfg: Path) -> None:
    s = Scenario(gpus=8, utilization_pct=85, utilization_basis="measured")
    r = resolve_rates(s, load_catalog(), load_defaults())
    expected = owned_monthly(r, 1, 0.85) / (r.gpus_per_node * r.hours_per_month)
    assert owned_usd_per_gpu_hour(r, 0.85) == pytest.approx(expected)
    assert owned_gpu_hour_usd(owned_monthly(r, 1, 0.85), 8, r.hours_per_month) == pytest.approx(
        expected
    )
    from_file = scenario_gpu_hour_price(s)  # the example file states this scenario
    out = CliRunner().invoke(app, ["core", "price", "--scenario", str(SCENARIO)])
    assert out.exit_code == 0, out.output
    assert f"core_idle: {{gpu_hour_usd: {from_file:.4f}}}" in out.output
    rep = CliRunner().invoke(
        app, ["core", "report", "--config", str(cfg), "--scenario", str(SCENARIO)]
    )
    assert f"at ${from_file:,.2f} = $" in rep.output and f"TCO scenario {SCENARIO}" in rep.output


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--since", "soon"], "--since: not a duration"),
        (["--since", "0s"], "--since: give a positive duration"),
        (["--gpu-hour-usd", "-1"], "--gpu-hour-usd: give a price"),
        (["--scenario", "/nonexistent.yaml"], "/nonexistent.yaml"),
        (["--format", "xml"], "xml"),
    ],
)
def test_user_errors_are_one_line_exit_2(cfg: Path, args: list[str], says: str) -> None:
    r = CliRunner().invoke(app, ["core", "report", "--config", str(cfg), *args])
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert says in r.output


def test_no_state_yet_is_one_line(tmp_path: Path) -> None:
    g = tmp_path / "g.yaml"
    g.write_text(f'state: {{path: "{tmp_path}/none.db"}}\n')
    r = CliRunner().invoke(app, ["core", "report", "--config", str(g)])
    assert r.exit_code == 2 and "no daemon state at" in r.output
    assert not (tmp_path / "none.db").exists()  # a report never creates the daemon's state


def test_an_empty_state_says_so(tmp_path: Path) -> None:
    State(tmp_path / "e.db").close()
    g = tmp_path / "g.yaml"
    g.write_text(f'state: {{path: "{tmp_path}/e.db", audit_log: "{tmp_path}/a.jsonl"}}\n')
    r = CliRunner().invoke(app, ["core", "report", "--config", str(g), "--since", "2d"])
    assert r.exit_code == 0 and "no Slurm job runs recorded in the last 2d" in r.output
    assert "price: none (give --scenario or --gpu-hour-usd" in r.output
