"""Every Slack message the guardrails send stays within Slack's Block Kit limits, whatever the
input, and a message Slack refuses (4xx) is an alarm, never a silent drop.

The limits are Slack's, from https://api.slack.com/reference/block-kit/blocks (header text
<= 150 characters of plain_text; section text <= 3000; at most 10 fields of <= 2000 each;
context at most 10 elements; at most 50 blocks; block_id <= 255) and the message reference
(``text`` truncated past 40,000 characters, under 4,000 recommended). They are checked with
slack_sdk's own block models (``Block.parse(...).validate_json()`` raises
``SlackObjectFormationError`` past a limit it knows); the two it does not check (a field's
2000 characters, non-empty text) are asserted from the same page.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import boto3
import pytest
import structlog
from prometheus_client import generate_latest
from slack_sdk.errors import SlackObjectFormationError
from slack_sdk.models.blocks import Block

from coreburst.common.telemetry import UTILIZATION_METRICS
from coreburst.sandbox.clocks import FakeClock
from coreburst.sandbox.emulator import FleetNode, WebhookReceiver, launch, publish
from guardrails.adapters.aws import Aws
from guardrails.adapters.slack import Alert, Outbox, clip, fit_lines
from guardrails.config import SlackConfig
from guardrails.configfile import parse_config
from guardrails.daemon import Daemon
from guardrails.metrics import Metrics
from guardrails.rules.budget_relay import BudgetRelayConfig
from guardrails.stores.sqlite import State
from tests.helpers.slack import UNI, check_payload, section_text

METRIC_DEFS = {
    k: (m.namespace, m.metric_name, m.device_dimension) for k, m in UTILIZATION_METRICS.items()
}


# -- the payload builder, at maximal inputs ---------------------------------------------------
@pytest.mark.parametrize(
    "alert",
    [
        Alert("k", "k", "t", [f"• i-{i:017x}: {UNI * 30}" for i in range(500)]),
        Alert("k" * 5000, "a" * 5000, UNI * 200, [UNI * 2000], severity="critical"),
        Alert("k", "k", "", [""]),
        Alert("k", "k", "\n\n", [], fields={}),
        Alert(
            "k",
            "k",
            "x",
            ["y"],
            fields={f"{UNI * 50}{i}": UNI * 500 for i in range(40)},
        ),
        Alert("k", "k", "t", ["&" * 5000]),  # escapes grow the text 5x
        Alert("k", "k", "t", ["a" * 2998, "b"]),
    ],
    ids=["500-lines", "huge-everything", "empty", "blank-title", "40-fields", "ampersands", "edge"],
)
def test_payload_stays_within_block_kit_limits(alert: Alert) -> None:
    check_payload(alert.payload())


def test_the_slack_models_do_reject_what_we_cut() -> None:
    """The check is real: the same content uncut is what slack_sdk refuses."""
    with pytest.raises(SlackObjectFormationError):
        Block.parse(
            {"type": "section", "text": {"type": "mrkdwn", "text": "x" * 3001}}
        ).validate_json()  # type: ignore[union-attr]
    with pytest.raises(SlackObjectFormationError):
        Block.parse(
            {"type": "header", "text": {"type": "plain_text", "text": "x" * 151}}
        ).validate_json()  # type: ignore[union-attr]


def test_lists_say_how_many_more_and_mentions_are_escaped() -> None:
    lines = [f"• talker-{i}: 1.0 GB" for i in range(300)]
    text = section_text(Alert("k", "k", "Egress spike", ["why", *lines]).payload())
    shown = sum(1 for x in text.splitlines() if x.startswith("• talker-"))
    assert 100 < shown < 300
    assert text.splitlines()[-1] == f"\u2026 and {300 - shown} more"
    p = Alert("k", "k", "t", ["owner=<!channel> & co"], fields={"Owner": "<@U1>"}).payload()
    assert "&lt;!channel&gt; &amp; co" in section_text(p)
    assert "<!channel>" not in json.dumps(p) and "<@U1>" not in json.dumps(p)
    fields = Alert("k", "k", "t", ["x"], fields={f"f{i}": "v" for i in range(14)}).payload()
    assert fields["blocks"][2]["fields"][-1]["text"] == "*\u2026 and*\n5 more"


def test_clip_never_splits_an_escape() -> None:
    assert clip("ab&amp;cd", 5) == "ab\u2026"
    assert clip("abc", 3) == "abc"
    assert fit_lines(["x" * 10, "y" * 10, "z" * 10], 25) == "x" * 10 + "\n\u2026 and 2 more"
    assert fit_lines(["x" * 10, "y" * 10], 12) == "\u2026 and 2 more"


# -- every message kind the daemon builds, from the daemon itself ------------------------------
T0 = datetime(2026, 5, 5, 12, tzinfo=UTC)
OWNER_TAGS = [f"owner-{i}" for i in range(12)]

BUDGETS_TEXT = """AWS Budget Notification May 05, 2026
AWS Account 123456789012

