"""Against moto server and the loopback Slack receiver: two daemons on one store act once, an
AWS Budgets notification travels SNS -> SQS -> daemon -> Slack exactly once, and the Lambda
entry point on DynamoDB acts on every scheduled invocation and survives a SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest

from coreburst.sandbox.emulator import WebhookReceiver
from guardrails.rules.budget_relay import BudgetRelayConfig
from guardrails.stores.dynamodb import DynamoState
from tests.helpers.guardrails_lambda import BUDGETS_TEXT, LambdaStack, invoke
from tests.helpers.guardrails_loopback import fleet, step

pytestmark = pytest.mark.integration


def test_two_daemons_on_one_store_act_once(harness: Any, hook: WebhookReceiver) -> None:
    a = harness()
    b = harness()  # same state file: a second daemon, e.g. a Lambda beside a long-running one
    b.daemon.owner_id = "other-host"
    b.clock = a.clock
    b.daemon.clock = a.clock
    n = fleet(a)
    nodes = list(n.values())
    t = a.clock.now() - timedelta(minutes=40)
    step(a, nodes, t)
    rb = b.daemon.run_cycle()
    assert not b.daemon.leader and rb.actions == []
    a.clock.advance(timedelta(minutes=35))
    ra = step(a, nodes, a.clock.now() - timedelta(minutes=35))
    rb = b.daemon.run_cycle()
    assert len(ra.actions) == 3 and rb.actions == []
    done = [r for r in a.state.actions() if r["status"] == "done"]
    assert len(done) == 3
    audit = (a.cfg.state.audit_log).read_text()
    assert '"leader.standby"' in audit


def test_budget_notification_end_to_end(harness: Any, hook: WebhookReceiver) -> None:
    h = harness()
    sns, sqs = h.client("sns"), h.client("sqs")
    topic = sns.create_topic(Name="budget-alerts")["TopicArn"]
    queue = sqs.create_queue(QueueName="budget-events")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=queue_arn)
    sns.publish(TopicArn=topic, Message=BUDGETS_TEXT, Subject="AWS Budgets: budget-monthly")

    # The relay is the budget-relay rule, on from the cycle after a reload that names the queue.
    h.daemon.reload(h.cfg.model_copy(update={"budget_relay": BudgetRelayConfig(queue_url=queue)}))
    n = fleet(h)
    before = len(hook.posts)
    assert step(h, list(n.values()), h.clock.now() - timedelta(minutes=5)).budget_notices == 1
    posts = hook.posts[before:]
    (post,) = [p for p in posts if p["blocks"][0]["text"]["text"].startswith("Budget alert")]
    text = json.dumps(post)
    assert "budget-monthly" in text and "$48,211.07" in text
    # Enriched with the live burn from the inventory the cycle just took.
    burn = sum(h.daemon.prices.hourly(x) or 0.0 for x in h.daemon.nodes)
    assert f"${burn:,.2f}/h" in text
    assert "Top spenders now: owner=" in text
    # The message is gone from the queue, and a re-run sends nothing twice.
    assert sqs.receive_message(QueueUrl=queue).get("Messages", []) == []
    assert h.daemon.run_cycle().budget_notices == 0
    assert len([p for p in hook.posts if "Budget alert" in json.dumps(p)]) == 1


# -- the deployed entry point: guardrails.lambda_handler on DynamoDB -------------------------


def mark_titles(hook: WebhookReceiver) -> list[str]:
    return [t for t in hook.titles() if "will be stopped" in t]


def test_lambda_handler_runs_one_cycle_on_dynamodb(
    lambda_stack: Any, hook: WebhookReceiver, t0: datetime
) -> None:
    """The deployed entry point: config from the environment, state in DynamoDB, the webhook
    from Secrets Manager; everything on the emulator."""
    stack = lambda_stack(dry_run=True)
    stack.idle_node(t0)
    out = invoke(t0, "req-1")
    assert out["nodes"] >= 1 and out["errors"] == []
    # The invocation handed the leader lease back: the next one (another request id) may act
    # at once.
    assert DynamoState(stack.table).acquire_lease("leader", "lambda:req-2", t0, 60)


def test_scheduled_invocations_each_act(
    lambda_stack: Any, hook: WebhookReceiver, t0: datetime
) -> None:
    """EventBridge Scheduler at rate(1 minute): invocations at 0, 60 and 120 s, each with its
    own request id. Each must be the leader and do its cycle's work — here, mark the node that
    went idle since the last one and send its Slack warning. (Before: the first invocation's
    lease, never released and held for 180 s, left the second and third standing by.)
    ``idle.every`` is 1m so each invocation reads utilization (the cadence is kept in the
    state table across invocations)."""
    stack = lambda_stack(idle={"window": "30m", "max_gap": "5m", "every": "1m"})
    for i in range(3):
        at = t0 + timedelta(seconds=60 * i)
        node = stack.idle_node(at)
        out = invoke(at, f"req-{i}")
        assert out["errors"] == [], out
        assert stack.tags(node.instance_id).get("coreburst:idle-since") == at.isoformat()
        assert mark_titles(hook)[-1] == f"Idle node {node.instance_id} will be stopped"
    assert len(mark_titles(hook)) == 3


def test_budget_notice_relayed_by_the_lambda(
    lambda_stack: Any, hook: WebhookReceiver, t0: datetime
) -> None:
    stack = lambda_stack()
    boto3.client("sns").publish(TopicArn=stack.topic_arn, Message=BUDGETS_TEXT)
    out = invoke(t0, "req-1")
    assert out["budget_notices"] == 1
    assert [t for t in hook.titles() if t.startswith("Budget alert")] == [
        "Budget alert: budget-monthly"
    ]
    assert invoke(t0 + timedelta(seconds=60), "req-2")["budget_notices"] == 0


def _killed_invocation(stack: LambdaStack, at: datetime, point: str, marker: Path) -> None:
    """One Lambda invocation in its own process, SIGKILLed at ``point`` (as Lambda ends one at
    its timeout or out of memory: no finally runs)."""
    script = (
        "import sys; from datetime import datetime; from pathlib import Path\n"
        "from coreburst.sandbox.clocks import OffsetClock\n"
        "from coreburst.sandbox.hooks import pause_at\n"
        "from guardrails.lambda_handler import run\n"
        "class Context:\n"
        "    aws_request_id = 'req-killed'\n"
        "    def get_remaining_time_in_millis(self): return 120_000\n"
        "run({}, Context(), clock=OffsetClock(datetime.fromisoformat(sys.argv[1])),\n"
        "    pause=pause_at(sys.argv[2], Path(sys.argv[3])))"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COREBURST_", "AWS_"))}
    env.update(stack.env)
    p = subprocess.Popen(
        [sys.executable, "-c", script, at.isoformat(), point, str(marker)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 90
    while not marker.exists():
        assert p.poll() is None, p.stderr.read() if p.stderr else ""
        assert time.monotonic() < deadline, "never reached the pause point"
        time.sleep(0.05)
    p.send_signal(signal.SIGKILL)
    p.wait(timeout=10)
    marker.unlink()


def test_sigkilled_invocation_blocks_one_interval_and_its_intent_is_recovered(
    lambda_stack: Any, hook: WebhookReceiver, t0: datetime, tmp_path: Path
) -> None:
    """kill -9 on DynamoDB: an invocation dies right after recording its intent, holding the
    lease. The next invocation within the schedule interval stands by; the one after the
    interval leads, finds the instance still running, drops the intent, decides afresh and
    stops the node exactly once."""
    stack = lambda_stack()
    node = stack.idle_node(t0)
    iid = node.instance_id
    assert invoke(t0, "req-1")["errors"] == []  # marks it
    t_act = t0 + timedelta(minutes=21)  # past the 20 min grace
    # idle_node published 30 minutes past t0 already; publishing those minutes again would
    # double each period's rollup SampleCount (a second publisher), which reads as blind
    _killed_invocation(stack, t_act, "after-intent", tmp_path / "paused")
    store = DynamoState(stack.table)
    assert [r["instance_id"] for r in store.pending_intents()] == [iid]
    assert stack.instance_state(iid) == "running"

    # When the dead invocation took its lease: its clock started at t_act and ran for as long
    # as it took to get there (seconds on a loaded machine), so read it from the lease itself.
    lease = stack.table.get_item(Key={"pk": "lease", "sk": "leader"})["Item"]
    assert lease["owner"] == "lambda:req-killed"
    expires = datetime.fromtimestamp(float(lease["expires"]), tz=t_act.tzinfo)
    taken = expires - timedelta(seconds=60)  # the schedule's interval
    assert t_act <= taken < t_act + timedelta(seconds=60)

    # 30 s later the dead invocation's lease still holds: this one only observes.
    invoke(taken + timedelta(seconds=30), "req-3")
    assert stack.instance_state(iid) == "running"
    assert [r["instance_id"] for r in store.pending_intents()] == [iid]

    # One interval (60 s) after the killed one took it, the lease has run out.
    out = invoke(expires + timedelta(seconds=1), "req-4")
    assert out["errors"] == [], out
    assert stack.instance_state(iid) in ("stopping", "stopped")
    events = [json.loads(x) for x in (tmp_path / "audit.jsonl").read_text().splitlines()]
    kinds = [e["event"] for e in events if e["event"].startswith("action.")]
    assert kinds == ["action.intent-dropped", "action.executed"]
    assert [r["status"] for r in store.actions()] == ["done"]
    assert hook.titles().count(f"Idle node {iid} stopped") == 1
