"""Durable daemon state in SQLite, one of the two ``guardrails.stores.base.StateStore``s: marks,
action intents, the Slack outbox, spend and egress snapshots, and a small key-value table
(circuit breaker, last cycle summary).

Every write commits immediately (autocommit + WAL), so a SIGKILL loses at most the statement
in flight: an action's intent is on disk before the API call is made.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from guardrails.timefmt import iso, parse_iso

SCHEMA = """
CREATE TABLE IF NOT EXISTS marks (
  instance_id TEXT PRIMARY KEY, region TEXT NOT NULL, marked_at TEXT NOT NULL,
  action TEXT NOT NULL, reason TEXT NOT NULL, dry_run INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS actions (
  id INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT NOT NULL UNIQUE, instance_id TEXT NOT NULL,
  region TEXT NOT NULL, kind TEXT NOT NULL, status TEXT NOT NULL, created_at TEXT NOT NULL,
  updated_at TEXT NOT NULL, detail TEXT NOT NULL DEFAULT '');
CREATE TABLE IF NOT EXISTS outbox (
  id INTEGER PRIMARY KEY AUTOINCREMENT, dedupe_key TEXT NOT NULL UNIQUE, alert_key TEXT NOT NULL,
  payload TEXT NOT NULL, created_at TEXT NOT NULL, next_attempt_at TEXT NOT NULL,
  attempts INTEGER NOT NULL DEFAULT 0, status TEXT NOT NULL, sent_at TEXT, last_error TEXT,
  claimed_until REAL, priority INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS spend (
  ts TEXT NOT NULL, scope TEXT NOT NULL, burn REAL NOT NULL, today REAL NOT NULL,
  mtd REAL NOT NULL, projected_month REAL NOT NULL, PRIMARY KEY (ts, scope));
CREATE TABLE IF NOT EXISTS egress (
  ts TEXT PRIMARY KEY, projected_day_usd REAL NOT NULL, projected_day_gb REAL NOT NULL);
CREATE TABLE IF NOT EXISTS kv (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS cas (
  key TEXT PRIMARY KEY, value TEXT NOT NULL, version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS lease (
  name TEXT PRIMARY KEY, owner TEXT NOT NULL, expires REAL NOT NULL);
CREATE TABLE IF NOT EXISTS core_usage (
  run_key TEXT PRIMARY KEY, job_id TEXT NOT NULL, user TEXT NOT NULL, account TEXT NOT NULL,
  partition TEXT NOT NULL, start TEXT NOT NULL, last_seen TEXT NOT NULL, gpus INTEGER NOT NULL,
  allocated_gpu_h REAL NOT NULL, used_gpu_h REAL, state TEXT NOT NULL);
"""


class State:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.db = sqlite3.connect(str(path), isolation_level=None, timeout=30)
        self.db.row_factory = sqlite3.Row
        self._wal()
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.executescript(SCHEMA)
        cols = {r["name"] for r in self.db.execute("PRAGMA table_info(outbox)")}
        added = {
            # a state file from before outbox claims
            "claimed_until": "claimed_until REAL",
            # a state file from before outbox priorities: its rows are routine (0)
            "priority": "priority INTEGER NOT NULL DEFAULT 0",
        }
        for col, ddl in added.items():
            if col in cols:
                continue
            try:
                self.db.execute(f"ALTER TABLE outbox ADD COLUMN {ddl}")
            except sqlite3.OperationalError as exc:
                if "duplicate column" not in str(exc):  # another process added it first
                    raise
        # The file this connection has open: if the path later names another file (or none),
        # this daemon's writes go where no one else can see them (see ``file_problem``).
        st = os.stat(path)
        self._identity = (st.st_dev, st.st_ino)

    def _wal(self, wait_s: float = 30.0) -> None:
        """Switch the file to WAL. Two processes opening a new file at once (two daemons
        started together) race for this switch, and SQLite answers the loser "database is
        locked" at once instead of waiting out the busy timeout: try again until it sticks."""
        deadline = time.monotonic() + wait_s
        while True:
            try:
                self.db.execute("PRAGMA journal_mode=WAL")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def file_problem(self) -> str | None:
        """Why the state path no longer names the file this store has open (deleted, or
        replaced by another file), or None while it still does."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return f"state file {self.path} was deleted while the daemon ran"
        if (st.st_dev, st.st_ino) != self._identity:
            return f"state file {self.path} was replaced by another file while the daemon ran"
        return None

    def close(self) -> None:
        self.db.close()

    # -- marks -----------------------------------------------------------------------------
    def marks(self) -> dict[str, sqlite3.Row]:
        return {r["instance_id"]: r for r in self.db.execute("SELECT * FROM marks")}

    def add_mark(
        self, instance_id: str, region: str, at: datetime, action: str, *, reason: str, dry: bool
    ) -> None:
        self.db.execute(
            "INSERT OR IGNORE INTO marks VALUES (?,?,?,?,?,?)",
            (instance_id, region, iso(at), action, reason, int(dry)),
        )

    def remove_mark(self, instance_id: str) -> None:
        self.db.execute("DELETE FROM marks WHERE instance_id=?", (instance_id,))

    # -- actions (intent before the API call, done after) -----------------------------------
    def record_intent(
        self, key: str, instance_id: str, region: str, kind: str, now: datetime
    ) -> bool:
        """False when this exact action was already recorded (by an earlier run)."""
        cur = self.db.execute(
            "INSERT OR IGNORE INTO actions (key, instance_id, region, kind, status, created_at,"
            " updated_at) VALUES (?,?,?,?, 'intent', ?, ?)",
            (key, instance_id, region, kind, iso(now), iso(now)),
        )
        return cur.rowcount == 1

    def action(self, key: str) -> sqlite3.Row | None:
        row: sqlite3.Row | None = self.db.execute(
            "SELECT * FROM actions WHERE key=?", (key,)
        ).fetchone()
        return row

    def finish_action(self, key: str, status: str, now: datetime, detail: str = "") -> None:
        self.db.execute(
            "UPDATE actions SET status=?, updated_at=?, detail=? WHERE key=?",
            (status, iso(now), detail, key),
        )

    def drop_intent(self, key: str) -> bool:
        """Forget an intent that was never carried out; a finished action stays."""
        cur = self.db.execute("DELETE FROM actions WHERE key=? AND status='intent'", (key,))
        return cur.rowcount == 1

    def pending_intents(self) -> list[sqlite3.Row]:
        return list(self.db.execute("SELECT * FROM actions WHERE status='intent' ORDER BY id"))

    def actions(self) -> list[sqlite3.Row]:
        return list(self.db.execute("SELECT * FROM actions ORDER BY id"))

    # -- outbox ------------------------------------------------------------------------------
    def enqueue(
        self,
        dedupe_key: str,
        alert_key: str,
        payload: dict[str, Any],
        now: datetime,
        *,
        priority: int = 0,
    ) -> bool:
        cur = self.db.execute(
            "INSERT OR IGNORE INTO outbox (dedupe_key, alert_key, payload, created_at,"
            " next_attempt_at, status, priority) VALUES (?,?,?,?,?, 'pending', ?)",
            (dedupe_key, alert_key, json.dumps(payload), iso(now), iso(now), int(priority)),
        )
        return cur.rowcount == 1

    def has_event(self, dedupe_key: str) -> bool:
        row = self.db.execute("SELECT 1 FROM outbox WHERE dedupe_key=?", (dedupe_key,))
        return row.fetchone() is not None

    def remember(self, dedupe_key: str, alert_key: str, now: datetime) -> None:
        """Record an event as handled without sending it (cooldown, or folded into another)."""
        self.db.execute(
            "INSERT OR IGNORE INTO outbox (dedupe_key, alert_key, payload, created_at,"
            " next_attempt_at, status) VALUES (?,?, '{}', ?,?, 'suppressed')",
            (dedupe_key, alert_key, iso(now), iso(now)),
        )

    def last_alert(self, alert_key: str) -> datetime | None:
        row = self.db.execute(
            "SELECT MAX(created_at) AS t FROM outbox WHERE alert_key=? AND status!='suppressed'",
            (alert_key,),
        ).fetchone()
        return parse_iso(row["t"]) if row and row["t"] else None

    def due(
        self, now: datetime, limit: int = 100, *, horizon: datetime | None = None
    ) -> list[sqlite3.Row]:
        """Pending rows whose time has come, or whose time lies past ``horizon`` (set while
        the clock ran ahead), highest ``priority`` first, then oldest first. A row another
        sender holds is still listed: ``claim`` decides."""
        far = iso(horizon) if horizon is not None else "9999"  # after every ISO date
        return list(
            self.db.execute(
                "SELECT * FROM outbox WHERE status='pending'"
                " AND (next_attempt_at<=? OR next_attempt_at>?)"
                " ORDER BY priority DESC, id LIMIT ?",
                (iso(now), far, limit),
            )
        )

    def claim(self, row_id: int, now: datetime, ttl_s: float, *, attempts: int) -> bool:
        """Take a pending row for sending until ``now + ttl_s``; False when another sender
        holds a live claim, or the row is no longer pending or no longer has ``attempts`` (it
        was tried since the caller read it). One statement, so of two senders only one wins.
        A claim further ahead than twice the TTL was taken while the clock ran ahead and is
        treated as expired."""
        t = now.timestamp()
        cur = self.db.execute(
            "UPDATE outbox SET claimed_until=? WHERE id=? AND status='pending' AND attempts=?"
            " AND (claimed_until IS NULL OR claimed_until<? OR claimed_until>?)",
            (t + ttl_s, row_id, attempts, t, t + 2 * ttl_s),
        )
        return cur.rowcount == 1

    def outbox_depth(self) -> int:
        return int(
            self.db.execute("SELECT COUNT(*) FROM outbox WHERE status='pending'").fetchone()[0]
        )

    def outbox_rows(self) -> list[sqlite3.Row]:
        return list(self.db.execute("SELECT * FROM outbox ORDER BY id"))

    def mark_sent(self, row_id: int, now: datetime) -> None:
        self.db.execute(
            "UPDATE outbox SET status='sent', sent_at=?, attempts=attempts+1, claimed_until=NULL"
            " WHERE id=?",
            (iso(now), row_id),
        )

    def retry_later(self, row_id: int, when: datetime, error: str, give_up: bool) -> None:
        self.db.execute(
            "UPDATE outbox SET attempts=attempts+1, next_attempt_at=?, last_error=?, status=?,"
            " claimed_until=NULL WHERE id=?",
            (iso(when), error, "failed" if give_up else "pending", row_id),
        )

    # -- snapshots ---------------------------------------------------------------------------
    def add_spend(
        self, now: datetime, scope: str, *, burn: float, today: float, mtd: float, proj: float
    ) -> None:
        self.db.execute(
            "INSERT OR REPLACE INTO spend VALUES (?,?,?,?,?,?)",
            (iso(now), scope, burn, today, mtd, proj),
        )

    def last_spend(self, scope: str) -> sqlite3.Row | None:
        row: sqlite3.Row | None = self.db.execute(
            "SELECT * FROM spend WHERE scope=? ORDER BY ts DESC LIMIT 1", (scope,)
        ).fetchone()
        return row

    def add_egress(self, now: datetime, usd: float, gb: float) -> None:
        self.db.execute("INSERT OR REPLACE INTO egress VALUES (?,?,?)", (iso(now), usd, gb))

    def egress_history(self, since: datetime, before: datetime) -> list[float]:
        return [
            r[0]
            for r in self.db.execute(
                "SELECT projected_day_usd FROM egress WHERE ts>=? AND ts<? ORDER BY ts",
                (iso(since), iso(before)),
            )
        ]

    def prune_snapshots(self, before: datetime, scopes: list[str]) -> int:
        """Drop spend and egress snapshots older than ``before``, keeping each scope's latest
        (today's accrual continues from it). Returns how many rows went."""
        del scopes  # one table holds every scope here
        cut = iso(before)
        n = self.db.execute(
            "DELETE FROM spend WHERE ts < ? AND ts < "
            "(SELECT MAX(s2.ts) FROM spend s2 WHERE s2.scope = spend.scope)",
            (cut,),
        ).rowcount
        n += self.db.execute("DELETE FROM egress WHERE ts < ?", (cut,)).rowcount
        n += self.db.execute("DELETE FROM core_usage WHERE last_seen < ?", (cut,)).rowcount
        return int(n)

    # -- core GPU usage ----------------------------------------------------------------------
    def record_core_usage(
        self,
        run_key: str,
        now: datetime,
        *,
        job_id: str,
        user: str,
        account: str,
        partition: str,
        start: datetime,
        gpus: int,
        allocated_gpu_h: float,
        used_gpu_h: float | None,
        state: str,
    ) -> None:
        self.db.execute(
            "INSERT OR REPLACE INTO core_usage VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            (
                run_key, job_id, user, account, partition, iso(start), iso(now), gpus,
                allocated_gpu_h, used_gpu_h, state,
            ),
        )  # fmt: skip

    def core_usage(self, since: datetime) -> list[sqlite3.Row]:
        return list(
            self.db.execute(
                "SELECT * FROM core_usage WHERE last_seen >= ? ORDER BY start, run_key",
                (iso(since),),
            )
        )

    # -- kv ----------------------------------------------------------------------------------
    def get(self, key: str, default: Any = None) -> Any:
        row = self.db.execute("SELECT value FROM kv WHERE key=?", (key,)).fetchone()
        return json.loads(row[0]) if row else default

    def put(self, key: str, value: Any) -> None:
        self.db.execute(
            "INSERT OR REPLACE INTO kv VALUES (?,?)", (key, json.dumps(value, default=str))
        )

    # -- versioned documents (compare-and-swap) ---------------------------------------------
    def get_versioned(self, key: str) -> tuple[Any, int]:
        row = self.db.execute("SELECT value, version FROM cas WHERE key=?", (key,)).fetchone()
        return (json.loads(row[0]), int(row[1])) if row else (None, 0)

    def put_if_version(self, key: str, value: Any, version: int) -> bool:
        """One statement: the row is written only while its version is still ``version``
        (0: while there is none), so of two writers that read the same version one wins."""
        doc = json.dumps(value, default=str, sort_keys=True)
        if version == 0:
            cur = self.db.execute(
                "INSERT INTO cas VALUES (?,?,1) ON CONFLICT(key) DO NOTHING", (key, doc)
            )
        else:
            cur = self.db.execute(
                "UPDATE cas SET value=?, version=version+1 WHERE key=? AND version=?",
                (doc, key, version),
            )
        return cur.rowcount == 1

    # -- leader lease ----------------------------------------------------------------------
    def acquire_lease(
        self, name: str, owner: str, now: datetime, ttl_s: float, *, replace: str | None = None
    ) -> bool:
        """Take or renew the lease ``name`` for ``owner``; False while another owner holds an
        unexpired one, unless that owner is ``replace`` (a holder known to be dead). One
        statement, so two daemons on one file cannot both win."""
        cur = self.db.execute(
            "INSERT INTO lease VALUES (?,?,?) ON CONFLICT(name) DO UPDATE SET"
            " owner=excluded.owner, expires=excluded.expires"
            " WHERE lease.owner=excluded.owner OR lease.expires<? OR lease.owner=?",
            (name, owner, now.timestamp() + ttl_s, now.timestamp(), replace),
        )
        return cur.rowcount == 1

    def lease_holder(self, name: str) -> str | None:
        row = self.db.execute("SELECT owner FROM lease WHERE name=?", (name,)).fetchone()
        return str(row["owner"]) if row else None

    def release_lease(self, name: str, owner: str) -> None:
        self.db.execute("DELETE FROM lease WHERE name=? AND owner=?", (name, owner))
