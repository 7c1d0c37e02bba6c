"""ListMetrics answers are reused between cycles, and never hide a newly launched instance."""

from __future__ import annotations

from datetime import timedelta

import pytest
from moto import mock_aws

from coreburst.common.catalog import load_catalog
from coreburst.common.telemetry import UTILIZATION_METRICS
from coreburst.sandbox.emulator import FleetNode, fake_session, launch, publish
from guardrails.adapters.aws import Aws, inventory
from guardrails.adapters.cloudwatch import SeriesCache, fetch_utilization
from guardrails.config import AwsConfig
from guardrails.idle import IdleParams, assess_utilization
from guardrails.idle_config import IdleConfig

DEFS = {k: (m.namespace, m.metric_name, m.device_dimension) for k, m in UTILIZATION_METRICS.items()}


@pytest.fixture
def fleet():  # type: ignore[no-untyped-def]
    with mock_aws():
        aws = Aws(AwsConfig(), session=fake_session())
        ec2 = aws.client("ec2", "us-east-1")
        cw = aws.client("cloudwatch", "us-east-1")
        ids = launch(ec2, "p5.48xlarge", {"team": "ml"}, count=3)
        yield aws, ec2, cw, ids


def _nodes(ec2):  # type: ignore[no-untyped-def]
    return inventory(ec2, "us-east-1", ["p5.48xlarge"], load_catalog())


def test_listing_is_reused_until_refresh_or_a_new_instance(fleet) -> None:  # type: ignore[no-untyped-def]
    aws, ec2, cw, ids = fleet
    nodes = _nodes(ec2)
    now = max(n.launch_time for n in nodes).replace(microsecond=0) + timedelta(hours=1)
    # two nodes publish; the third never does (blind)
    publish(
        {"us-east-1": cw},
        [FleetNode(i, "us-east-1", "nvidia", 8, "idle") for i in ids[:2]],
        now - timedelta(minutes=35),
        now + timedelta(minutes=5),
        metric_defs=DEFS,
    )
    cfg = IdleConfig(series_refresh=timedelta(minutes=10))
    cache = SeriesCache()

    def cycle(at, nodes):  # type: ignore[no-untyped-def]
        before = aws.counter.calls["ListMetrics"]
        series, _ = fetch_utilization(cw, nodes, cfg, at, cache)
        return series, aws.counter.calls["ListMetrics"] - before

    series, listed = cycle(now, nodes)
    assert listed >= 1 and len(series[ids[0]]) == 8 and series[ids[2]] == {}
    uncached, _ = fetch_utilization(cw, nodes, cfg, now + timedelta(minutes=1))

    # (moto pages each datapoint as a series: several ListMetrics pages per listing)
    # next cycle: same instances -> no ListMetrics, same series; the blind node stays blind
    series, listed = cycle(now + timedelta(minutes=1), nodes)
    assert listed == 0
    assert series == uncached
    params = IdleParams()
    states = [
        assess_utilization(series[i], 8, now + timedelta(minutes=1), params).state for i in ids
    ]
    assert states == ["idle", "idle", "unknown"]

    # a newly launched instance is not in the listing: relist at once
    new = launch(ec2, "p5.48xlarge", {"team": "ml"}, count=1)
    nodes2 = _nodes(ec2)
    assert {n.instance_id for n in nodes2} == {*ids, *new}
    _, listed = cycle(now + timedelta(minutes=2), nodes2)
    assert listed >= 1

    # older than series_refresh: relist even with no new instance
    _, listed = cycle(now + timedelta(minutes=3), nodes2)
    assert listed == 0
    _, listed = cycle(now + timedelta(minutes=12), nodes2)
    assert listed >= 1


def test_a_failed_listing_is_not_cached(fleet) -> None:  # type: ignore[no-untyped-def]
    aws, ec2, cw, ids = fleet
    nodes = _nodes(ec2)
    now = max(n.launch_time for n in nodes) + timedelta(hours=1)
    cache = SeriesCache()
    cfg = IdleConfig()

    def boom(**_):  # type: ignore[no-untyped-def]
        raise RuntimeError("throttled")

    cw.meta.events.register("before-call.cloudwatch.ListMetrics", boom)
    _, errors = fetch_utilization(cw, nodes, cfg, now, cache)
    assert set(errors) == set(ids) and "ListMetrics failed" in errors[ids[0]]
    cw.meta.events.unregister("before-call.cloudwatch.ListMetrics", boom)
    before = aws.counter.calls["ListMetrics"]
    _, errors = fetch_utilization(cw, nodes, cfg, now + timedelta(minutes=1), cache)
    assert errors == {} and aws.counter.calls["ListMetrics"] - before == 1
