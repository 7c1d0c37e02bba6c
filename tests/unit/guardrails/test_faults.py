"""Faults around the daemon's safety: two daemons on one store, two outbox senders racing, a
hanging or slow Slack, fractional timeouts and a clock that ran ahead — each on both state
stores (SQLite, and DynamoDB on moto in-process: ``open_store`` in tests/unit/conftest.py).

Slack is reached through slack_sdk's real ``WebhookClient`` over loopback where timing
matters: against the emulator's receiver (``coreburst.sandbox.emulator.WebhookReceiver``, which
answers as an incoming webhook does, https://api.slack.com/messaging/webhooks), and against
servers made up here that accept and never answer, or answer slowly.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import structlog

from coreburst.sandbox.clocks import FakeClock
from coreburst.sandbox.emulator import WebhookReceiver
from guardrails.adapters.aws import Aws
from guardrails.adapters.slack import CLAIM_MARGIN_S, Alert, Outbox
from guardrails.config import SlackConfig
from guardrails.configfile import parse_config
from guardrails.daemon import Daemon, dead_local_holder, leader_id
from guardrails.stores.base import StateStore
from guardrails.stores.sqlite import State

T0 = datetime(2026, 5, 5, 12, tzinfo=UTC)
LOG = structlog.get_logger("test")
Opener = Callable[[str], StateStore]


def alerts(n: int) -> list[Alert]:
    return [Alert(f"ev-{i}", f"k-{i}", f"title {i}", [f"line {i}"]) for i in range(n)]


def daemon(open_store: Opener, tmp_path: Path, clock: FakeClock, **kw: Any) -> Daemon:
    cfg = parse_config(
        f"""
regions: [us-east-1]
dry_run: false
state: {{path: "{tmp_path}/main.db", audit_log: "{tmp_path}/audit.jsonl"}}
spend: {{cost_explorer: false, include_lustre: false, direct_connect_ports: [],
         spot_price: catalog-estimate}}
