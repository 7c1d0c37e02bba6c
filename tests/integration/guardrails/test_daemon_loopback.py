"""The daemon against a moto server and a webhook receiver on loopback, in-process, with an
injected clock."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from prometheus_client import generate_latest

from coreburst.sandbox.emulator import (
    FleetNode,
    MotoProcess,
    WebhookReceiver,
    ce_result,
    launch,
)
from guardrails.spend import day_start, month_start
from tests.helpers.guardrails_loopback import fleet, step

pytestmark = pytest.mark.integration


def dedupe_keys(hook: WebhookReceiver) -> list[str]:
    return [p["blocks"][-1]["elements"][0]["text"].split(" · ")[1] for p in hook.posts]


def states(h: Any, ids: list[str]) -> dict[str, str]:
    r = h.client("ec2").describe_instances(InstanceIds=ids)
    return {
        i["InstanceId"]: i["State"]["Name"] for res in r["Reservations"] for i in res["Instances"]
    }


def test_launch_mark_reclaim(harness: Any, hook: WebhookReceiver) -> None:
    # report_partial_idle: the busy node's "1 of 8 devices idle" note needs the rollup's Minimum
    h = harness("idle: {window: 30m, max_gap: 5m, report_partial_idle: true}")
    n = fleet(h)
    nodes = list(n.values())
    t = h.clock.now() - timedelta(minutes=40)
    r1 = step(h, nodes, t)
    by = {d.instance_id: d for d in r1.decisions}
    assert {k for k, v in n.items() if by[v.instance_id].step == "mark"} == {"od", "spot", "asg"}
    assert by[n["busy"].instance_id].state == "busy"
    assert "1 of 8 devices idle" in by[n["busy"].instance_id].reason
    assert by[n["blind"].instance_id].state == "unknown"
    assert by[n["trn"].instance_id].state == "busy"
    tags = h.client("ec2").describe_tags(
        Filters=[{"Name": "key", "Values": ["coreburst:idle-since"]}]
    )["Tags"]
    assert {x["ResourceId"] for x in tags} == {n[k].instance_id for k in ("od", "spot", "asg")}
    mark_msg = next(p for p in hook.posts if n["od"].instance_id in p["blocks"][0]["text"]["text"])
    text = str(mark_msg)
    assert "owner=alice" in text and "$55.04/h" in text and "coreburst:exempt-until=" in text

    # a missed cycle: the next run is 35 minutes later, after the 20-minute grace
    last = h.clock.now() + timedelta(minutes=1)
    h.clock.advance(timedelta(minutes=35))
    r2 = step(h, nodes, last)
    assert sorted(r2.actions) == sorted(
        [
            f"stop {n['od'].instance_id}",
            f"terminate {n['spot'].instance_id}",
            f"scale-in {n['asg'].instance_id}",
        ]
    )
    st = states(h, [x.instance_id for x in nodes if x.region == "us-east-1"])
    assert st[n["od"].instance_id] in ("stopping", "stopped")
    assert st[n["spot"].instance_id] in ("shutting-down", "terminated")
    assert st[n["asg"].instance_id] in ("shutting-down", "terminated")
    assert st[n["busy"].instance_id] == st[n["blind"].instance_id] == "running"
    grp = h.client("autoscaling").describe_auto_scaling_groups()["AutoScalingGroups"][0]
    assert grp["DesiredCapacity"] == 0
    # one more cycle: nothing repeats
    h.clock.advance(timedelta(minutes=10))
    r3 = step(h, nodes, h.clock.now() - timedelta(minutes=10))
    assert r3.actions == []
    keys = dedupe_keys(hook)
    assert len(keys) == len(set(keys))
    assert sum(k.startswith("act:") for k in keys) == 3
    prom = generate_latest(h.daemon.metrics.registry).decode()
    assert 'coreburst_guardrails_api_calls_total{operation="DescribeInstances"} 6.0' in prom
    assert 'coreburst_guardrails_actions_total{kind="stop",outcome="done"} 1.0' in prom
    assert 'coreburst_guardrails_nodes{state="unknown"} 1.0' in prom


def test_busy_again_unmarks(harness: Any) -> None:
    """A marked node is read again at its reclaim time, not at every read (GetMetricData bills
    per metric read), and read fresh then: busy again, it is unmarked and never acted on."""
    h = harness()
    e1 = h.client("ec2")
    node = FleetNode(launch(e1, "p5.48xlarge", {"owner": "x"})[0], "us-east-1", "nvidia", 8, "idle")
    step(h, [node], h.clock.now() - timedelta(minutes=40))
    assert node.instance_id in h.state.marks()
    h.clock.advance(timedelta(minutes=10))
    node.profile = "busy"
    r = step(h, [node], h.clock.now() - timedelta(minutes=10))
    # not read before its reclaim time: reported as its last read found it, mark kept
    assert (r.decisions[0].state, r.decisions[0].step) == ("idle", "none")
    assert node.instance_id in h.state.marks()
    h.clock.advance(timedelta(minutes=10))  # the 20-minute grace is over: read fresh
    r = step(h, [node], h.clock.now() - timedelta(minutes=10))
    assert r.decisions[0].step == "unmark" and r.actions == []
    assert node.instance_id not in h.state.marks()


def test_spend_limit_crossed_is_alerted_within_one_cycle(
    harness: Any, moto: MotoProcess, hook: WebhookReceiver
) -> None:
    h = harness(
        """
spend:
  spot_price: catalog-estimate
  cost_explorer: true
  direct_connect_ports: [{bandwidth: 10Gbps}]
  include_lustre: false
  scopes:
    - {name: account, monthly_limit_usd: 100000}
    - {name: team-ml, tag_key: team, tag_value: ml, daily_limit_usd: 100}
