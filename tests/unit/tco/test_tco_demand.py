from __future__ import annotations

import pytest

from coreburst.tco.demand import DemandError, parse_demand_csv


def test_series_is_bucketed_by_hour() -> None:
    h = parse_demand_csv(
        "timestamp,gpus\n"
        "2026-01-01T00:00:00Z,8\n2026-01-01T00:30:00Z,16\n"  # same hour: mean 12
        "2026-01-01T01:00:00Z,4\n"
        "2026-01-01T03:00:00Z,0\n"  # 02:00 missing
    )
    assert h.gpus == (12.0, 4.0, 0.0)
    assert h.missing_hours == 1
    assert h.basis is None


def test_fleet_utilization_file_is_measured_demand() -> None:
    h = parse_demand_csv(
        "timestamp,instance_id,gpu_index,utilization_pct\n"
        "2026-01-01T00:00:00Z,i-1,0,100\n"
        "2026-01-01T00:00:00Z,i-1,1,50\n"
        "2026-01-01T00:30:00Z,i-1,1,0\n"  # GPU 1 averages 25% this hour
        "2026-01-01T01:00:00Z,i-2,0,40\n"
    )
    assert h.gpus == pytest.approx((1.25, 0.4))
    assert h.basis == "measured"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty"),
        ("\n\n", "empty"),
        ("timestamp,gpus\n", "no rows"),
        ("time,count\n2026-01-01T00:00Z,1\n", "header"),
        ("timestamp,gpus\nyesterday,8\n", "line 2: timestamp"),
        ("timestamp,gpus\n2026-01-01T00:00Z,-8\n", "must be between 0 and 100000"),
        ("timestamp,gpus\n2026-01-01T00:00Z,1e9\n", "must be between 0 and 100000"),
        ("timestamp,gpus\n2026-01-01T00:00Z,inf\n", "must be between 0 and 100000"),
        (
            "timestamp,gpus\n2016-01-01T00:00Z,8\n2026-06-01T00:00Z,8\n",
            "at most 87,840 \\(ten years\\)",
        ),
        ("timestamp,gpus\n2026-01-01T00:00Z,eight\n", "not a number"),
        ("timestamp,gpus\n2026-01-01T00:00Z,8,9\n", "expected 2 columns"),
        (
            "timestamp,instance_id,gpu_index,utilization_pct\n2026-01-01T00:00Z,i-1,0,120\n",
            "between 0 and 100",
        ),
    ],
)
def test_bad_demand_files_are_rejected(text: str, message: str) -> None:
    with pytest.raises(DemandError, match=message):
        parse_demand_csv(text, "d.csv")