Budget Name: {name}
Budget Type: Cost
Budgeted Amount: $60,000.00
Alert Type: ACTUAL
Alert Threshold: > $48,000.00
ACTUAL Amount: $48,211.07
"""


def test_every_daemon_message_fits_at_maximal_inputs(
    aws_env: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """120 nodes whose owner is 12 tags of 250 characters of unicode each, every one a top
    talker (top_talkers: 500); 117 blind, 3 idle; a scope name of 200 characters over its
    limit; a budget notice with a 2,000-character name; the kill switch; the breaker. Every
    payload the daemon queued is checked against Slack's limits."""
    long_scope = "s" * 200
    cfg = parse_config(
        f"""
regions: [us-east-1]
dry_run: false
instance_types: [p5.48xlarge]
idle: {{window: 30m, max_gap: 5m}}
reclaim: {{grace: 5m, owner_tags: {json.dumps(OWNER_TAGS)}}}
safety: {{max_actions_per_cycle: 50, breaker_failures: 1,
          kill_switch_file: "{tmp_path}/stop", kill_switch_env: COREBURST_TEST_KS}}
spend: {{cost_explorer: false, include_lustre: false, direct_connect_ports: [],
         spot_price: catalog-estimate,
         scopes: [{{name: account, daily_limit_usd: 1}}, {{name: {long_scope},
                   daily_limit_usd: 1, tag_key: owner-0, tag_value: nobody}},
                  {{name: x, daily_limit_usd: 1}}]}}
egress: {{daily_threshold_usd: 0.01, top_talkers: 500, include_nat: false}}
state: {{path: "{tmp_path}/s.db", audit_log: "{tmp_path}/audit.jsonl"}}
metrics_endpoint: {{enabled: false}}
"""
    )
    ec2 = boto3.client("ec2", region_name="us-east-1")
    cw = boto3.client("cloudwatch", region_name="us-east-1")
    tags = {k: (UNI * 20)[:250] for k in OWNER_TAGS}
    ids = launch(ec2, "p5.48xlarge", tags, count=120)
    nodes = [
        FleetNode(i, "us-east-1", "nvidia", 8, "idle" if n < 3 else "missing", 50.0)
        for n, i in enumerate(ids)
    ]
    publish(
        {"us-east-1": cw},
        nodes,
        T0 - timedelta(minutes=40),
        T0 + timedelta(minutes=10),
        metric_defs=METRIC_DEFS,
    )
    sqs = boto3.client("sqs", region_name="us-east-1")
    queue = sqs.create_queue(QueueName="budget-events")["QueueUrl"]
    sqs.send_message(QueueUrl=queue, MessageBody=BUDGETS_TEXT.format(name=UNI * 100))

    cfg = cfg.model_copy(update={"budget_relay": BudgetRelayConfig(queue_url=queue)})
    clock = FakeClock(T0)
    state = State(cfg.state.path)
    d = Daemon(cfg, Aws(cfg.aws), state, clock=clock, owner_id="test")
    try:
        assert d.run_cycle().budget_notices == 1  # marks, blind, egress, spend, budget relay
        clock.advance(timedelta(minutes=5))
        d.run_cycle()  # grace (5m, the shortest allowed) over: the marked nodes are acted on
        monkeypatch.setenv("COREBURST_TEST_KS", "1")
        clock.advance(timedelta(minutes=1))
        d.run_cycle()  # kill switch
        monkeypatch.delenv("COREBURST_TEST_KS")
        d.actuator.actions_this_cycle = 0
        d.actuator.execute("k", "i-" + "f" * 200, "us-east-1", "stop", reason="x", call=_throttled)
        rows = [r for r in state.outbox_rows() if r["status"] != "suppressed"]
    finally:
        d.close()
        state.close()
    kinds = {r["dedupe_key"].split(":")[0] for r in rows}
    # the 3 idle nodes share an owner: their marks and reclaims go out as idle digests
    assert {"idle-digest", "blind", "egress", "spend", "budget", "killswitch", "breaker"} <= kinds
    for r in rows:
        check_payload(json.loads(r["payload"]))
    egress = next(json.loads(r["payload"]) for r in rows if r["dedupe_key"].startswith("egress"))
    assert section_text(egress).splitlines()[-1].startswith("\u2026 and ")
    blind = next(json.loads(r["payload"]) for r in rows if r["dedupe_key"].startswith("blind"))
    assert "\u2026 and 97 more" in section_text(blind)  # 117 blind, 20 ids listed


