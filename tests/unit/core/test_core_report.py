"""``coreburst core report`` and ``coreburst core price``: allocated versus measured GPU-hours
per team and user from the daemon's state (SQLite), the owned price from the TCO model through
the one formula in coreburst/common/pricing.py, a PNG plot, and one-line errors (exit 2)."""

from __future__ import annotations

import json
import struct
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from coreburst.cli import app
from coreburst.common.catalog import load_catalog
from coreburst.common.pricing import owned_gpu_hour_usd
from coreburst.tco.model import (
    Scenario,
    load_defaults,
    owned_monthly,
    owned_usd_per_gpu_hour,
    resolve_rates,
    scenario_gpu_hour_price,
)
from guardrails.stores.sqlite import State

ROOT = Path(__file__).resolve().parents[3]
SCENARIO = ROOT / "coreburst" / "tco" / "examples" / "team8_85pct.yaml"


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
        "team ml: core 412 GPU-h at $1.90 = $783, burst $4,210 month-to-date; 38 % of the "
        "400 measured GPU-hours idle (12 GPU-h unmeasured)"
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
        "idle_usd": 303.2, "burst_usd_mtd": 4210.0, "burst_scope": "ml",
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


def test_a_long_run_counts_only_its_hours_inside_since(tmp_path: Path) -> None:
    """A 1-GPU job running for 10 days, seen an hour ago: `--since 7d` counts its last 7 days
    (167 GPU-h), not all 239; its used GPU-hours pro rata (the run's efficiency)."""
    now = datetime.now(UTC)
    st = State(tmp_path / "g.db")
    st.record_core_usage(
        "5:1", now - timedelta(hours=1), job_id="5", user="dee", account="ml", partition="core",
        start=now - timedelta(days=10), gpus=1, allocated_gpu_h=239.0, used_gpu_h=59.75,
        state="some-idle",
    )  # fmt: skip
    st.close()
    g = tmp_path / "g.yaml"
    g.write_text(f'state: {{path: "{tmp_path}/g.db", audit_log: "{tmp_path}/a.jsonl"}}\n')
    r = CliRunner().invoke(app, ["core", "report", "--config", str(g), "--format", "json"])
    assert r.exit_code == 0, r.output
    ml = json.loads(r.output)["teams"][0]
    assert ml["allocated_gpu_h"] == pytest.approx(167.0, abs=0.01)
    assert ml["used_gpu_h"] == pytest.approx(167.0 / 4, abs=0.01)
    assert ml["idle_pct"] == 75.0
    r = CliRunner().invoke(app, ["core", "report", "--config", str(g), "--since", "30d"])
    assert "team ml: core 239 GPU-h; 75 % of allocated GPU-hours idle" in r.output


def test_burst_comes_from_the_scope_listing_the_slurm_account(tmp_path: Path) -> None:
    """``spend.scopes[].slurm_accounts`` says which scope's cloud spend is a team's burst; the
    team line names the scope when it is not the team's own name."""
    now = datetime.now(UTC)
    st = State(tmp_path / "g.db")
    for job, acct in (("1", "ml-dev"), ("2", "ml")):
        st.record_core_usage(
            f"{job}:1", now - timedelta(hours=1), job_id=job, user="ann", account=acct,
            partition="core", start=now - timedelta(hours=11), gpus=1, allocated_gpu_h=10.0,
            used_gpu_h=10.0, state="busy",
        )  # fmt: skip
    st.add_spend(now, "research", burn=1.0, today=10.0, mtd=1234.0, proj=2000.0)
    st.add_spend(now, "ml", burn=1.0, today=10.0, mtd=99.0, proj=200.0)
    st.close()
    g = tmp_path / "g.yaml"
    g.write_text(
        f'state: {{path: "{tmp_path}/g.db", audit_log: "{tmp_path}/a.jsonl"}}\n'
        "spend: {scopes: [{name: ml}, {name: research, slurm_accounts: [ml-dev, ml]}]}\n"
    )
    r = CliRunner().invoke(app, ["core", "report", "--config", str(g)])
    assert r.exit_code == 0, r.output
    # listed in research's slurm_accounts: research's spend, even though a scope is named ml
    assert "team ml: core 10 GPU-h, burst $1,234 month-to-date (spend scope research)" in r.output
    assert "team ml-dev: core 10 GPU-h, burst $1,234 month-to-date (spend scope research)" in (
        r.output
    )


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (b"gpus: \xff\n", "x.yaml: not UTF-8 at byte 6 (line 1); save the scenario as UTF-8"),
        (b"- a\n", "x.yaml: a scenario is a mapping of keys"),
        (b"gpus: [\n", "x.yaml: not valid YAML"),
    ],
)
def test_a_bad_scenario_is_one_line_naming_the_file_once(
    tmp_path: Path, content: bytes, says: str
) -> None:
    f = tmp_path / "x.yaml"
    f.write_bytes(content)
    r = CliRunner().invoke(app, ["core", "price", "--scenario", str(f)])
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert says in r.output and r.output.count("x.yaml") == 1, r.output


