"""Cost model checked against arithmetic written out here, not against the model's helpers."""

from __future__ import annotations

import math
from typing import Any

import pytest

from coreburst.common.catalog import load_catalog
from coreburst.tco.demand import parse_demand_csv
from coreburst.tco.model import Scenario, analyse
from coreburst.tco.rules import rule_of_thumb

H = 730  # hours per month, as the catalog states (asserted below)

# One node with round numbers: $100k hardware, no fabric/maintenance/colo/staff, a 10 kW draw
# at PUE 1.0 and $0.10/kWh (= $1 per node-hour), on-demand at $50 per node-hour.
SIMPLE_OWNED: dict[str, Any] = {
    "hardware_usd_per_node": 100_000,
    "networking_usd_per_node": 0,
    "depreciation_years": 4,
    "maintenance_fraction_per_year": 0,
    "power_kw": 10,
    "pue": 1.0,
    "usd_per_kwh": 0.1,
    "idle_power_fraction": 1.0,
    "colo_usd_per_kw_month": 0,
    "staff_usd_per_fte_year": 0,
    "staff_fte_per_node": 0,
}
SIMPLE_CLOUD: dict[str, Any] = {
    "on_demand_usd_per_node_hour": 50,
    "spot_usd_per_node_hour": 20,
    "capacity_block_usd_per_node_hour": 40,
    "commitment_discount_1y": 0.3,
    "commitment_discount_3y": 0.5,
    "spot_interruptions_per_node_day": 2,
    "checkpoint_interval_minutes": 60,
    "restart_minutes": 30,
    "checkpoint_overhead_fraction": 0.1,
}


def simple(**kw: Any) -> Scenario:
    owned = {**SIMPLE_OWNED, **kw.pop("owned", {})}
    cloud = {**SIMPLE_CLOUD, **kw.pop("cloud", {})}
    base: dict[str, Any] = {"gpus": 8, "utilization_pct": 100, "utilization_basis": "measured"}
    return Scenario.model_validate({**base, **kw, "owned": owned, "cloud": cloud})


def opt(result: Any, name: str) -> Any:
    return next(o for o in result.options if o.name == name)


def test_catalog_month_is_730_hours() -> None:
    assert load_catalog().hours_per_month == H


def test_break_even_month_against_on_demand() -> None:
    r = analyse(simple(horizon_months=12))
    # rent: 50 $/h * 730 h = 36,500 $/month; own: 100,000 up front + 10 kW*0.1 $*730 h = 730/month
    # 36,500 m >= 100,000 + 730 m  <=>  m >= 100,000 / 35,770 = 2.796  -> month 3
    assert math.ceil(100_000 / (36_500 - 730)) == 3
    assert opt(r, "on-demand").break_even_month == 3
    assert opt(r, "on-demand").cumulative_usd[3] == pytest.approx(109_500)
    assert opt(r, "owned").cumulative_usd[3] == pytest.approx(102_190)


def test_utilization_crossover_against_on_demand() -> None:
    r = analyse(simple())
    # owned per month: 100,000/48 amortised + 730 power (idle draw = full draw here)
    # rent per month at utilization u: 36,500 u  ->  u* = (2,083.33 + 730) / 36,500 = 7.708%
    expected = 100 * (100_000 / 48 + 730) / 36_500
    assert expected == pytest.approx(7.7078, abs=1e-4)
    assert opt(r, "on-demand").crossover_utilization_pct == pytest.approx(expected)
    assert r.crossover_utilization_pct == pytest.approx(expected)


def test_crossover_with_power_that_follows_load() -> None:
    r = analyse(simple(owned={"idle_power_fraction": 0.5}))
    # owned(u) = 2,083.33 + 730 (0.5 + 0.5 u); rent(u) = 36,500 u
    # u* = (2,083.33 + 365) / (36,500 - 365) = 6.776%
    expected = 100 * (100_000 / 48 + 365) / (36_500 - 365)
    assert opt(r, "on-demand").crossover_utilization_pct == pytest.approx(expected)


def test_owned_beats_renting_just_above_crossover_and_not_below() -> None:
    u_star = 100 * (100_000 / 48 + 730) / 36_500
    above = analyse(simple(utilization_pct=u_star + 0.5))
    below = analyse(simple(utilization_pct=u_star - 0.5))
    assert opt(above, "owned").monthly_usd < opt(above, "on-demand").monthly_usd
    assert opt(below, "owned").monthly_usd > opt(below, "on-demand").monthly_usd


def test_spot_needs_more_gpu_hours_for_interruptions_and_checkpoints() -> None:
    r = analyse(simple())
    # 2 interruptions/day each losing 60/2 + 30 min = 1 h -> 2/24 of the time lost;
    # 10% checkpoint overhead -> 1.1 / (1 - 1/12) = 1.2 GPU-hours bought per GPU-hour of work
    assert r.spot_hours_factor == pytest.approx(1.2)
    assert opt(r, "spot").monthly_usd == pytest.approx(20 * 1.2 * 730)


def test_cost_per_used_gpu_hour() -> None:
    r = analyse(simple(utilization_pct=50))
    used = 8 * 0.5 * 730  # 2,920 GPU-hours per month
    assert r.used_gpu_hours_per_month == pytest.approx(used)
    assert opt(r, "on-demand").usd_per_used_gpu_hour == pytest.approx(50 * 0.5 * 730 / used)
    assert opt(r, "owned").usd_per_used_gpu_hour == pytest.approx((100_000 / 48 + 730) / used)