egress: {{enabled: false}}
metrics_endpoint: {{enabled: false}}
slack: {{timeout_s: 10, cycle_budget_s: 2}}
"""
    )
    return Daemon(cfg, Aws(cfg.aws), open_store("main"), clock=clock, **kw)


# -- one acting daemon per store -----------------------------------------------------------
def test_two_daemons_in_one_place_get_two_leader_ids_and_one_leads(
    open_store: Opener, tmp_path: Path
) -> None:
    """Same host, same state file, default ids: they used to share ``<host>:<path>``, so both
    held the lease and both acted."""
    clock = FakeClock(T0)
    a = daemon(open_store, tmp_path, clock)
    b = daemon(open_store, tmp_path, clock)
    try:
        assert a.owner_id != b.owner_id
        assert a.owner_id.split(":")[1] == str(os.getpid())
        a.run_cycle()
        b.run_cycle()
        assert a.leader and not b.leader
        clock.advance(timedelta(minutes=1))
        b.run_cycle()
        a.run_cycle()
        assert a.leader and not b.leader
    finally:
        a.close()
        b.close()


def test_a_dead_holder_on_this_host_is_replaced_at_once_a_live_one_is_not(
    open_store: Opener, tmp_path: Path
) -> None:
    """A daemon SIGKILLed holding the lease: its restart takes over without waiting out the
    TTL. A holder whose process runs (here: a real sleeping process) keeps it."""
    me = leader_id()
    host = me.rsplit(":", 2)[0]
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert dead_local_holder(f"{host}:{gone.pid}:0000", me)
        assert not dead_local_holder(f"{host}:{alive.pid}:0000", me)
        assert not dead_local_holder(f"elsewhere~x:{gone.pid}:0000", me)  # another host
        assert not dead_local_holder("lambda:6f1c-req", me)
        store = open_store("main")
        clock = FakeClock(T0)
        assert store.acquire_lease("leader", f"{host}:{alive.pid}:0000", T0, 180)
        d = daemon(open_store, tmp_path, clock)
        d.run_cycle()
        assert not d.leader
        store.release_lease("leader", f"{host}:{alive.pid}:0000")
        assert store.acquire_lease("leader", f"{host}:{gone.pid}:0000", T0, 180)
        d.run_cycle()
        assert d.leader and store.lease_holder("leader") == d.owner_id
        audit = [json.loads(x) for x in (tmp_path / "audit.jsonl").read_text().splitlines()]
        assert [e["previous"] for e in audit if e["event"] == "leader.taken-over"] == [
            f"{host}:{gone.pid}:0000"
        ]
        d.close()
        assert store.lease_holder("leader") is None
    finally:
        alive.kill()
        alive.wait()


def test_take_over_is_conditional_on_the_dead_holder(open_store: Opener) -> None:
    store = open_store("main")
    assert store.acquire_lease("leader", "h~x:1:dead", T0, 180)
    assert store.acquire_lease("leader", "h~x:2:new-a", T0, 180, replace="h~x:1:dead")
    # a second daemon taking over from the same dead holder loses: the holder changed
    assert not store.acquire_lease("leader", "h~x:3:new-b", T0, 180, replace="h~x:1:dead")
    assert store.lease_holder("leader") == "h~x:2:new-a"


# -- two senders on one outbox ---------------------------------------------------------------
class Recorder:
    """A Slack incoming webhook answering 200 to everything (made up by us, after
    https://api.slack.com/messaging/webhooks); ``during`` runs inside the first send, as if
    another sender ran at that moment."""

    def __init__(self, during: Callable[[], None] | None = None, delay_s: float = 0.0) -> None:
        self.delivered: list[str] = []
        self.during = during
        self.delay_s = delay_s
        self._lock = threading.Lock()

    def __call__(self, payload: dict[str, Any]) -> tuple[int, Any]:
        if self.during is not None:
            during, self.during = self.during, None
            during()
        time.sleep(self.delay_s)
        with self._lock:
            self.delivered.append(payload["blocks"][0]["text"]["text"])
        return 200, {}


def outbox(store: StateStore, clock: Any, send: Any, **cfg: Any) -> Outbox:
    return Outbox(
        store,
        SlackConfig(backoff_base=timedelta(seconds=5), **cfg),
        clock,
        url="http://127.0.0.1:1/x",
        log=LOG,
        send=send,
    )


def test_a_second_sender_in_the_middle_of_a_flush_sends_nothing_twice(
    open_store: Opener,
) -> None:
    clock = FakeClock(T0)
    slack = Recorder()
    a = outbox(open_store("main"), clock, slack)
    b = outbox(open_store("main"), clock, slack)
    for al in alerts(6):
        a.enqueue(al)
    slack.during = b.flush  # b runs while a is sending its first row
    a.flush()
    counts = Counter(slack.delivered)
    assert sorted(counts) == [f"title {i}" for i in range(6)]
    assert set(counts.values()) == {1}
    assert a.flush() == 0 and b.flush() == 0


def test_two_senders_racing_in_threads_deliver_each_row_once(open_store: Opener) -> None:
    clock = FakeClock(T0)
    slack = Recorder(delay_s=0.01)
    first = open_store("main")
    for al in alerts(12):
        outbox(first, clock, slack).enqueue(al)
    go = threading.Barrier(2)
    errors: list[BaseException] = []

    def run() -> None:
        # a SQLite connection belongs to the thread that opened it
        store = State(first.path) if isinstance(first, State) else open_store("main")
        try:
            go.wait()
            outbox(store, clock, slack).flush()
        except BaseException as exc:  # surfaced below
            errors.append(exc)
        finally:
            if isinstance(store, State):
                store.close()

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    assert sorted(Counter(slack.delivered).items()) == sorted((f"title {i}", 1) for i in range(12))


def test_a_crashed_senders_claim_expires_and_the_row_is_due_again(open_store: Opener) -> None:
    clock = FakeClock(T0)
    store = open_store("main")
    slack = Recorder()
    ob = outbox(store, clock, slack, timeout_s=10)
    ob.enqueue(alerts(1)[0])
    row = store.due(T0)[0]
    # a sender claims it and dies before sending
    assert store.claim(row["id"], T0, 10 + CLAIM_MARGIN_S, attempts=0)
    assert not store.claim(row["id"], T0, 10 + CLAIM_MARGIN_S, attempts=0)  # held
    assert ob.flush() == 0 and slack.delivered == []
    clock.advance(timedelta(seconds=10 + CLAIM_MARGIN_S + 1))
    assert ob.flush() == 1 and slack.delivered == ["title 0"]
    assert [r["status"] for r in store.outbox_rows()] == ["sent"]


def test_a_claim_on_a_row_tried_since_it_was_read_fails(open_store: Opener) -> None:
    store = open_store("main")
    store.enqueue("ev", "k", {"text": "x"}, T0)
    row = store.due(T0)[0]
    store.retry_later(row["id"], T0 + timedelta(seconds=5), "HTTP 500", False)
    assert not store.claim(row["id"], T0, 40, attempts=row["attempts"])


# -- a slow or hanging Slack -----------------------------------------------------------------
@pytest.fixture
def hanging_url() -> Iterator[str]:
    """Accepts every connection and never answers (made up by us: a Slack or proxy that
    hangs)."""
    srv = socket.create_server(("127.0.0.1", 0), backlog=64)
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            held.append(conn)

    threading.Thread(target=accept, daemon=True).start()
    yield f"http://127.0.0.1:{srv.getsockname()[1]}/services/T0/B0/hang"
    srv.close()
    for c in held:
        c.close()


@pytest.fixture
def slow_url() -> Iterator[str]:
    """Answers 200 "ok" as an incoming webhook does, one second after each post (made up by
    us, after https://api.slack.com/messaging/webhooks)."""

    class Slow(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            time.sleep(1.0)
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args: Any) -> None:
            return

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/services/T0/B0/slow"
    srv.shutdown()
    srv.server_close()


def test_a_hanging_slack_holds_a_cycle_with_six_alerts_no_longer_than_its_budget(
    open_store: Opener, tmp_path: Path, hanging_url: str
) -> None:
    """Each of 6 sends used to wait out its own timeout (6 x 10 s here)."""
    clock = FakeClock(T0)
    d = daemon(open_store, tmp_path, clock, webhook_url=hanging_url)
    try:
        for al in alerts(6):
            d.alert(al)
        started = time.monotonic()
        d.run_cycle()
        took = time.monotonic() - started
        assert d.leader
        assert took < d.cfg.slack.cycle_budget_s + 5, took
        rows = [r for r in d.state.outbox_rows() if r["status"] != "suppressed"]
        assert [r["status"] for r in rows] == ["pending"] * 6
        assert sorted(r["attempts"] for r in rows) == [0, 0, 0, 0, 0, 1]
        assert [r["last_error"] for r in rows if r["attempts"]] == ["TimeoutError"]
        # the five never tried are still due now
        assert len(d.state.due(clock.now())) == 5
    finally:
        d.close()


def test_a_slow_slack_is_sent_to_within_the_budget_and_the_rest_stays_due(
    open_store: Opener, slow_url: str
) -> None:
    clock = FakeClock(T0)
    store = open_store("main")
    ob = Outbox(
        store,
        SlackConfig(timeout_s=5, cycle_budget_s=2.5),
        clock,
        url=slow_url,
        log=LOG,
    )
    for al in alerts(6):
        ob.enqueue(al)
    started = time.monotonic()
    sent = ob.flush()
    took = time.monotonic() - started
    assert took < 2.5 + 1.5, took
    assert sent == 2
    untried = [r for r in store.outbox_rows() if r["status"] == "pending" and not r["attempts"]]
    assert len(untried) == 3
    assert {r["id"] for r in untried} <= {r["id"] for r in store.due(clock.now())}


def test_the_budget_is_counted_on_the_injected_monotonic_clock(open_store: Opener) -> None:
    ticks = [0.0]
    clock = FakeClock(T0)

    def send(_payload: dict[str, Any]) -> tuple[int, Any]:
        ticks[0] += 1.0  # each send takes one second
        return 200, {}

    ob = Outbox(
        open_store("main"),
        SlackConfig(cycle_budget_s=3.5),
        clock,
        url="http://127.0.0.1:1/x",
        log=LOG,
        send=send,
        monotonic=lambda: ticks[0],
    )
    for al in alerts(6):
        ob.enqueue(al)
    assert ob.flush() == 4  # at 0, 1, 2 and 3 s; at 4 s the budget is spent
    assert ob.flush() == 2


# -- slack.timeout_s with fractions ----------------------------------------------------------
def test_half_a_second_timeout_delivers(open_store: Opener) -> None:
    """``int(0.5)`` was 0: urllib's ``urlopen(timeout=0)`` makes a non-blocking socket and every
    send failed. urlopen takes float seconds
    (https://docs.python.org/3/library/urllib.request.html#urllib.request.urlopen)."""
    cfg = parse_config("slack: {timeout_s: 0.5}").slack
    assert cfg.timeout_s == 0.5
    hook = WebhookReceiver().start()
    try:
        store = open_store("main")
        ob = Outbox(store, cfg, FakeClock(T0), url=hook.url, log=LOG)
        ob.enqueue(alerts(1)[0])
        assert ob.flush() == 1
        assert hook.titles() == ["title 0"]
    finally:
        hook.stop()


def test_half_a_second_timeout_is_half_a_second(open_store: Opener, hanging_url: str) -> None:
    cfg = parse_config("slack: {timeout_s: 0.5}").slack
    store = open_store("main")
    ob = Outbox(store, cfg, FakeClock(T0), url=hanging_url, log=LOG)
    ob.enqueue(alerts(1)[0])
    started = time.monotonic()
    assert ob.flush() == 0
    assert 0.4 < time.monotonic() - started < 2.0
    assert [r["last_error"] for r in store.outbox_rows()] == ["TimeoutError"]


# -- a clock that ran ahead ------------------------------------------------------------------
def test_a_retry_scheduled_while_the_clock_ran_an_hour_ahead_is_not_stranded(
    open_store: Opener,
) -> None:
    clock = FakeClock(T0 + timedelta(hours=1))  # an hour fast
    answers = [(500, {})]

    def send(_payload: dict[str, Any]) -> tuple[int, Any]:
        return answers.pop(0) if answers else (200, {})

    store = open_store("main")
    ob = outbox(store, clock, send)  # backoff_max: 10 min by default
    ob.enqueue(alerts(1)[0])
    assert ob.flush() == 0  # 500: retry at T0 + 1 h + 5 s
    clock.set(T0)  # the clock is corrected
    assert ob.flush() == 1
    assert [r["status"] for r in store.outbox_rows()] == ["sent"]


def test_retry_after_is_honoured_up_to_backoff_max(open_store: Opener) -> None:
    """Slack's 429 carries Retry-After (https://api.slack.com/apis/rate-limits); a value past
    backoff_max is cut to it, so that no honest retry time looks like clock skew."""
    clock = FakeClock(T0)
    answers = [(429, {"Retry-After": "3600"})]

    def send(_payload: dict[str, Any]) -> tuple[int, Any]:
        return answers.pop(0) if answers else (200, {})

    store = open_store("main")
    ob = outbox(store, clock, send, backoff_max=timedelta(minutes=10))
    ob.enqueue(alerts(1)[0])
    assert ob.flush() == 0
    assert store.outbox_rows()[0]["next_attempt_at"] == (T0 + timedelta(minutes=10)).isoformat()
    clock.advance(timedelta(minutes=9, seconds=59))
    assert ob.flush() == 0
    clock.advance(timedelta(seconds=1))
    assert ob.flush() == 1


def test_a_claim_taken_while_the_clock_ran_ahead_does_not_strand_the_row(
    open_store: Opener,
) -> None:
    store = open_store("main")
    store.enqueue("ev", "k", {"text": "x"}, T0)
    row = store.due(T0)[0]
    ahead = T0 + timedelta(hours=1)
    assert store.claim(row["id"], ahead, 40, attempts=0)  # then the sender died
    assert store.claim(row["id"], T0, 40, attempts=0)  # after the correction


# -- the SQLite file itself ------------------------------------------------------------------
_OPEN_AT = """
import sys, time
from pathlib import Path
from guardrails.stores.sqlite import State
while time.time() < float(sys.argv[2]):
    time.sleep(0.0005)
State(Path(sys.argv[1])).close()
"""


def test_daemons_started_together_on_a_new_state_file_all_open_it(tmp_path: Path) -> None:
    """SQLite answers the switch to WAL "database is locked" at once, without its busy
    timeout, when another connection switches at the same moment (real sqlite3, 3 separate
    processes per round, released at one instant); the loser used to die with a traceback.
    Separate interpreters, not fork: forking a process that runs threads can deadlock."""
    import subprocess
    import sys
    import time

    failures: list[str] = []
    for i in range(5):
        path = str(tmp_path / f"s{i}.sqlite")
        at = str(time.time() + 2.0)
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", _OPEN_AT, path, at],
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(3)
        ]
        for proc in procs:
            _, err = proc.communicate(timeout=60)
            if proc.returncode:
                failures.append(err.strip().splitlines()[-1] if err.strip() else "exit")
    assert failures == []


def test_a_state_file_from_before_claims_is_upgraded(tmp_path: Path) -> None:
    from guardrails.stores.sqlite import SCHEMA

    old = SCHEMA.replace(",\n  claimed_until REAL", "")
    assert old != SCHEMA
    path = tmp_path / "old.sqlite"
    db = sqlite3.connect(path)
    db.executescript(old)
    db.close()
    store = State(path)
    try:
        store.enqueue("ev", "k", {"text": "x"}, T0)
        row = store.due(T0)[0]
        assert store.claim(row["id"], T0, 40, attempts=0)
        assert not store.claim(row["id"], T0, 40, attempts=0)
    finally:
        store.close()