""".replace("spend:", "spend:", 1)
    )
    now = h.clock.now()
    if now - day_start(now) < timedelta(hours=2):
        # Early in the UTC day one p5 has not yet burnt 50% of team-ml's $100 (the test once
        # failed before 00:55 UTC): start the cycle two hours into the day.
        h.clock.advance(timedelta(hours=2))
        now = h.clock.now()
    ms, ds = month_start(now).date().isoformat(), day_start(now).date().isoformat()
    moto.set_cost_and_usage([ce_result(85_000.0, ms, ds), ce_result(1_000.0, ms, ds)])
    e1 = h.client("ec2")
    launch(e1, "p5.48xlarge", {"team": "ml"})
    r = h.daemon.run_cycle()
    acct = r.spend["account"]
    # burn: one p5 on-demand $55.04/h + one 10G DX port $2.25/h (catalog)
    assert acct["burn_usd_per_hour"] == pytest.approx(55.04 + 2.25)
    assert acct["cost_explorer_actual_usd"] == pytest.approx(85_000.0)
    hours_today = (now - day_start(now)).total_seconds() / 3600
    assert acct["today_usd"] == pytest.approx(57.29 * hours_today)
    titles = hook.titles()
    assert "Spend account: 80% of the monthly limit" in titles
    team_today = r.spend["team-ml"]["today_usd"]
    expected_pct = max(t for t in (50, 80, 100) if team_today >= t)
    assert f"Spend team-ml: {expected_pct}% of the daily limit" in titles
    # the same threshold in the same period is not alerted again
    h.clock.advance(timedelta(minutes=1))
    h.daemon.run_cycle()
    assert len(hook.titles()) == len(titles)


PHASE_MIN = 0


def test_egress_spike_names_top_talker(harness: Any, hook: WebhookReceiver) -> None:
    h = harness(
        """
egress: {enabled: true, window: 30m, daily_threshold_usd: 5000, spike_factor: 3,
         min_baseline_samples: 2, include_nat: true, every: 10m}
""".replace("egress: {enabled: false}", "")
    )
    # Egress is read in whole 5-minute NetworkOut periods that ended at least 5 minutes ago,
    # so what one read sees of a spike depends on where "now" falls in a period. Cycles run
    # on period boundaries here (PHASE_MIN past one), as a 5-minute-aligned timer would.
    now = h.clock.now()
    h.clock.set(now.replace(minute=now.minute - now.minute % 5) + timedelta(minutes=PHASE_MIN))
    e1 = h.client("ec2")
    nodes = [
        FleetNode(i, "us-east-1", "nvidia", 1, "busy", egress_gb_per_hour=2.0)
        for i in launch(e1, "p5.48xlarge", {"owner": "o"}, count=3)
    ]
    t = h.clock.now() - timedelta(minutes=35)
    for _ in range(3):
        step(h, nodes, t)
        t = h.clock.now() + timedelta(minutes=1)
        h.clock.advance(timedelta(minutes=10))
    assert not any("Egress" in x for x in hook.titles())
    r = step(h, nodes, t, spike={nodes[1].instance_id: 600.0})
    assert r.egress["alert"] and "baseline" in r.egress["alert"]
    assert r.egress["top_talkers"][0][0] == nodes[1].instance_id
    egress_posts = [p for p in hook.posts if p["blocks"][0]["text"]["text"] == "Egress spike"]
    assert len(egress_posts) == 1
    assert nodes[1].instance_id in egress_posts[0]["blocks"][1]["text"]["text"]


def test_slack_500_and_429_then_recovers_exactly_once(harness: Any, hook: WebhookReceiver) -> None:
    hook.script = [(500, {}), (500, {}), (429, {"Retry-After": "30"})]
    h = harness()
    e1 = h.client("ec2")
    nodes = [
        FleetNode(i, "us-east-1", "nvidia", 8, "idle")
        for i in launch(e1, "p5.48xlarge", {"owner": "o"}, count=3)
    ]
    t = h.clock.now() - timedelta(minutes=40)
    for _ in range(6):
        step(h, nodes, t)
        t = h.clock.now() + timedelta(minutes=1)
        h.clock.advance(timedelta(seconds=20))
        h.daemon.outbox.flush()
        h.clock.advance(timedelta(seconds=20))
    assert [s for s, _ in hook.attempts[:3]] == [500, 500, 429]
    h.clock.advance(timedelta(minutes=5))
    h.daemon.outbox.flush()
    keys = dedupe_keys(hook)
    queued = [r["dedupe_key"] for r in h.state.outbox_rows() if r["status"] != "suppressed"]
    assert sorted(keys) == sorted(queued)
    assert len(keys) == len(set(keys))
    # three idle nodes of one owner marked in one cycle: one digest (messages.idle_digest)
    assert sum(k.startswith("idle-digest:") for k in keys) == 1
    assert not any(k.startswith("mark:") for k in keys)
    assert h.state.outbox_depth() == 0


def test_kill_switch_blocks_every_write(harness: Any, tmp_path: Any) -> None:
    h = harness()
    (tmp_path / "stop").write_text("maintenance")
    node = FleetNode(
        launch(h.client("ec2"), "p5.48xlarge", {})[0], "us-east-1", "nvidia", 8, "idle"
    )
    step(h, [node], h.clock.now() - timedelta(minutes=40))
    assert h.state.marks() == {}
    assert not re.search("CreateTags", str(h.aws.counter.calls))