def test_a_non_utf8_config_is_one_line(tmp_path: Path) -> None:
    g = tmp_path / "g.yaml"
    g.write_bytes(b'state: {path: "/tmp/\xff.db"}\n')
    r = CliRunner().invoke(app, ["core", "report", "--config", str(g)])
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert "not UTF-8 at byte" in r.output and len(r.output.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("", "is a directory; give a file name such as"),  # the folder itself
        ("core", "give a file name ending in .png"),  # matplotlib would write core.png
    ],
)
def test_a_plot_path_that_is_not_a_png_file_is_one_line(
    cfg: Path, tmp_path: Path, name: str, says: str
) -> None:
    target = tmp_path / name if name else tmp_path
    r = CliRunner().invoke(app, ["core", "report", "--config", str(cfg), "--plot", str(target)])
    assert r.exit_code == 2 and says in r.output and "Traceback" not in r.output
    assert not (tmp_path / "core.png").exists() and not tmp_path.with_suffix(".png").exists()


def test_small_figures_keep_a_decimal_and_json_burst_is_cents(tmp_path: Path) -> None:
    now = datetime.now(UTC)
    st = State(tmp_path / "g.db")
    st.record_core_usage(
        "1:1", now - timedelta(minutes=5), job_id="1", user="ann", account="ml",
        partition="core", start=now - timedelta(hours=3, minutes=35), gpus=1,
        allocated_gpu_h=3.5, used_gpu_h=None, state="blind",
    )  # fmt: skip
    st.add_spend(now, "ml", burn=1.0, today=1.0, mtd=97.22204444444445, proj=2.0)
    st.close()
    g = tmp_path / "g.yaml"
    g.write_text(
        f'state: {{path: "{tmp_path}/g.db", audit_log: "{tmp_path}/a.jsonl"}}\n'
        "spend: {scopes: [{name: ml}]}\n"
    )
    r = CliRunner().invoke(app, ["core", "report", "--config", str(g), "--gpu-hour-usd", "1.9"])
    assert "team ml: core 3.5 GPU-h at $1.90 = $7, burst $97 month-to-date;" in r.output
    png = tmp_path / "c.png"
    r = CliRunner().invoke(
        app, ["core", "report", "--config", str(g), "--format", "json", "--plot", str(png)]
    )
    assert json.loads(r.output)["teams"][0]["burst_usd_mtd"] == 97.22
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"  # an unmeasured-only chart renders


def test_the_json_schema_is_stable(cfg: Path) -> None:
    """Dashboards key on these names: the top level, a team/user/total line and a job run. New
    keys may be added; none of these may go or be renamed."""
    r = CliRunner().invoke(app, ["core", "report", "--config", str(cfg), "--format", "json"])
    doc = json.loads(r.output)
    assert set(doc) >= {
        "since", "until", "usd_per_gpu_hour", "price_source", "teams", "users", "total", "jobs",
    }  # fmt: skip
    line = {
        "team", "user", "jobs", "allocated_gpu_h", "used_gpu_h", "idle_gpu_h",
        "unmeasured_gpu_h", "idle_pct", "core_usd", "idle_usd", "burst_usd_mtd", "burst_scope",
    }  # fmt: skip
    for x in [*doc["teams"], *doc["users"], doc["total"]]:
        assert set(x) == line
    assert [j["job_id"] for j in doc["jobs"]] == ["1", "2", "3", "4"]  # most idle GPU-h first
    ann = doc["jobs"][0]
    assert ann == {
        "job_id": "1", "team": "ml", "user": "ann", "partition": "core", "state": "busy",
        "gpus": 8, "start": ann["start"], "last_seen": ann["last_seen"],
        "efficiency_pct": 50.0, "allocated_gpu_h": 300.0, "used_gpu_h": 150.0,
        "idle_gpu_h": 150.0, "idle_usd": 285.0,
    }  # fmt: skip
    blind = doc["jobs"][2]  # job 3: unmeasured, never idle
    assert (blind["efficiency_pct"], blind["idle_gpu_h"], blind["idle_usd"]) == (None, None, None)
    r = CliRunner().invoke(app, ["core", "report", "--config", str(cfg)])
    assert "Jobs with the most idle GPU-hours, last 7d" in r.output
