"""`coreburst guardrails run` as separate processes (forked by tests/cli_runner.py) against
moto server and the loopback Slack receiver: two daemons on one host and state file, SIGTERM
between cycles, and the state file deleted under a running daemon."""

from __future__ import annotations

import json
import signal
import sqlite3
import time
from datetime import datetime
from pathlib import Path

import pytest

from coreburst.sandbox.emulator import (
    MotoProcess,
    WebhookReceiver,
)
from tests.helpers.guardrails_loopback import config_text
from tests.helpers.guardrails_processes import Daemon, env, idle_fleet

pytestmark = pytest.mark.integration


def audit(path: Path) -> list[dict[str, object]]:
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def test_two_daemons_on_one_host_and_state_file_one_acts_each_alert_once(
    moto: MotoProcess, hook: WebhookReceiver, tmp_path: Path, t0: datetime
) -> None:
    """Both used to take ``<host>:<state path>`` as their leader id: both held the lease, both
    marked and both flushed, and each alert arrived twice."""
    cfg = tmp_path / "g.yaml"
    cfg.write_text(config_text(moto.url, tmp_path, "interval: 10s"))
    ids = idle_fleet(moto, t0, idle=5, blind=1)
    runs = [
        Daemon(
            cfg,
            env(
                t0,
                hook,
                COREBURST_STATE__AUDIT_LOG=str(tmp_path / f"audit-{n}.jsonl"),
                COREBURST_CLOCK_SPEED="10",  # the shortest interval, 10 s, in 1 s
            ),
            "--max-cycles",
            "4",
        )
        for n in "ab"
    ]
    try:
        for r in runs:
            assert r.finish(timeout=120) == 0, "\n".join(r.lines)
    finally:
        for r in runs:
            r.kill()
    logs = [audit(tmp_path / f"audit-{n}.jsonl") for n in "ab"]
    marked = [sorted(str(e["instance_id"]) for e in log if e["event"] == "mark") for log in logs]
    # one of them marked all five, the other none, and said it stood by
    assert sorted(marked, key=len) == [[], sorted(ids)], marked
    standby = logs[0] if not marked[0] else logs[1]
    assert any(e["event"] == "leader.standby" for e in standby)
    titles = hook.titles()
    # the five idle nodes are alice's and marked in one cycle: one digest (messages.idle_digest)
    assert [t for t in titles if "owner=alice" in t] == ["Idle nodes of owner=alice: 5 marked"]
    digest = next(p for p in hook.posts if "owner=alice" in p["blocks"][0]["text"]["text"])
    assert all(i in digest["blocks"][1]["text"]["text"] for i in ids)
    assert len(titles) == 2, titles  # the digest of five marks and one blind node
    assert len(hook.attempts) == len(titles)  # nothing sent twice, not even attempted twice


def test_sigterm_between_cycles_exits_at_once_and_hands_the_lease_back(
    moto: MotoProcess, tmp_path: Path, t0: datetime
) -> None:
    """It used to sleep out the whole interval (59.9 s at ``interval: 60s``)."""
    cfg = tmp_path / "g.yaml"
    cfg.write_text(config_text(moto.url, tmp_path, "interval: 60s"))
    d = Daemon(cfg, env(t0, None))
    try:
        d.wait_for("cycle.done")
        with sqlite3.connect(tmp_path / "state.sqlite") as db:
            assert db.execute("SELECT COUNT(*) FROM lease").fetchone()[0] == 1
        sent = time.monotonic()
        d.proc.send_signal(signal.SIGTERM)
        assert d.finish(timeout=30) == 0, "\n".join(d.lines)
        assert time.monotonic() - sent < 5
    finally:
        d.kill()
    assert "daemon.stopping" in d.events()
    with sqlite3.connect(tmp_path / "state.sqlite") as db:
        assert db.execute("SELECT COUNT(*) FROM lease").fetchone()[0] == 0


def test_sigint_stops_as_cleanly_as_sigterm(
    moto: MotoProcess, tmp_path: Path, t0: datetime
) -> None:
    cfg = tmp_path / "g.yaml"
    cfg.write_text(config_text(moto.url, tmp_path, "interval: 60s"))
    d = Daemon(cfg, env(t0, None))
    try:
        d.wait_for("cycle.done")
        d.proc.send_signal(signal.SIGINT)
        assert d.finish(timeout=30) == 0, "\n".join(d.lines)
    finally:
        d.kill()
    assert not any("Traceback" in x for x in d.lines)


def test_deleting_the_state_file_under_a_running_daemon_stops_it(
    moto: MotoProcess, tmp_path: Path, t0: datetime
) -> None:
    """It used to carry on writing into the unlinked file, unseen by anyone."""
    cfg = tmp_path / "g.yaml"
    cfg.write_text(config_text(moto.url, tmp_path, "interval: 10s"))
    state = tmp_path / "state.sqlite"
    d = Daemon(cfg, env(t0, None, COREBURST_CLOCK_SPEED="10"))
    try:
        d.wait_for("cycle.done")
        state.unlink()
        assert d.finish(timeout=60) == 2, "\n".join(d.lines)
    finally:
        d.kill()
    errors = [x for x in d.lines if x.startswith("error:")]
    assert errors == [d.lines[-1]], d.lines
    assert str(state) in errors[0] and "deleted" in errors[0]
    assert not any("Traceback" in x for x in d.lines)
    assert not state.exists()  # stopped, not silently recreated
