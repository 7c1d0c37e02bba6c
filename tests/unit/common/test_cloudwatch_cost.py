"""The guardrails' own CloudWatch bill (issue 23, item 4): coreburst/common/cloudwatch_cost.py.

Prices are the catalog's ``cloudwatch`` figures, which restate the Amazon CloudWatch pricing
page (https://aws.amazon.com/cloudwatch/pricing/, paid tier) as shared/REFERENCE.md gives it
("CloudWatch — what the telemetry itself costs"): custom metrics per metric-month, $0.30 for the
first 10,000, $0.10 for the next 240,000, $0.05 for the next 750,000, $0.02 beyond; PutMetricData
$0.01 per 1,000 requests; GetMetricData $0.01 per 1,000 metrics requested. The expected values
below are worked out by hand from those numbers, not from the code.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from coreburst.common.catalog import CatalogError, load_catalog, parse_catalog
from coreburst.common.cloudwatch_cost import (
    Cadence,
    FleetGroup,
    bill,
    custom_metrics_per_node,
    put_requests_per_node_day,
    tiered_usd_per_month,
)

CAT_PATH = Path(__file__).resolve().parents[3] / "coreburst" / "common" / "data" / "catalog.yaml"
CAT = load_catalog()
assert CAT.cloudwatch is not None
TIERS = CAT.cloudwatch.custom_metric_tiers
DEFAULT = Cadence(idle_every_s=300, egress_every_s=900)  # idle.every 5m, egress.every 15m
DAY = 24 / CAT.hours_per_month  # a day's share of a metric-month (730 h)


def test_catalog_tiers_are_the_reference_prices_dated_and_marked() -> None:
    assert [(t.up_to_metrics, t.usd_per_metric_month.value) for t in TIERS] == [
        (10_000, 0.30),
        (250_000, 0.10),
        (1_000_000, 0.05),
        (None, 0.02),
    ]
    for t in TIERS:
        f = t.usd_per_metric_month
        assert f.source == "aws-cloudwatch-pricing" and f.as_of and f.unverified
    assert CAT.cloudwatch.api_usd_per_1000_requests.value == 0.01
    assert CAT.cloudwatch.get_metric_data_usd_per_1000_metrics.value == 0.01


@pytest.mark.parametrize(
    ("metrics", "usd"),
    [
        (0, 0.0),
        (1, 0.30),
        (9_999, 2_999.70),
        (10_000, 3_000.0),
        (10_001, 3_000.10),
        (249_999, 26_999.90),
        (250_000, 27_000.0),  # 3,000 + 240,000 x 0.10
        (250_001, 27_000.05),
        (1_000_000, 64_500.0),  # 27,000 + 750,000 x 0.05
        (1_000_001, 64_500.02),
        (2_000_000, 84_500.0),  # 64,500 + 1,000,000 x 0.02
        (36_000, 5_600.0),  # the old config: 36 metrics x 1,000 p5
    ],
)
def test_tiered_price_at_the_boundaries(metrics: int, usd: float) -> None:
    assert tiered_usd_per_month(metrics, TIERS) == pytest.approx(usd, abs=1e-6)


def test_marginal_price_on_top_of_the_accounts_other_metrics() -> None:
    assert tiered_usd_per_month(1, TIERS, existing=10_000) == pytest.approx(0.10)
    assert tiered_usd_per_month(2, TIERS, existing=9_999) == pytest.approx(0.40)
    assert tiered_usd_per_month(1, TIERS, existing=1_000_000) == pytest.approx(0.02)
    with pytest.raises(ValueError, match="negative"):
        tiered_usd_per_month(-1, TIERS)


def _catalog_with(tiers: list[dict[str, object]] | None) -> str:
    doc = copy.deepcopy(yaml.safe_load(CAT_PATH.read_text()))
    if tiers is None:
        del doc["cloudwatch"]
    else:
        doc["cloudwatch"]["custom_metric_tiers"] = tiers
    return yaml.safe_dump(doc)


@pytest.mark.parametrize(
    ("tiers", "message"),
    [
        (
            [
                {
                    "up_to_metrics": 10,
                    "usd_per_metric_month": {"value": 1, "as_of": "x", "source": "s"},
                }
            ],
            "only the last tier has no bound",
        ),
        (
            [
                {
                    "up_to_metrics": 10,
                    "usd_per_metric_month": {"value": 1, "as_of": "x", "source": "s"},
                },
                {
                    "up_to_metrics": 5,
                    "usd_per_metric_month": {"value": 1, "as_of": "x", "source": "s"},
                },
                {
                    "up_to_metrics": None,
                    "usd_per_metric_month": {"value": 1, "as_of": "x", "source": "s"},
                },
            ],
            "bounds must rise",
        ),
    ],
)
def test_bad_tiers_are_one_line_catalog_errors(
    tiers: list[dict[str, object]], message: str
) -> None:
    with pytest.raises(CatalogError, match=message) as exc:
        parse_catalog(_catalog_with(tiers), "cat.yaml")
    assert "\n" not in str(exc.value)


def test_no_cloudwatch_prices_is_an_error_never_zero() -> None:
    cat = parse_catalog(_catalog_with(None), "cat.yaml")
    with pytest.raises(CatalogError, match="no cloudwatch prices"):
        bill([FleetGroup("p5.48xlarge", 1)], cat, DEFAULT)
    with pytest.raises(CatalogError, match="not in the catalog"):
        bill([FleetGroup("p9.mystery", 1)], CAT, DEFAULT)


def test_metrics_per_node_follow_the_shipped_telemetry() -> None:
    assert custom_metrics_per_node("nvidia", 8) == 1  # the rollup
    assert custom_metrics_per_node("nvidia", 8, per_device=True) == 9  # + one per GPU
    assert custom_metrics_per_node("neuron", 64) == 2  # rollup + heartbeat
    assert custom_metrics_per_node("neuron", 64, per_device=True) == 66


def test_put_requests_follow_the_flush_interval() -> None:
    # the agent flushes every 300 s: 5 collections x 8 GPUs = 40 datums, one request a flush
    assert put_requests_per_node_day("nvidia", 8, DEFAULT) == 288
    # per-device series too: 5 x 8 x 2 = 80 datums, still one request
    assert put_requests_per_node_day("nvidia", 8, DEFAULT, per_device=True) == 288
    # what the 60 s flush shipped before cost: one request a minute
    assert put_requests_per_node_day("nvidia", 8, Cadence(300, 900, flush_interval_s=60)) == 1440
    slow = Cadence(300, 900, flush_interval_s=120)
    assert put_requests_per_node_day("nvidia", 8, slow) == 720
    # the Neuron publisher: collects once a minute, sends every 300 s, rollup + heartbeat in
    # one namespace: 10 datums, one request a flush (was one a minute)
    assert put_requests_per_node_day("neuron", 64, DEFAULT) == 288
    old_neuron = Cadence(300, 900, neuron_flush_interval_s=60)
    assert put_requests_per_node_day("neuron", 64, old_neuron) == 1440
    # per-core series: 5 x (64 + 2) = 330 datums, one request
    assert put_requests_per_node_day("neuron", 64, DEFAULT, per_device=True) == 288
    # 1,001 datums a flush take two requests
    big = Cadence(300, 900, flush_interval_s=60 * 126)  # 8 x 126 = 1,008 datums
    assert put_requests_per_node_day("nvidia", 8, big) == pytest.approx(86_400 / 7_560 * 2)


@pytest.mark.parametrize(
    ("cadence", "every_s"),
    [
        (DEFAULT, 1500),  # 30 - 5 - 1 = 24 min, rounded up to the 5-min reads: 25 min
        (Cadence(300, 900, window_s=3600), 3300),  # 60 - 5 - 1 = 54 -> 55 min
        (Cadence(60, 900), 1440),  # 1-min reads: 24 min
        (Cadence(300, 900, publish_delay_s=0), 1800),  # 30 - 0 - 1 = 29 -> 30 min
        (Cadence(300, 900, window_s=300), 300),  # never less than idle.every
    ],
)
def test_a_busy_node_is_read_once_its_busy_minute_leaves_the_window(
    cadence: Cadence, every_s: int
) -> None:
    assert cadence.busy_read_every_s == every_s


def test_thousand_p5_at_default_cadence_term_by_term() -> None:
    b = bill([FleetGroup("p5.48xlarge", 1000)], CAT, DEFAULT)
    assert b.custom_metrics == 1000
    assert b.custom_usd_day == pytest.approx(1000 * 0.30 * DAY)  # $9.86
    assert b.put_requests_day == 1000 * 288  # a flush every 5 min
    assert b.put_usd_day == pytest.approx(2.88)
    # a busy node's rollup (Maximum, SampleCount) every 25 min: 86,400 / 1,500 = 57.6 reads;
    # NetworkOut every 15 min: 96
    assert b.get_idle_metrics_day == pytest.approx(1000 * 2 * 57.6)
    assert b.get_egress_metrics_day == 1000 * 96
    assert b.get_metrics_day == pytest.approx(1000 * (2 * 57.6 + 96))
    assert b.get_usd_day == pytest.approx(2.112)
    assert b.total_usd_day == pytest.approx(1000 * 0.30 * DAY + 2.88 + 2.112)  # $14.86
    assert b.total_usd_day <= 15.0
    assert b.unverified and "aws-cloudwatch-pricing" in b.source
    assert [t for t, _, _ in b.lines()] == [
        "custom metrics",
        "PutMetricData",
        "GetMetricData",
        "all-in",
    ]
    # what the old config (4 measurements x (8 GPUs + rollup)) cost in custom metrics alone
    assert tiered_usd_per_month(36 * 1000, TIERS) * DAY == pytest.approx(184.11, abs=0.01)


def test_the_partial_idle_note_costs_a_third_metric_per_read() -> None:
    on = bill([FleetGroup("p5.48xlarge", 1000)], CAT, Cadence(300, 900, partial_idle=True))
    assert on.get_idle_metrics_day == pytest.approx(1000 * 3 * 57.6)
    assert on.get_usd_day == pytest.approx(2.688)
    # over the $15 goal: which is why it is off by default
    assert on.total_usd_day == pytest.approx(1000 * 0.30 * DAY + 2.88 + 2.688)
    assert on.total_usd_day > 15.0


def test_the_old_defaults_cost_what_they_did() -> None:
    """A 60 s flush, every node's three statistics every 5 min: $33.86 (issue 23, item 4)."""

    class EveryRead(Cadence):
        @property
        def busy_read_every_s(self) -> float:
            return self.idle_every_s

    old = EveryRead(300, 900, partial_idle=True, flush_interval_s=60)
    b = bill([FleetGroup("p5.48xlarge", 1000)], CAT, old)
    assert (b.put_usd_day, b.get_usd_day) == (pytest.approx(14.40), pytest.approx(9.60))
    assert round(b.total_usd_day, 2) == 33.86


def test_egress_off_and_mixed_fleet() -> None:
    b = bill(
        [FleetGroup("p5.48xlarge", 10, per_device=True), FleetGroup("trn2.48xlarge", 4)],
        CAT,
        Cadence(300, None),
    )
    assert b.nodes == 14
    assert b.custom_metrics == 10 * 9 + 4 * 2
    assert b.get_metrics_day == pytest.approx(14 * 2 * 57.6)
