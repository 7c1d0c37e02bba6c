"""One suite, run against both state stores: SQLite (default) and DynamoDB (on moto)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
from boto3.dynamodb.conditions import Key
from moto import mock_aws

from guardrails.stores.dynamodb import DynamoState, create_table
from guardrails.stores.sqlite import State
from tests.helpers.aws import atomic_moto_requests

T0 = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


@pytest.fixture(params=["sqlite", "dynamodb"])
def opener(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: Any
) -> Iterator[Callable[[], Any]]:
    """Opens a new handle on one shared store, as a second daemon would."""
    if request.param == "sqlite":
        yield lambda: State(tmp_path / "state.sqlite")
        return
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    # DynamoDB's conditional writes are atomic; moto's in-process ones are not (1 run in 5 of
    # the racing test let two threads win): one lock per emulated request, as open_store does.
    atomic_moto_requests(monkeypatch)
    with mock_aws():
        ddb = boto3.resource("dynamodb", region_name="us-east-1")
        table = create_table(ddb, "coreburst-state")
        yield lambda: DynamoState(table)


@pytest.fixture
def store(opener: Callable[[], Any]) -> Any:
    return opener()


def test_marks(store: Any) -> None:
    store.add_mark("i-1", "us-east-1", T0, "stop", reason="idle 30m", dry=False)
    store.add_mark("i-1", "us-east-1", T0 + timedelta(hours=1), "stop", reason="again", dry=False)
    marks = store.marks()
    assert list(marks) == ["i-1"]
    assert marks["i-1"]["marked_at"] == T0.isoformat()  # the first mark is kept
    assert marks["i-1"]["reason"] == "idle 30m"
    store.remove_mark("i-1")
    assert store.marks() == {}


def test_action_intent_is_recorded_once(store: Any) -> None:
    assert store.record_intent("stop:i-1:1", "i-1", "us-east-1", "stop", T0) is True
    assert store.record_intent("stop:i-1:1", "i-1", "us-east-1", "stop", T0) is False
    assert [r["key"] for r in store.pending_intents()] == ["stop:i-1:1"]
    store.finish_action("stop:i-1:1", "done", T0 + timedelta(seconds=5), "stopped")
    assert store.pending_intents() == []
    row = store.action("stop:i-1:1")
    assert (row["status"], row["detail"]) == ("done", "stopped")
    assert store.action("nope") is None


def test_two_runs_racing_act_once(opener: Callable[[], Any]) -> None:
    wins: list[bool] = []
    lock = threading.Lock()
    barrier = threading.Barrier(4)

    def run() -> None:
        store = opener()  # each racer has its own connection / client
        barrier.wait()
        won = store.record_intent("terminate:i-9:1", "i-9", "us-east-1", "terminate", T0)
        with lock:
            wins.append(won)

    if isinstance(store, State):
        pytest.skip(
            "sqlite connections are per-thread; the cross-process race is in the daemon suite"
        )
    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(wins) == [False, False, False, True]


def test_outbox_dedupe_retry_and_delivery(store: Any) -> None:
    assert store.enqueue("idle:i-1:mark", "idle:i-1", {"text": "a"}, T0) is True
    assert store.enqueue("idle:i-1:mark", "idle:i-1", {"text": "a"}, T0) is False
    store.remember("idle:i-2:mark", "idle:i-2", T0)
    assert store.outbox_depth() == 1
    (row,) = store.due(T0)
    store.retry_later(row["id"], T0 + timedelta(seconds=30), "HTTP 429", give_up=False)
    assert store.due(T0 + timedelta(seconds=10)) == []
    (again,) = store.due(T0 + timedelta(seconds=30))
    assert again["attempts"] == 1 and again["last_error"] == "HTTP 429"
    store.mark_sent(again["id"], T0 + timedelta(seconds=31))
    assert store.outbox_depth() == 0
    rows = store.outbox_rows()
    assert [r["status"] for r in rows] == ["sent", "suppressed"]
    assert rows[0]["attempts"] == 2
    assert store.last_alert("idle:i-1") == T0
    assert store.last_alert("idle:i-2") is None  # suppressed events are not alerts


def test_outbox_gives_up_after_retries(store: Any) -> None:
    store.enqueue("k", "a", {"text": "x"}, T0)
    (row,) = store.due(T0)
    store.retry_later(row["id"], T0, "HTTP 500", give_up=True)
    assert store.due(T0 + timedelta(days=1)) == []
    assert store.outbox_rows()[0]["status"] == "failed"


def test_spend_and_egress_snapshots(store: Any) -> None:
    store.add_spend(T0, "team=ml", burn=110.08, today=500.0, mtd=9000.0, proj=80000.0)
    store.add_spend(
        T0 + timedelta(minutes=1), "team=ml", burn=55.04, today=501.0, mtd=9001.0, proj=79000.0
    )
    last = store.last_spend("team=ml")
    assert last["burn"] == pytest.approx(55.04) and last["projected_month"] == 79000.0
    assert store.last_spend("team=other") is None
    for i, usd in enumerate([10.0, 12.0, 50.0]):
        store.add_egress(T0 + timedelta(hours=i), usd, usd * 11)
    assert store.egress_history(T0, T0 + timedelta(hours=2)) == [10.0, 12.0]


def test_old_snapshots_are_pruned_but_each_scopes_latest_is_kept(store: Any) -> None:
    day = timedelta(days=1)
    for d in range(5):
        store.add_spend(T0 + d * day, "account", burn=1.0, today=d, mtd=d, proj=d)
        store.add_egress(T0 + d * day, 10.0 + d, 1.0)
    store.add_spend(T0, "team=ml", burn=2.0, today=7.0, mtd=7.0, proj=7.0)  # its only one
    gone = store.prune_snapshots(T0 + 3 * day, ["account", "team=ml"])
    assert gone == 3 + 3  # account days 0-2, egress days 0-2
    assert store.last_spend("account")["today"] == 4
    assert store.last_spend("team=ml")["today"] == 7.0
    assert store.egress_history(T0, T0 + 10 * day) == [13.0, 14.0]
    assert store.prune_snapshots(T0 + 3 * day, ["account", "team=ml"]) == 0


def test_kv(store: Any) -> None:
    assert store.get("breaker", {"failures": 0}) == {"failures": 0}
    store.put("breaker", {"failures": 3, "since": T0})
    assert store.get("breaker") == {"failures": 3, "since": str(T0)}


def test_leader_lease(store: Any) -> None:
    assert store.acquire_lease("leader", "daemon-a", T0, 120) is True
    assert store.acquire_lease("leader", "daemon-b", T0 + timedelta(seconds=60), 120) is False
    assert store.acquire_lease("leader", "daemon-a", T0 + timedelta(seconds=60), 120) is True
    # Expired: the other daemon takes over.
    assert store.acquire_lease("leader", "daemon-b", T0 + timedelta(seconds=200), 120) is True
    assert store.acquire_lease("leader", "daemon-a", T0 + timedelta(seconds=201), 120) is False
    store.release_lease("leader", "daemon-a")  # not the holder: no effect
    assert store.acquire_lease("leader", "daemon-a", T0 + timedelta(seconds=202), 120) is False
    store.release_lease("leader", "daemon-b")
    assert store.acquire_lease("leader", "daemon-a", T0 + timedelta(seconds=203), 120) is True


def test_both_stores_implement_the_store_interface(store: Any) -> None:
    """mypy checks the signatures (the daemon and the Lambda handler are typed against
    ``StateStore``); this checks at run time that no member is missing on either store."""
    from guardrails.stores.base import StateStore

    assert isinstance(store, StateStore)
    members = [m for m in vars(StateStore) if not m.startswith("_")]
    assert "drop_intent" in members
    assert all(callable(getattr(store, m)) for m in members)


def test_drop_intent_abandons_only_an_unfinished_action(store: Any) -> None:
    store.record_intent("stop:i-1:1", "i-1", "us-east-1", "stop", T0)
    store.record_intent("stop:i-2:1", "i-2", "us-east-1", "stop", T0)
    store.finish_action("stop:i-2:1", "done", T0, "stopped")
    assert store.drop_intent("stop:i-1:1") is True
    assert store.drop_intent("stop:i-2:1") is False  # done: kept as the record of the action
    assert store.drop_intent("stop:i-1:1") is False
    assert store.action("stop:i-1:1") is None
    assert store.action("stop:i-2:1")["status"] == "done"
    assert store.pending_intents() == []
    # Abandoned, the same action may be decided and recorded again.
    assert store.record_intent("stop:i-1:1", "i-1", "us-east-1", "stop", T0) is True


def test_dynamodb_snapshots_carry_a_ttl_and_the_table_enforces_it(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """DynamoDB deletes an item once the TTL attribute, a Number of epoch seconds, is in the
    past ("Using time to live (TTL) in DynamoDB", https://docs.aws.amazon.com/amazondynamodb/
    latest/developerguide/TTL.html) — the backstop when the hourly prune cannot run."""
    from guardrails.stores.dynamodb import TTL_ATTRIBUTE

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    # DynamoDB's conditional writes are atomic; moto's in-process ones are not (1 run in 5 of
    # the racing test let two threads win): one lock per emulated request, as open_store does.
    atomic_moto_requests(monkeypatch)
    with mock_aws():
        ddb = boto3.resource("dynamodb", region_name="us-east-1")
        table = create_table(ddb, "coreburst-state")
        ttl = ddb.meta.client.describe_time_to_live(TableName="coreburst-state")
        assert ttl["TimeToLiveDescription"] == {
            "TimeToLiveStatus": "ENABLED",
            "AttributeName": TTL_ATTRIBUTE,
        }
        store = DynamoState(table, snapshot_retention=timedelta(days=3))
        store.add_spend(T0, "account", burn=1.0, today=1.0, mtd=1.0, proj=1.0)
        store.add_egress(T0, 1.0, 1.0)
        store.add_mark("i-1", "us-east-1", T0, "stop", reason="idle", dry=False)
        raw = boto3.client("dynamodb", region_name="us-east-1")  # the wire form
        expect = {"N": str(int((T0 + timedelta(days=3)).timestamp()))}
        for key in (
            {"pk": "spend#account", "sk": T0.isoformat()},
            {"pk": "egress", "sk": T0.isoformat()},
        ):
            item = raw.get_item(
                TableName="coreburst-state", Key={k: {"S": v} for k, v in key.items()}
            )["Item"]
            assert item[TTL_ATTRIBUTE] == expect
        mark = raw.get_item(
            TableName="coreburst-state", Key={"pk": {"S": "mark"}, "sk": {"S": "i-1"}}
        )["Item"]
        assert TTL_ATTRIBUTE not in mark  # only snapshots expire


def test_dynamodb_last_alert_reads_one_item_not_the_outbox(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """Each enqueue asks ``last_alert`` (the alert's cooldown). It used to read the whole
    outbox partition, so 400 alerts cost 400 full reads (123 s on moto). Now one GetItem per
    call, and a table written before the per-key items existed is indexed once."""
    from guardrails.stores.dynamodb import ALERT_LAST, ALERT_LAST_INDEXED

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    # DynamoDB's conditional writes are atomic; moto's in-process ones are not (1 run in 5 of
    # the racing test let two threads win): one lock per emulated request, as open_store does.
    atomic_moto_requests(monkeypatch)
    with mock_aws():
        ddb = boto3.resource("dynamodb", region_name="us-east-1")
        table = create_table(ddb, "coreburst-state")
        old = DynamoState(table)
        for i in range(30):
            old.enqueue(f"idle:i-{i}:mark", f"idle:i-{i}", {"text": "x"}, T0 + timedelta(seconds=i))
        old.enqueue("idle:i-3:again", "idle:i-3", {"text": "x"}, T0 + timedelta(hours=1))
        old.remember("idle:i-4:later", "idle:i-4", T0 + timedelta(hours=2))  # suppressed
        # An older version's table: no per-key items, no indexed flag.
        for i in range(30):
            table.delete_item(Key={"pk": ALERT_LAST, "sk": f"idle:i-{i}"})
        table.delete_item(Key={"pk": "kv", "sk": ALERT_LAST_INDEXED})

        calls: list[str] = []
        store = DynamoState(table)
        store.client.meta.events.register(
            "before-call.dynamodb", lambda model, **_: calls.append(model.name)
        )
        assert store.last_alert("idle:i-3") == T0 + timedelta(hours=1)
        assert store.last_alert("idle:i-4") == T0 + timedelta(seconds=4)
        assert store.last_alert("idle:i-99") is None
        assert calls.count("Query") == 1  # the one-time index of the old outbox
        calls.clear()
        store.enqueue("idle:i-5:again", "idle:i-5", {"text": "x"}, T0 + timedelta(hours=3))
        for i in range(30):
            store.last_alert(f"idle:i-{i}")
        assert "Query" not in calls and "Scan" not in calls
        assert store.last_alert("idle:i-5") == T0 + timedelta(hours=3)
        # A new handle (the next Lambda invocation) reads the flag and does not index again.
        calls.clear()
        again = DynamoState(table)
        again.client.meta.events.register(
            "before-call.dynamodb", lambda model, **_: calls.append(model.name)
        )
        assert again.last_alert("idle:i-3") == T0 + timedelta(hours=1)
        assert "Query" not in calls


def test_dynamodb_outbox_reads_only_pending_rows(tmp_path: Path, monkeypatch: Any) -> None:
    """The outbox keeps every alert ever sent (its dedupe keys stop repeats), so reading the
    whole partition each cycle grows without end. ``due`` and ``outbox_depth`` read a ref per
    pending row; a sent or given-up row drops its ref in the same transaction. A table from
    before the refs is indexed once."""
    from guardrails.stores.dynamodb import OUTBOX_PENDING, OUTBOX_PENDING_INDEXED

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    # DynamoDB's conditional writes are atomic; moto's in-process ones are not (1 run in 5 of
    # the racing test let two threads win): one lock per emulated request, as open_store does.
    atomic_moto_requests(monkeypatch)
    with mock_aws():
        ddb = boto3.resource("dynamodb", region_name="us-east-1")
        table = create_table(ddb, "coreburst-state")
        old = DynamoState(table)
        for i in range(150):
            old.enqueue(f"k{i}", f"a{i}", {"text": str(i)}, T0 + timedelta(seconds=i))
        for row in old.due(T0 + timedelta(hours=1), limit=200)[:140]:
            old.mark_sent(row["id"], T0 + timedelta(hours=1))
        (given_up,) = [r for r in old.due(T0 + timedelta(hours=1), limit=200) if r["id"] == 141]
        old.retry_later(given_up["id"], T0, "HTTP 500", give_up=True)
        (retried,) = [r for r in old.due(T0 + timedelta(hours=1), limit=200) if r["id"] == 142]
        old.retry_later(retried["id"], T0 + timedelta(hours=2), "HTTP 429", give_up=False)
        assert old.outbox_depth() == 9
        # An older version's table: no refs, no flag.
        for item in table.query(KeyConditionExpression=Key("pk").eq(OUTBOX_PENDING))["Items"]:
            table.delete_item(Key={"pk": item["pk"], "sk": item["sk"]})
        table.delete_item(Key={"pk": "kv", "sk": OUTBOX_PENDING_INDEXED})

        store = DynamoState(table)
        assert store.outbox_depth() == 9  # indexed from one read of the old outbox
        queried: list[str] = []
        store.client.meta.events.register(
            "before-call.dynamodb.Query",
            lambda params, **_: queried.append(params["body"].decode()),
        )
        due = store.due(T0 + timedelta(hours=1, minutes=30))
        assert sorted(r["id"] for r in due) == [143, 144, 145, 146, 147, 148, 149, 150]
        assert 142 in [r["id"] for r in store.due(T0 + timedelta(hours=2))]
        assert store.outbox_depth() == 9
        store.mark_sent(due[0]["id"], T0 + timedelta(hours=2))
        assert store.outbox_depth() == 8
        assert queried and all("outbox-pending" in q for q in queried), queried
        assert len(store.outbox_rows()) == 150  # sent rows stay, for dedupe
        assert store.enqueue("k3", "a3", {"text": "again"}, T0 + timedelta(hours=3)) is False
