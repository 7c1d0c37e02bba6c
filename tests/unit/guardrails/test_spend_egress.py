"""Spend projection and egress pricing against figures computed by hand in each test."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from coreburst.common.catalog import load_catalog
from guardrails.egress import GB, project_egress, spike
from guardrails.spend import accrue, crossed, lustre_usd_per_hour, project


def test_projection_mid_month() -> None:
    # 2026-04-10 12:00: 12 h left today; April has 30 days -> 20.5 days = 492 h left
    now = datetime(2026, 4, 10, 12, tzinfo=UTC)
    p = project(ce_actual_usd=10_000.0, accrued_today_usd=600.0, burn_usd_per_hour=50.0, now=now)
    assert p.month_to_date_usd == pytest.approx(10_600.0)
    assert p.projected_today_usd == pytest.approx(600.0 + 50.0 * 12)
    assert p.projected_month_usd == pytest.approx(10_600.0 + 50.0 * 492)


def test_projection_february_leap_year_end() -> None:
    now = datetime(2028, 2, 29, 23, 0, tzinfo=UTC)
    p = project(0.0, 0.0, 10.0, now)
    assert p.projected_month_usd == pytest.approx(10.0)
    assert p.projected_today_usd == pytest.approx(10.0)


def test_accrual_integrates_between_cycles_and_resets_at_midnight() -> None:
    t = datetime(2026, 4, 10, 6, 0, tzinfo=UTC)
    first = accrue(0.0, None, 100.0, t)
    assert first == pytest.approx(600.0)  # assumed since midnight
    assert accrue(first, t, 100.0, t + timedelta(minutes=15)) == pytest.approx(625.0)
    assert accrue(625.0, t, 100.0, datetime(2026, 4, 11, 0, 30, tzinfo=UTC)) == pytest.approx(50.0)


def test_thresholds_crossed() -> None:
    assert crossed(499.99, 1000.0, [50, 80, 100]) == []
    assert crossed(500.0, 1000.0, [100, 50, 80]) == [50]
    assert crossed(800.0, 1000.0, [100, 50, 80]) == [50, 80]
    assert crossed(1200.0, 1000.0, [50, 80, 100]) == [50, 80, 100]


def test_lustre_hourly() -> None:
    # 4,800 GiB x $0.145/GB-month / 730 h
    assert lustre_usd_per_hour(4800, 0.145, 730) == pytest.approx(696.0 / 730)


@pytest.mark.parametrize(
    ("gb", "already", "usd"),
    [
        (100.0, 0.0, 0.0),  # free tier
        (200.0, 0.0, 100 * 0.09),
        (10_240.0 + 1000.0, 0.0, (10_240 - 100) * 0.09 + 1000 * 0.085),
        (100.0, 10_200.0, 40 * 0.09 + 60 * 0.085),  # straddles the 10 TB boundary
        (1000.0, 200_000.0, 1000 * 0.05),
    ],
)
def test_egress_tiers(gb: float, already: float, usd: float) -> None:
    assert load_catalog().internet_egress_cost(gb, already) == pytest.approx(usd)


def test_egress_projection_scales_window_and_adds_nat_processing() -> None:
    cat = load_catalog()
    # 30 min window: 5 GB from an instance and 1 GB through a NAT -> x48 per day
    e = project_egress(
        {"i-1": 5 * GB, "i-2": 0.5 * GB},
        {"nat-1": 1 * GB},
        timedelta(minutes=30),
        month_to_date_gb=20_000.0,
        catalog=cat,
    )
    day_gb = 6.5 * 48
    assert e.projected_day_gb == pytest.approx(day_gb)
    # entirely in the 10-50 TB tier at $0.085, plus NAT $0.045/GB on 48 GB
    assert e.projected_day_usd == pytest.approx(day_gb * 0.085 + 48 * 0.045)
    assert [k for k, _ in e.top_talkers] == ["i-1", "nat-1", "i-2"]


def test_spike_rules() -> None:
    assert spike(600.0, [], 500.0, 3.0, 3) is not None
    assert spike(100.0, [30.0, 30.0], 500.0, 3.0, 3) is None  # too little history
    assert spike(100.0, [30.0, 31.0, 29.0], 500.0, 3.0, 3) is not None
    assert spike(80.0, [30.0, 31.0, 29.0], 500.0, 3.0, 3) is None
