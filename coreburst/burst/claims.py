"""Which resume run owns which burst node: a claim per node that survives a crash.

slurmctld may run ResumeProgram again for a node while an earlier run is still launching it (a
retry after a slow start, ``scontrol update state=power_up``, a controller restart), and an
operator may run it by hand. The node's EC2 tag is written only after CreateFleet returns, so
"does the node have a tagged instance?" cannot tell a second run to stay away. A claim can:

* a run claims its nodes in one SQLite transaction (``BEGIN IMMEDIATE``: one writer at a time
  on the controller) before anything is launched; a node another *live* run holds is left to
  that run;
* before CreateFleet the run records the batch's idempotency token (EC2 ``ClientToken``) and
  its nodes; a run that died after that point leaves the claim with its token, and the next
  run to claim any of those nodes takes over the whole batch and sends the *same* request with
  the *same* token: EC2 answers it with the instances the first call launched instead of
  launching more (EC2 API reference, "Ensuring idempotency in Amazon EC2 API requests");
* after tagging, the claim records the instance (``launched``); suspend, resume-fail and the
  spend gate's hold drop the claim, so a resume that finishes after its node was suspended
  finds its claim gone and terminates what it launched instead of keeping it.

An owner is ``host:pid:start-time`` (``/proc/<pid>/stat`` field 22), so a recycled pid is not
mistaken for the run that died; a claim whose owner cannot be checked (another host) counts as
dead once it is older than ResumeTimeout.

    >>> claims = Claims(Path("/var/lib/coreburst/burst-claims.sqlite"))  # doctest: +SKIP
    >>> claims.claim(["od-1", "od-2"], stale_after_s=1800).mine  # doctest: +SKIP
    ['od-1', 'od-2']
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

SCHEMA = """
CREATE TABLE IF NOT EXISTS claims (
  node TEXT PRIMARY KEY, owner TEXT NOT NULL, state TEXT NOT NULL, token TEXT,
  batch TEXT, instance_id TEXT, at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS backoff (
  pool TEXT NOT NULL, itype TEXT NOT NULL, zone TEXT NOT NULL, code TEXT NOT NULL,
  until REAL NOT NULL, PRIMARY KEY (pool, itype, zone));
CREATE TABLE IF NOT EXISTS strikes (
  pool TEXT NOT NULL, code TEXT NOT NULL, count INTEGER NOT NULL, last REAL NOT NULL,
  PRIMARY KEY (pool, code));
"""
LAUNCHING, LAUNCHED = "launching", "launched"


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (proc(5), /proc/pid/stat field 22),
    or None when there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces: split after it.
    return stat.rpartition(")")[2].split()[19]


def this_owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{_start_time(os.getpid()) or '?'}"


def owner_alive(owner: str) -> bool | None:
    """True/False for an owner on this host; None when it cannot be checked here."""
    host, _, rest = owner.partition(":")
    pid_s, _, start = rest.partition(":")
    if host != socket.gethostname() or not pid_s.isdigit():
        return None
    now_start = _start_time(int(pid_s))
    return now_start is not None and start in ("?", now_start)


def new_token() -> str:
    """A CreateFleet ClientToken: at most 64 ASCII characters (EC2 API reference)."""
    return f"coreburst-{uuid.uuid4().hex}"


@dataclass(frozen=True)
class Batch:
    """A CreateFleet request a run had chosen a token for: to be sent again unchanged."""

    token: str
    nodes: list[str]  # in the request's order (its TotalTargetCapacity is their number)
    strict: bool  # all-or-nothing (MinTargetCapacity)
    members: list[str]  # those still claimed (the rest were suspended since)
    # The (instance type, zone) launch choices the request offered, in order: the same
    # token needs the same request (EC2 answers another with IdempotentParameterMismatch).
    choices: list[tuple[str, str]] | None = None


@dataclass
class ClaimSet:
    mine: list[str] = field(default_factory=list)  # claimed now, nothing launched yet
    # Taken over from a run that died after choosing its token.
    resumed: list[Batch] = field(default_factory=list)
    busy: dict[str, str] = field(default_factory=dict)  # node -> the live run that has it
    recorded: dict[str, str] = field(default_factory=dict)  # node -> instance launched for it


class Claims:
    def __init__(
        self, path: Path, owner: str | None = None, clock: Callable[[], float] = time.time
    ) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.owner = owner or this_owner()
        self.clock = clock
        self.db = sqlite3.connect(str(path), isolation_level=None, timeout=60)
        self.db.execute("PRAGMA busy_timeout=60000")
        self.db.executescript(SCHEMA)

    def close(self) -> None:
        self.db.close()

    def _txn(self) -> sqlite3.Connection:
        self.db.execute("BEGIN IMMEDIATE")
        return self.db

    def _dead(self, owner: str, at: float, stale_after_s: float) -> bool:
        alive = owner_alive(owner)
        if alive is None:
            return self.clock() - at >= stale_after_s
        return not alive

    def claim(
        self,
        nodes: Iterable[str],
        *,
        stale_after_s: float,
        replace: dict[str, str] | None = None,
    ) -> ClaimSet:
        """Claim ``nodes`` for this run. ``replace`` (node -> instance id): launched claims
        whose instance the caller found gone, taken afresh only while they still name it."""
        out = ClaimSet()
        now = self.clock()
        replace = replace or {}
        db = self._txn()
        try:
            for node in dict.fromkeys(nodes):
                row = db.execute(
                    "SELECT owner, state, token, batch, instance_id, at FROM claims WHERE node=?",
                    (node,),
                ).fetchone()
                if row is None:
                    db.execute(
                        "INSERT INTO claims VALUES (?,?,?,NULL,NULL,NULL,?)",
                        (node, self.owner, LAUNCHING, now),
                    )
                    out.mine.append(node)
                    continue
                owner, state, token, batch, iid, at = row
                if state == LAUNCHED:
                    if replace.get(node) == iid:
                        db.execute(
                            "UPDATE claims SET owner=?, state=?, token=NULL, batch=NULL,"
                            " instance_id=NULL, at=? WHERE node=?",
                            (self.owner, LAUNCHING, now, node),
                        )
                        out.mine.append(node)
                    else:
                        out.recorded[node] = iid
                    continue
                if owner == self.owner:
                    out.mine.append(node)
                elif not self._dead(owner, at, stale_after_s):
                    out.busy[node] = owner
                elif token is None:  # died before choosing a token: nothing was launched
                    db.execute(
                        "UPDATE claims SET owner=?, at=? WHERE node=?", (self.owner, now, node)
                    )
                    out.mine.append(node)
                elif token not in {b.token for b in out.resumed}:
                    # Take over the whole batch: the same request with the same token.
                    spec = json.loads(batch)
                    members = list(spec["nodes"])
                    taken = db.execute(
                        f"UPDATE claims SET owner=?, at=? WHERE token=? AND state=? AND node IN"
                        f" ({','.join('?' * len(members))})",
                        (self.owner, now, token, LAUNCHING, *members),
                    ).rowcount
                    if taken != len(members):  # some were suspended or relaunched since
                        members = [
                            r[0]
                            for r in db.execute(
                                "SELECT node FROM claims WHERE token=? AND owner=?",
                                (token, self.owner),
                            )
                        ]
                    choices = spec.get("choices")
                    out.resumed.append(
                        Batch(
                            token,
                            list(spec["nodes"]),
                            bool(spec["strict"]),
                            sorted(members),
                            [(str(t), str(z)) for t, z in choices] if choices else None,
                        )
                    )
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return out

    def prepare(
        self,
        nodes: list[str],
        token: str,
        strict: bool,
        choices: list[tuple[str, str]] | None = None,
    ) -> None:
        """Record the batch's token and request before its CreateFleet is sent."""
        spec = json.dumps({"nodes": nodes, "strict": strict, "choices": choices})
        db = self._txn()
        try:
            db.executemany(
                "UPDATE claims SET token=?, batch=? WHERE node=? AND owner=? AND state=?",
                [(token, spec, n, self.owner, LAUNCHING) for n in nodes],
            )
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def launched(self, node_ids: dict[str, str]) -> list[str]:
        """Record each node's instance; returns the nodes whose claim is no longer this run's
        (suspended or failed meanwhile): their instances must go."""
        lost = []
        now = self.clock()
        db = self._txn()
        try:
            for node, iid in node_ids.items():
                cur = db.execute(
                    "UPDATE claims SET state=?, instance_id=?, token=NULL, batch=NULL, at=?"
                    " WHERE node=? AND owner=? AND state=?",
                    (LAUNCHED, iid, now, node, self.owner, LAUNCHING),
                )
                if cur.rowcount != 1:
                    lost.append(node)
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return lost

    def release(self, nodes: Iterable[str], *, mine_only: bool = False) -> None:
        """Drop the nodes' claims (suspend, resume-fail, a hold, or a launch that failed for
        certain). ``mine_only``: only those this run holds."""
        names = list(nodes)
        db = self._txn()
        try:
            for node in names:
                if mine_only:
                    db.execute("DELETE FROM claims WHERE node=? AND owner=?", (node, self.owner))
                else:
                    db.execute("DELETE FROM claims WHERE node=?", (node,))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    # -- capacity backoff ------------------------------------------------------------------
    def back_off(
        self, pool: str, choices: Iterable[tuple[str, str]], code: str, seconds: float
    ) -> None:
        """No launches of these (instance type, zone) choices of ``pool`` for ``seconds``."""
        until = self.clock() + seconds
        db = self._txn()
        try:
            db.executemany(
                "INSERT OR REPLACE INTO backoff VALUES (?,?,?,?,?)",
                [(pool, t, z, code, until) for t, z in choices],
            )
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def backed_off(self, pool: str) -> dict[tuple[str, str], tuple[str, float]]:
        """(type, zone) -> (the capacity code, until when) for the pool's choices backed off
        now."""
        rows = self.db.execute(
            "SELECT itype, zone, code, until FROM backoff WHERE pool=? AND until>?",
            (pool, self.clock()),
        )
        return {(t, z): (code, until) for t, z, code, until in rows}

    def strike(self, pool: str, code: str, forget_after_s: float) -> int:
        """Count one more ``code`` answer for ``pool`` and return how many in a row: 1 when
        the last was more than ``forget_after_s`` ago (or never). Sizes the growing backoff
        of an unknown code (coreburst/burst/ec2errors.py ``backoff_s``)."""
        now = self.clock()
        db = self._txn()
        try:
            row = db.execute(
                "SELECT count, last FROM strikes WHERE pool=? AND code=?", (pool, code)
            ).fetchone()
            count = 1 if row is None or now - float(row[1]) > forget_after_s else int(row[0]) + 1
            db.execute("INSERT OR REPLACE INTO strikes VALUES (?,?,?,?)", (pool, code, count, now))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return count

    def forgive(self, pool: str) -> int:
        """Lift every backoff of ``pool`` now (``coreburst burst release-hold``)."""
        db = self._txn()
        try:
            db.execute("DELETE FROM strikes WHERE pool=?", (pool,))
            n = db.execute("DELETE FROM backoff WHERE pool=?", (pool,)).rowcount
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return int(n)

    def rows(self) -> list[tuple[str, str, str, str | None]]:
        """(node, owner, state, instance id) of every claim, for status and tests."""
        return list(
            self.db.execute("SELECT node, owner, state, instance_id FROM claims ORDER BY node")
        )
