"""The idle decision table, each row against numbers worked out by hand here."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from guardrails.idle import IdleParams, assess_utilization, decide
from guardrails.model import Node, Sample, Series

NOW = datetime(2026, 3, 10, 12, 0, tzinfo=UTC)
P = IdleParams(
    threshold_percent=5.0,
    window=timedelta(minutes=30),
    max_gap=timedelta(minutes=5),
    grace=timedelta(hours=1),
    protected_asgs=frozenset({"prod-serving"}),
    protected_tags=(("coreburst:protected", frozenset({"true"})),),
)


def node(**kw: object) -> Node:
    base: dict[str, object] = {
        "instance_id": "i-0abc",
        "region": "us-east-1",
        "az": "us-east-1a",
        "instance_type": "p5.48xlarge",
        "accelerator_kind": "nvidia",
        "accelerator_count": 8,
        "market": "on-demand",
        "launch_time": NOW - timedelta(days=1),
        "tags": {"owner": "alice"},
    }
    base.update(kw)
    return Node(**base)  # type: ignore[arg-type]


def flat(value: float, minutes: range = range(30, -1, -1)) -> Series:
    return Series.of(Sample(NOW - timedelta(minutes=m), value) for m in minutes)


def gpus(values: list[float]) -> dict[str, Series]:
    return {str(i): flat(v) for i, v in enumerate(values)}


def test_all_gpus_below_threshold_for_whole_window_is_idle() -> None:
    u = assess_utilization(gpus([1.0] * 8), 8, NOW, P)
    assert u.state == "idle"
    assert decide(node(), u, None, NOW, P).step == "mark"


def test_value_exactly_at_threshold_is_busy() -> None:
    series = gpus([1.0] * 8)
    series["3"].values[10] = 5.0
    assert assess_utilization(series, 8, NOW, P).state == "busy"


def test_one_idle_gpu_in_busy_node_is_reported_not_reclaimed() -> None:
    u = assess_utilization(gpus([0.0] + [70.0] * 7), 8, NOW, P)
    assert u.state == "busy"
    assert u.idle_devices == ["0"]
    d = decide(node(), u, None, NOW, P)
    assert d.step == "none"
    assert "1 of 8 devices idle" in d.reason


def test_partial_window_is_unknown() -> None:
    # data only for the last 20 minutes of a 30-minute window: a 10-minute hole at the start
    series = {str(i): flat(1.0, range(20, -1, -1)) for i in range(8)}
    u = assess_utilization(series, 8, NOW, P)
    assert u.state == "unknown"
    assert "partial" in u.reason and "600s" in u.reason


def test_gap_inside_window_is_unknown() -> None:
    pts = Series.of(
        p for p in flat(1.0).samples() if not 10 <= (NOW - p.timestamp).total_seconds() / 60 <= 17
    )
    series = gpus([1.0] * 8)
    series["5"] = pts
    assert assess_utilization(series, 8, NOW, P).state == "unknown"


def test_stale_data_is_unknown() -> None:
    # last datapoint 11 minutes ago (> 5 min max gap + 5 min publish delay, the default)
    series = {str(i): flat(1.0, range(30, 10, -1)) for i in range(8)}
    u = assess_utilization(series, 8, NOW, P)
    assert u.state == "unknown"
    assert "stale" in u.reason and "660s" in u.reason
    # 8 minutes ago: the agent's last flush may still be on its way (within max gap + delay)
    late = {str(i): flat(1.0, range(30, 7, -1)) for i in range(8)}
    assert assess_utilization(late, 8, NOW, P).state == "idle"
    # with no publish delay allowed, 8 minutes is stale again (> 5 min max gap)
    strict = IdleParams(window=P.window, max_gap=P.max_gap, publish_delay=timedelta(0))
    u = assess_utilization(late, 8, NOW, strict)
    assert u.state == "unknown" and "stale" in u.reason and "480s" in u.reason


def test_no_data_is_unknown_never_idle() -> None:
    u = assess_utilization({}, 8, NOW, P)
    assert u.state == "unknown"
    assert decide(node(), u, None, NOW, P).step == "none"


def test_missing_gpu_series_is_unknown() -> None:
    u = assess_utilization(gpus([1.0] * 7), 8, NOW, P)
    assert u.state == "unknown"
    assert "7 of 8" in u.reason


def test_trn2_without_neuron_series_is_unknown() -> None:
    trn = node(instance_type="trn2.48xlarge", accelerator_kind="neuron", accelerator_count=16)
    u = assess_utilization({}, 1, NOW, P)
    assert decide(trn, u, None, NOW, P).state == "unknown"


def test_valid_exemption_blocks_marking() -> None:
    u = assess_utilization(gpus([1.0] * 8), 8, NOW, P)
    n = node(tags={"coreburst:exempt-until": "2026-03-12"})
    d = decide(n, u, None, NOW, P)
    assert d.step == "none"
    assert "exempt until 2026-03-12" in d.reason


def test_expired_exemption_is_not_exempt() -> None:
    u = assess_utilization(gpus([1.0] * 8), 8, NOW, P)
    n = node(tags={"coreburst:exempt-until": "2026-03-09"})
    d = decide(n, u, None, NOW, P)
    assert d.step == "mark"
    assert "expired" in d.reason


def test_exemption_past_maximum_is_ignored() -> None:
    u = assess_utilization(gpus([1.0] * 8), 8, NOW, P)
    n = node(tags={"coreburst:exempt-until": "2027-01-01"})
    assert decide(n, u, None, NOW, P).step == "mark"


def test_garbage_exemption_is_ignored() -> None:
    u = assess_utilization(gpus([1.0] * 8), 8, NOW, P)
    d = decide(node(tags={"coreburst:exempt-until": "forever"}), u, None, NOW, P)
    assert d.step == "mark"


@pytest.mark.parametrize(
    "n",
    [node(asg="prod-serving"), node(tags={"coreburst:protected": "true"})],
    ids=["asg", "tag"],
)
def test_protected_node_is_never_reclaimed(n: Node) -> None:
    u = assess_utilization(gpus([1.0] * 8), 8, NOW, P)
    marked = NOW - timedelta(hours=2)
    assert decide(n, u, None, NOW, P).step == "none"
    assert decide(n, u, marked, NOW, P).step == "unmark"


def test_grace_then_act_even_after_missed_cycles() -> None:
    u = assess_utilization(gpus([1.0] * 8), 8, NOW, P)
    assert decide(node(), u, NOW - timedelta(minutes=59), NOW, P).step == "wait"
    assert decide(node(), u, NOW - timedelta(hours=1), NOW, P).step == "act"
    # the daemon was down for a day: the action is late, not lost
    assert decide(node(), u, NOW - timedelta(days=1), NOW, P).step == "act"


def test_marked_node_that_became_busy_is_unmarked() -> None:
    u = assess_utilization(gpus([80.0] * 8), 8, NOW, P)
    assert decide(node(), u, NOW - timedelta(minutes=30), NOW, P).step == "unmark"


def test_marked_node_gone_blind_keeps_mark_without_acting() -> None:
    d = decide(node(), assess_utilization({}, 8, NOW, P), NOW - timedelta(hours=3), NOW, P)
    assert d.step == "none"


@pytest.mark.parametrize(
    ("kw", "action"),
    [
        ({}, "stop"),
        ({"market": "spot"}, "terminate"),
        ({"asg": "burst"}, "scale-in"),
        ({"market": "spot", "asg": "burst"}, "scale-in"),
        ({"market": "capacity-block"}, "report-only"),
        ({"ebs_root": False}, "report-only"),
    ],
)
def test_action_by_market(kw: dict[str, object], action: str) -> None:
    u = assess_utilization(gpus([1.0] * 8), 8, NOW, P)
    d = decide(node(**kw), u, None, NOW, P)
    assert d.action == action
    assert d.step == ("none" if action == "report-only" else "mark")
