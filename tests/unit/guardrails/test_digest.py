"""Slack at fleet scale: one idle digest per owner per cycle, urgent messages first.

Slack's incoming webhooks allow about "1 message per second per channel"
(https://api.slack.com/docs/rate-limits, "Incoming webhooks"), and the outbox sends what one
cycle's ``slack.cycle_budget_s`` allows, so 400 per-node alerts at 1,000 nodes took 8 cycles
(50 per flush) and held the blind-nodes summary and spend breaches behind them. Now a cycle
queues at most one idle message per owner (``messages.idle_digest``) plus the blind summary
and spend alerts, and the outbox sends the highest priority first.

Every payload is checked against Slack's Block Kit limits
(https://api.slack.com/reference/block-kit/blocks) with slack_sdk's block models, through
``test_slack_limits.check_payload``.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import structlog

from coreburst.sandbox.clocks import FakeClock
from guardrails import messages
from guardrails.adapters.aws import Aws
from guardrails.adapters.slack import PRIORITY_URGENT, Alert, Outbox
from guardrails.config import SlackConfig
from guardrails.configfile import parse_config
from guardrails.daemon import CycleReport, Daemon
from guardrails.idle import Decision, Utilization
from guardrails.model import Node
from guardrails.rules import idle_reclaim
from guardrails.stores.sqlite import State
from tests.helpers.slack import UNI, check_payload, section_text
from tests.helpers.stores import StoreOpener

T0 = datetime(2026, 5, 5, 12, tzinfo=UTC)
TEAMS = [f"team-{i}" for i in range(7)]


def _node(i: int, team: str, itype: str = "p5.48xlarge") -> Node:
    return Node(
        f"i-{i:017x}",
        "us-east-1",
        "us-east-1a",
        itype,
        "nvidia",
        8,
        "on-demand",
        T0 - timedelta(days=1),
        tags={"team": team},
    )


def _fleet() -> tuple[list[Node], dict[str, str]]:
    """1,000 synthetic nodes (made up here, shaped as the inventory returns them): 400 idle
    spread unevenly over 7 teams, 10 blind, the rest busy."""
    nodes, state = [], {}
    for i in range(1000):
        n = _node(i, TEAMS[min(6, (i % 23) // 3)])
        nodes.append(n)
        state[n.instance_id] = "idle" if i < 400 else "unknown" if i < 410 else "busy"
    return nodes, state


@pytest.fixture
def daemon(open_store: StoreOpener, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    cfg = parse_config(
        f"""
