"""burst-reconcile's part in issue 21: an operator's release of a pool hold stays released
until the pool fails again, and CLOUD nodes a failed resume left ``down~`` go back to the pool
while nodes an operator downed stay down. Audit events are coreburst/burst/power.py's (``ts``,
``event``,
``nodes``); node lines are ``scontrol -o show nodes`` as tests/unit/guardrails/
test_burst_reconcile.py makes them (Slurm 22.05 format, made up there)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from coreburst.burst.holds import ICE, OPERATOR_RELEASED, holds
from coreburst.burst.reconcile import BurstReconcileConfig, Instance, plan
from guardrails.adapters.slurm import parse_nodes
from guardrails.configfile import ConfigError, parse_config
from tests.helpers.slurm_fakes import node_line

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
P = BurstReconcileConfig(enabled=True, stack="lab")


def _ev(minutes_ago: float, event: str, **kw: Any) -> dict[str, Any]:
    return {"ts": (NOW - timedelta(minutes=minutes_ago)).timestamp(), "event": event, **kw}


def test_released_backoff_stays_released_until_a_new_failure() -> None:
    ice = _ev(10, "resume.failed", nodes="od-1", code=ICE, backoff_s=1800)
    assert [h.pool for h in holds([ice], NOW, P)] == ["od"]
    released = _ev(5, OPERATOR_RELEASED, pool="od")
    assert holds([ice, released], NOW, P) == []
    again = _ev(1, "resume.failed", nodes="od-2", code=ICE, backoff_s=1800)
    (h,) = holds([ice, released, again], NOW, P)
    assert h.pool == "od" and h.reservation.startswith("coreburst-backoff-od-")
    # Another pool's release changes nothing for od.
    assert [h.pool for h in holds([ice, _ev(5, OPERATOR_RELEASED, pool="sp")], NOW, P)] == ["od"]


def test_release_forgives_earlier_bootstrap_failures_but_new_ones_protect_again() -> None:
    fails = [_ev(60 - i, "resume-fail", nodes="od-1") for i in range(3)]
    assert [h.reservation for h in holds(fails, NOW, P)] == ["coreburst-protect-od"]
    released = _ev(30, OPERATOR_RELEASED, pool="od")
    assert holds([*fails, released], NOW, P) == []
    one_more = [_ev(10, "resume-fail", nodes="od-2")]
    assert holds([*fails, released, *one_more], NOW, P) == []
    three_more = [_ev(10 - i, "resume-fail", nodes="od-2") for i in range(3)]
    assert [h.reservation for h in holds([*fails, released, *three_more], NOW, P)] == [
        "coreburst-protect-od"
    ]


def test_the_backoff_is_the_one_the_resume_program_wrote() -> None:
    """One capacity back-off: the stack's capacityBackoffS, which the resume program writes on
    each failure (``backoff_s``); an event without it (an older resume program) is held for
    the key's default, 600 s. The daemon's own key is gone, with one line saying where."""
    (h,) = holds([_ev(10, "resume.failed", nodes="od-1", code=ICE, backoff_s=1800)], NOW, P)
    assert h.minutes == 20 and "no launches for 0:30:00" in h.why
    assert holds([_ev(10, "resume.failed", nodes="od-1", code=ICE, backoff_s=300)], NOW, P) == []
    (h,) = holds([_ev(4, "resume.failed", nodes="od-1", code=ICE)], NOW, P)
    assert h.minutes == 6
    with pytest.raises(ConfigError) as err:
        parse_config(
            "burst_reconcile: {enabled: true, stack: lab, capacity_backoff: 30m}", "g.yaml"
        )
    msg = str(err.value)
    assert "capacity_backoff" in msg and "coreburst:burst.capacityBackoffS" in msg
    assert "\n" not in msg


def test_failed_resume_nodes_left_down_go_back_to_the_pool_operator_downs_stay() -> None:
    nodes = parse_nodes(
        "\n".join(
            [
                node_line("od-1", "DOWN+CLOUD+POWERED_DOWN", reason="ResumeTimeout reached"),
                node_line(
                    "od-2",
                    "DOWN+CLOUD+POWERED_DOWN",
                    reason="(Code:InsufficientInstanceCapacity)Failure when resuming nodes",
                ),
                node_line("sp-1", "DOWN+CLOUD+POWERED_DOWN", reason="bad EFA, RMA 1234"),
                node_line("cb-1", "DOWN+CLOUD+POWERING_DOWN", reason="ResumeTimeout reached"),
                node_line("core1", "DOWN", reason="ResumeTimeout reached"),
            ]
        )
    )
    todo = plan([], nodes, NOW, timedelta(minutes=15))
    assert sorted(sn.name for sn, _ in todo.repair) == ["od-1", "od-2"]
    assert all("failed resume" in why for _, why in todo.repair)


def test_a_resume_in_flight_is_never_reconciled_away() -> None:
    """The reconciler's pass while a resume is launching od-1 (Slurm: POWERING_UP): the
    instance CreateFleet just returned (no node tag yet) and the one already tagged are both
    kept, and the node is not powered down for lack of an instance."""
    nodes = parse_nodes(node_line("od-1", "IDLE+CLOUD+POWERING_UP"))
    fresh = NOW - timedelta(seconds=20)
    untagged = Instance("i-new", "us-east-1", "pending", fresh, None)
    tagged = Instance("i-tagged", "us-east-1", "pending", fresh, "od-1")
    todo = plan([untagged, tagged], nodes, NOW, timedelta(minutes=15))
    assert todo.terminate == [] and todo.power_down == [] and todo.repair == []
    # Once past orphan_timeout with the node still not up, the untagged one is an orphan.
    later = plan([untagged, tagged], nodes, NOW + timedelta(minutes=16), timedelta(minutes=15))
    assert [i.instance_id for i, _ in later.terminate] == ["i-new"]


def test_a_held_pool_quotes_ec2_and_an_unknown_codes_repeats_are_told_once() -> None:
    """Issue 33 item 1: a hold only an operator lifts quotes EC2's message; an unknown code's
    timed holds are reported by its first ``resume.alert``, not again per hold; a lone
    UnfulfillableCapacity backs the pool off for the reconciler too, Unsupported (one type in
    one zone) does not."""
    msg = "The specified launch template, with template ID lt-1, does not exist."
    protect = _ev(
        1, "resume.pool_held", pool="od", reservation="coreburst-protect-od", minutes=None,
        code="InvalidLaunchTemplateId.NotFound", error_class="invalid", message=msg,
    )  # fmt: skip
    (h,) = holds([protect], NOW, P)
    assert f'(EC2: "{msg}")' in h.why and h.minutes is None
    repeat = _ev(
        1, "resume.pool_held", pool="sp", reservation="coreburst-backoff-sp-1", minutes=20,
        code="BrandNewCode", error_class="unknown", alert=False,
    )  # fmt: skip
    assert holds([repeat], NOW, P) == []
    lone = _ev(1, "resume.failed", nodes="sp-1", code="UnfulfillableCapacity")
    assert [h.minutes for h in holds([lone], NOW, P)] == [
        9
    ]  # capacityBackoffS 600 s (the default), one minute ago
    assert holds([_ev(1, "resume.failed", nodes="sp-1", code="Unsupported")], NOW, P) == []
