"""The spend gate's commitments: money approved for burst nodes but not yet spent.

A gate that compares each request with "limit minus spend already accrued" approves two
requests that together exceed the limit: neither sees the other, and a launched node's
remaining hours are in no spend snapshot yet. So an approval *reserves* its projected cost
(nodes x $/h x the job's time limit) before CreateFleet, and every check counts

    limit - accrued (the guardrails' snapshot) - committed (what approved nodes may still cost)

A commitment is one entry per node: its $/h and until when it was approved. What it may still
cost shrinks as its hours pass (the spend rule accrues those hours from the instance's launch,
so between two snapshots they count twice: the safe side), and it goes when the node powers
down (SuspendProgram), fails, or is held.

The ledger of a spend scope is one document in the guardrails state store, written with a
compare-and-swap (``StateStore.put_if_version``: one SQL statement on SQLite, a conditional
PutItem on DynamoDB), so two approvals racing from one controller or two cannot both pass:
the second re-reads the first's commitment and checks again.

    >>> ledger = SpendLedger(store, "account")  # doctest: +SKIP
    >>> ledger.reserve({"od-1": (55.04, 2.0)}, {"today": 100.0}, now)  # doctest: +SKIP
    Reservation(ok=True, cost_usd=110.08, committed_usd=0.0, why=None)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from guardrails.stores.base import StateStore

KEY_PREFIX = "burst-commitments:"
# Compare-and-swap attempts before giving up (each loser re-reads; a loss means another
# approval or release landed in between). Giving up holds the nodes, it never launches.
ATTEMPTS = 50


class LedgerBusyError(RuntimeError):
    """The ledger kept changing under this writer; the caller holds (fails closed)."""


@dataclass(frozen=True)
class Reservation:
    ok: bool
    cost_usd: float  # this request's projected cost
    committed_usd: float  # what earlier approvals may still cost (before this one)
    why: str | None = None  # why not, when not ok


def remaining_usd(entry: dict[str, Any], now: datetime) -> float:
    """What one commitment may still cost at ``now``."""
    hours = max(0.0, float(entry["until"]) - now.timestamp()) / 3600
    return float(entry["usd_per_hour"]) * hours


class SpendLedger:
    def __init__(self, store: StateStore, scope: str) -> None:
        self.store = store
        self.scope = scope
        self.key = KEY_PREFIX + scope

    def _read(self, now: datetime) -> tuple[dict[str, Any], int]:
        doc, version = self.store.get_versioned(self.key)
        entries = dict((doc or {}).get("nodes", {}))
        live = {n: e for n, e in entries.items() if remaining_usd(e, now) > 0}
        return live, version

    def committed(self, now: datetime) -> float:
        """USD the scope's approved nodes may still cost."""
        entries, _ = self._read(now)
        return sum(remaining_usd(e, now) for e in entries.values())

    def entries(self, now: datetime) -> dict[str, dict[str, Any]]:
        return self._read(now)[0]

    def reserve(
        self,
        asks: dict[str, tuple[float, float]],
        left: dict[str, float],
        now: datetime,
        *,
        jobs: Iterable[str] = (),
    ) -> Reservation:
        """Commit ``asks`` (node -> ($/h, hours)) when their cost plus what is committed fits
        every period in ``left`` (USD the scope has left: ``today``, ``this month``); a node
        already committed is re-committed (its old entry replaced, not added to)."""
        cost = sum(rate * hours for rate, hours in asks.values())
        job_list = sorted(set(jobs))
        for _ in range(ATTEMPTS):
            entries, version = self._read(now)
            committed = sum(remaining_usd(e, now) for n, e in entries.items() if n not in asks)
            for period, usd in left.items():
                if cost + committed > usd:
                    return Reservation(
                        False,
                        cost,
                        committed,
                        f"${cost:,.0f} projected + ${committed:,.0f} committed > "
                        f"${max(usd, 0):,.0f} left {period} ({self.scope})",
                    )
            ts = now.timestamp()
            for node, (rate, hours) in asks.items():
                entries[node] = {
                    "usd_per_hour": round(rate, 6),
                    "since": ts,
                    "until": ts + hours * 3600,
                    "jobs": job_list,
                }
            if self.store.put_if_version(self.key, {"nodes": entries}, version):
                return Reservation(True, cost, committed)
        raise LedgerBusyError(f"spend ledger {self.key} changed {ATTEMPTS} times while reserving")

    def release(self, nodes: Iterable[str], now: datetime) -> float:
        """Drop the nodes' commitments (powered down, failed, held); returns the USD they
        could still have cost."""
        wanted = set(nodes)
        for _ in range(ATTEMPTS):
            entries, version = self._read(now)
            gone = {n: e for n, e in entries.items() if n in wanted}
            if not gone:  # (expired entries are pruned by the next write)
                return 0.0
            keep = {n: e for n, e in entries.items() if n not in wanted}
            if self.store.put_if_version(self.key, {"nodes": keep}, version):
                return sum(remaining_usd(e, now) for e in gone.values())
        raise LedgerBusyError(f"spend ledger {self.key} changed {ATTEMPTS} times while releasing")