def _throttled() -> str:
    from botocore.exceptions import ClientError

    raise ClientError({"Error": {"Code": "Throttling", "Message": "slow down"}}, "StopInstances")


# -- a message Slack refuses ------------------------------------------------------------------
def test_a_4xx_is_an_alarm_and_the_row_is_kept(tmp_path: Path) -> None:
    """The loopback webhook answers 400 ``invalid_blocks`` as Slack does for a bad payload
    (https://api.slack.com/messaging/webhooks#handling_errors): the row stays ``failed`` with
    Slack's error, the log says so at error level without the URL, and
    coreburst_slack_rejected_total{status="400"} counts it. A 500 is retried, not counted."""
    hook = WebhookReceiver().start()
    hook.script = [(400, {}, "invalid_blocks"), (500, {}, "oops")]
    metrics = Metrics()
    clock = FakeClock(T0)
    state = State(tmp_path / "s.db")
    with structlog.testing.capture_logs() as logs:
        ob = Outbox(
            state,
            SlackConfig(backoff_base=timedelta(seconds=1)),
            clock,
            url=hook.url,
            log=structlog.get_logger("t"),
            metrics=metrics,
        )
        try:
            assert ob.enqueue(Alert("ev-1", "a", "one", ["x"]))
            assert ob.enqueue(Alert("ev-2", "b", "two", ["y"]))
            assert ob.flush() == 0  # 400 for ev-1, 500 for ev-2
            clock.advance(timedelta(seconds=5))
            assert ob.flush() == 1  # ev-2 retried and delivered; ev-1 is not retried
            assert ob.flush() == 0
        finally:
            hook.stop()
    rows = {r["dedupe_key"]: r for r in state.outbox_rows()}
    assert rows["ev-1"]["status"] == "failed"
    assert rows["ev-1"]["last_error"] == "HTTP 400: invalid_blocks"
    assert rows["ev-2"]["status"] == "sent"
    assert [s for s, _ in hook.attempts] == [400, 500, 200]
    rejected = [e for e in logs if e["event"] == "alert.rejected"]
    assert len(rejected) == 1 and rejected[0]["log_level"] == "error"
    assert rejected[0]["slack_error"] == "invalid_blocks" and rejected[0]["status"] == 400
    assert hook.url not in json.dumps(logs) and "/services/" not in json.dumps(logs)
    exposed = generate_latest(metrics.registry).decode()
    assert 'coreburst_slack_rejected_total{status="400"} 1.0' in exposed
    assert 'status="500"' not in exposed
    state.close()


def test_status_shows_failed_alerts(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from guardrails.cli import app

    cfg = tmp_path / "g.yaml"
    cfg.write_text(f'state: {{path: "{tmp_path}/s.db", audit_log: "{tmp_path}/a.jsonl"}}\n')
    state = State(tmp_path / "s.db")
    state.enqueue("ev-1", "a", Alert("ev-1", "a", "t", ["x"]).payload(), T0)
    (row,) = state.due(T0)
    state.retry_later(row["id"], T0, "HTTP 400: invalid_blocks", True)
    state.enqueue("ev-2", "b", Alert("ev-2", "b", "t", ["x"]).payload(), T0)
    state.close()
    r = CliRunner().invoke(app, ["status", "--config", str(cfg)])
    assert r.exit_code == 0, r.output
    assert "1 pending, 0 sent, 1 failed" in r.output
    assert "ev-1: HTTP 400: invalid_blocks" in r.output