regions: [us-east-1]
dry_run: true
instance_types: [p5.48xlarge]
idle: {{window: 30m, max_gap: 5m}}
reclaim: {{grace: 5m, owner_tags: [team]}}
state: {{path: "{tmp_path}/s.db", audit_log: "{tmp_path}/audit.jsonl"}}
metrics_endpoint: {{enabled: false}}
"""
    )
    nodes, kinds = _fleet()

    def utilization(*_a: Any, **_k: Any) -> dict[str, Utilization]:
        return {i: Utilization(k, f"synthetic {k}") for i, k in kinds.items()}

    # the CloudWatch read is not under test here (test_idle_* cover it); the rule's messages are
    monkeypatch.setattr(idle_reclaim, "utilization", utilization)
    clock = FakeClock(T0)
    state = open_store("digest")
    d = Daemon(cfg, Aws(cfg.aws), state, clock=clock, owner_id="test")
    d.actuator.leader = True
    d.nodes = nodes
    yield d, clock, nodes
    d.close()


def _cycle(d: Any, clock: FakeClock) -> list[dict[str, Any]]:
    """Run the rule once; the rows it queued (not the suppressed ones)."""
    before = {r["dedupe_key"] for r in d.state.outbox_rows()}
    d.report = CycleReport(clock.now())
    d.actuator.begin_cycle(d.report.actions)
    idle_reclaim.run(d.context())
    return [
        r
        for r in d.state.outbox_rows()
        if r["dedupe_key"] not in before and r["status"] != "suppressed"
    ]


def test_1000_nodes_400_idle_at_most_teams_plus_2_messages_none_lost(daemon: Any) -> None:
    d, clock, nodes = daemon
    rows = _cycle(d, clock)
    assert len(rows) <= len(TEAMS) + 2, [r["dedupe_key"] for r in rows]
    print(f"messages this cycle at 1,000 nodes / 400 idle / 7 teams: {len(rows)}")
    for r in rows:
        check_payload(json.loads(r["payload"]))
    digests = [r for r in rows if r["dedupe_key"].startswith("idle-digest:")]
    assert len(digests) == len(TEAMS)
    idle = Counter(n.tags["team"] for n in nodes[:400])
    price = d.prices.hourly(nodes[0])
    seen: set[str] = set()
    for r in digests:
        p = json.loads(r["payload"])
        fields = {
            f["text"].split("\n")[0].strip("*"): f["text"].split("\n")[1]
            for f in p["blocks"][2]["fields"]
        }
        team = fields["Owner"].removeprefix("team=")
        n = idle[team]
        assert fields["Marked"] == str(n)
        assert fields["At stake"] == f"${n * price:,.2f}/h"
        text = section_text(p)
        listed = set(re.findall(r"i-[0-9a-f]{17}", text))
        more = re.search(r"\u2026 and (\d+) more marked", text)
        assert len(listed) + (int(more.group(1)) if more else 0) == n
        assert listed <= {x.instance_id for x in nodes[:400] if x.tags["team"] == team}
        seen |= listed
        assert "coreburst:exempt-until=" in text and "coreburst guardrails explain" in text
    assert sum(idle.values()) == 400
    # the blind summary went out at urgent priority; the digests are routine
    blind = [r for r in rows if r["dedupe_key"].startswith("blind:")]
    assert len(blind) == 1 and int(blind[0]["priority"]) == PRIORITY_URGENT
    # the next cycle changes nothing: no digest is sent again
    clock.advance(timedelta(minutes=1))
    assert [r for r in _cycle(d, clock) if r["dedupe_key"].startswith("idle-")] == []


def test_maximal_digest_fits_and_counts_the_rest() -> None:
    """500 marked, 500 reclaimed, 500 busy again, an owner of 12 tags x 250 characters of
    hostile unicode: within every Block Kit limit, and the counts survive."""
    who = ", ".join(f"owner-{i}={(UNI * 20)[:250]}" for i in range(12))
    marked = [
        (_node(i, "x", "p5.48xlarge"), _decision(i, "mark"), 55.04 if i % 2 else None)
        for i in range(500)
    ]
    acted = [(f"reclaim:{i}", _node(i, "x"), _decision(i, "act"), 55.04) for i in range(500)]
    unmarked = [(_node(i, "x"), _decision(i, "unmark")) for i in range(500)]
    a = messages.idle_digest(
        who,
        marked,
        acted,
        unmarked,
        now=T0,
        exempt_tag="coreburst:exempt-until",
        max_exemption_days=14,
        dry_run=True,
    )
    p = a.payload()
    check_payload(p)
    text = section_text(p)
    assert "\u2026 and 490 more marked ($13,484.80/h (+245 unpriced))" in text
    assert "*500 idle node(s) reclaimed*" in text and "\u2026 and 490 more" in text
    assert "coreburst:exempt-until=2026-05-12" in text
    # mrkdwn parts escaped (the header is plain_text: Slack does not act on mentions there)
    assert "<!channel>" not in json.dumps([b for b in p["blocks"] if b["type"] != "header"])
    assert "<!channel>" not in p["text"]


def _decision(i: int, step: Any) -> Decision:
    return Decision(
        f"i-{i:017x}",
        "idle",
        step,
        "stop",
        "idle",
        Utilization("idle", "x"),
        T0,
        T0 + timedelta(minutes=i),
    )


def test_single_event_keeps_the_per_node_message() -> None:
    n = _node(1, "ml")
    a = messages.idle_digest(
        "team=ml",
        [(n, _decision(1, "mark"), 55.04)],
        [],
        [],
        now=T0,
        exempt_tag="coreburst:exempt-until",
        max_exemption_days=14,
        dry_run=False,
    )
    assert a.title == f"Idle node {n.instance_id} will be stopped"
    assert a.dedupe_key.startswith("mark:")


def _outbox(state: Any, sent: list[dict[str, Any]]) -> Outbox:
    def send(payload: dict[str, Any]) -> tuple[int, dict[str, str], str]:
        sent.append(payload)
        return 200, {}, "ok"

    return Outbox(
        state,
        SlackConfig(),
        FakeClock(T0),
        url="https://hooks.slack.invalid/services/T/B/X",
        log=structlog.get_logger(),
        send=send,
    )


def test_spend_breach_after_400_routine_rows_is_sent_first(open_store: StoreOpener) -> None:
    """On both stores: 400 routine rows, then a spend breach and the blind summary; a
    1-message budget sends the breach (urgent, oldest urgent first), the next the blind
    summary, and only then routine rows, oldest first."""
    state = open_store("prio")
    sent: list[dict[str, Any]] = []
    box = _outbox(state, sent)
    for i in range(400):
        # straight into the store, as ``Outbox.enqueue`` stores a routine alert (its cooldown
        # lookup reads the whole DynamoDB outbox per alert: 400 of them took 2 minutes on moto)
        routine = Alert(f"r{i}", f"r{i}", f"routine {i}", ["x"])
        assert state.enqueue(routine.dedupe_key, routine.alert_key, routine.payload(), T0)
    breach = messages.spend_threshold(
        "account",
        "daily:2026-05-05",
        100,
        spent=1200,
        limit=1000,
        burn=50,
        projected_month=30000,
        enforce=False,
    )
    assert breach.priority == PRIORITY_URGENT
    assert box.enqueue(breach, timedelta(0))
    blind = messages.blind(
        [Decision("i-1", "unknown", "none", "stop", "x", Utilization("unknown", "no data"))]
    )
    assert box.enqueue(blind, timedelta(0))
    assert box.flush(limit=1) == 1
    assert sent[-1]["blocks"][0]["text"]["text"] == breach.title
    assert box.flush(limit=1) == 1
    assert sent[-1]["blocks"][0]["text"]["text"] == blind.title
    assert box.flush(limit=1) == 1
    assert sent[-1]["blocks"][0]["text"]["text"] == "routine 0"


def test_sqlite_state_from_before_priorities_migrates(tmp_path: Path) -> None:
    """An outbox table without the column gains it (ALTER TABLE ... ADD COLUMN with a default:
    https://www.sqlite.org/lang_altertable.html); its rows read as routine and still send."""
    path = tmp_path / "old.sqlite"
    db = sqlite3.connect(path)
    db.execute(
        "CREATE TABLE outbox (id INTEGER PRIMARY KEY AUTOINCREMENT, dedupe_key TEXT NOT NULL"
        " UNIQUE, alert_key TEXT NOT NULL, payload TEXT NOT NULL, created_at TEXT NOT NULL,"
        " next_attempt_at TEXT NOT NULL, attempts INTEGER NOT NULL DEFAULT 0, status TEXT NOT"
        " NULL, sent_at TEXT, last_error TEXT)"
    )
    db.execute(
        "INSERT INTO outbox (dedupe_key, alert_key, payload, created_at, next_attempt_at,"
        " status) VALUES ('old', 'old', '{\"text\": \"old\"}', ?, ?, 'pending')",
        (T0.isoformat(), T0.isoformat()),
    )
    db.commit()
    db.close()
    state = State(path)
    try:
        state.enqueue("new", "new", {"text": "new"}, T0, priority=PRIORITY_URGENT)
        assert [(r["dedupe_key"], r["priority"]) for r in state.due(T0)] == [
            ("new", PRIORITY_URGENT),
            ("old", 0),
        ]
    finally:
        state.close()