def test_commitment_bills_every_hour_of_the_whole_term() -> None:
    r = analyse(simple(utilization_pct=10, horizon_months=18))
    # 1-year at 30% off: 35 $/h * 730 h = 25,550/month; 18 months -> two whole terms billed
    assert opt(r, "commit-1y").monthly_usd == pytest.approx(25_550)
    assert opt(r, "commit-1y").total_usd == pytest.approx(25_550 * 24)
    assert opt(r, "commit-3y").total_usd == pytest.approx(25 * 730 * 36)


def test_owned_total_is_net_of_remaining_book_value_and_rebuys_after_life() -> None:
    r = analyse(simple(horizon_months=12))
    # 100,000 + 730*12 cash, less 36/48 of the hardware still on the books
    assert opt(r, "owned").total_usd == pytest.approx(100_000 + 730 * 12 - 75_000)
    r60 = analyse(simple(horizon_months=60))
    owned = opt(r60, "owned")
    assert owned.cumulative_usd[48] == pytest.approx(100_000 + 730 * 48)
    assert owned.cumulative_usd[49] == pytest.approx(200_000 + 730 * 49)
    # second node bought at month 49, 12 of its 48 months used by month 60
    assert owned.total_usd == pytest.approx(200_000 + 730 * 60 - 75_000)


def test_optimal_core_size_matches_brute_force() -> None:
    demand = [8, 8, 16, 24, 8, 0, 16, 8]
    csv_text = "timestamp,gpus\n" + "".join(
        f"2026-01-01T{h:02d}:00:00Z,{g}\n" for h, g in enumerate(demand)
    )
    # owned node-hour: 350,400 / (48*730) = 10 $ amortised + 1 $ power; burst 20 $/node-hour
    s = simple(
        gpus=None,
        utilization_pct=None,
        demand_file="d.csv",
        owned={"hardware_usd_per_node": 48 * 730 * 10},
        cloud={"on_demand_usd_per_node_hour": 20, "burst_market": "on-demand"},
    )
    r = analyse(s, parse_demand_csv(csv_text, "d.csv"))

    def brute(k: int) -> float:
        total = 0.0
        for d in demand:
            total += 11 * k + 20 * math.ceil(max(0, d - 8 * k) / 8)
        return total

    costs = {k: brute(k) for k in range(4)}
    assert costs == {0: 220, 1: 168, 2: 196, 3: 264}
    best = min(costs, key=lambda k: (costs[k], k))
    assert r.core is not None
    assert r.core.nodes == best == 1
    assert r.core.peak_nodes == 3
    assert r.core.total_usd_per_month == pytest.approx(168 * 730 / 8)
    assert r.core.cost_by_core_nodes == pytest.approx([costs[k] * 730 / 8 for k in range(4)])
    # busy core GPU-hours 8*7 = 56 of 8 GPUs * 8 h; overflow 8 + 16 + 8 = 32 of 88 GPU-hours
    assert r.core.core_utilization_pct == pytest.approx(100 * 56 / 64)
    assert r.core.burst_share_pct == pytest.approx(100 * 32 / 88)
    assert r.recommendation.computed_verdict in ("hybrid", "cloud")
    assert any(o.kind == "hybrid" for o in r.options)


@pytest.mark.parametrize(
    ("pct", "steady", "verdict"),
    [
        (29.9, True, "cloud"),
        (30.0, True, "hybrid"),
        (70.0, True, "hybrid"),
        (70.1, True, "own"),
        (70.1, False, "hybrid"),
    ],
)
def test_rule_of_thumb_boundaries(pct: float, steady: bool, verdict: str) -> None:
    assert rule_of_thumb(pct, steady=steady, longest_run_hours=0).verdict == verdict


def test_72_hour_test_is_explained() -> None:
    advice = rule_of_thumb(50, steady=True, longest_run_hours=96)
    assert any("72" in reason for reason in advice.reasons)
    assert not any("72" in r for r in rule_of_thumb(50, True, 72).reasons)


def test_numbers_win_over_rule_of_thumb() -> None:
    # 85% steady says "own", but a $5M node cannot pay back against $50/h on-demand
    r = analyse(simple(utilization_pct=85, owned={"hardware_usd_per_node": 5_000_000}))
    rec = r.recommendation
    assert rec.rule_verdict == "own"
    assert rec.verdict == rec.computed_verdict == "cloud"
    assert rec.numbers_override_rule
    assert "numbers win" in rec.explanation


def test_allocated_basis_is_reported_and_warned() -> None:
    r = analyse(simple(utilization_basis="allocated"))
    assert r.utilization_basis == "allocated"
    assert r.warnings[0].startswith("utilization is allocated")
    m = analyse(simple())
    assert m.utilization_basis == "measured"
    assert not any("allocated" in w for w in m.warnings)


def test_catalog_power_is_the_default_node_draw() -> None:
    owned = {k: v for k, v in SIMPLE_OWNED.items() if k != "power_kw"}
    s = Scenario.model_validate(
        {"gpus": 8, "utilization_pct": 50, "utilization_basis": "measured", "owned": owned}
    )
    assert analyse(s).node_power_kw == load_catalog().instance("p5.48xlarge").power_kw.value
