"""The one interface the daemon uses for its durable state.

Two stores implement it: ``guardrails.stores.sqlite.State`` (SQLite, the long-running daemon) and
``guardrails.stores.dynamodb.DynamoState`` (DynamoDB, the scheduled Lambda). The daemon, the
outbox and the Lambda handler are typed against ``StateStore`` only, so mypy rejects any use of
one store's internals (a SQL statement, a table handle) that the other could not honour.

Rows come back as ``sqlite3.Row`` from one store and ``dict`` from the other; both are read
by column name only (``row["status"]``), which is all ``Row`` promises.

    >>> from guardrails.stores.sqlite import State
    >>> store: StateStore = State(Path("/tmp/state.sqlite"))  # doctest: +SKIP
    >>> store.record_intent("stop:i-1", "i-1", "us-east-1", "stop", now)  # doctest: +SKIP
    True
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol, runtime_checkable


class Row(Protocol):
    """A stored record, read by column name."""

    def __getitem__(self, key: str, /) -> Any: ...


@runtime_checkable
class StateStore(Protocol):
    def close(self) -> None: ...

    # -- idle marks --------------------------------------------------------------------------
    def marks(self) -> Mapping[str, Row]: ...

    def add_mark(
        self, instance_id: str, region: str, at: datetime, action: str, *, reason: str, dry: bool
    ) -> None: ...

    def remove_mark(self, instance_id: str) -> None: ...

    # -- actions: intent before the API call, done after ---------------------------------------
    def record_intent(
        self, key: str, instance_id: str, region: str, kind: str, now: datetime
    ) -> bool:
        """False when this exact action was already recorded (by this or an earlier run)."""
        ...

    def action(self, key: str) -> Row | None: ...

    def finish_action(self, key: str, status: str, now: datetime, detail: str = "") -> None: ...

    def drop_intent(self, key: str) -> bool:
        """Abandon an action that was never carried out (its API call failed, or a restart
        found no effect), so a later cycle may decide it afresh. Only a row still in the
        ``intent`` state goes; a finished action is kept. True when a row went."""
        ...

    def pending_intents(self) -> Sequence[Row]: ...

    def actions(self) -> Sequence[Row]: ...

    # -- Slack outbox ------------------------------------------------------------------------
    def enqueue(
        self,
        dedupe_key: str,
        alert_key: str,
        payload: dict[str, Any],
        now: datetime,
        *,
        priority: int = 0,
    ) -> bool:
        """Store a pending message once per ``dedupe_key``; ``priority`` orders ``due`` (higher
        first: spend breaches and the blind summary before routine idle digests)."""
        ...

    def has_event(self, dedupe_key: str) -> bool: ...

    def remember(self, dedupe_key: str, alert_key: str, now: datetime) -> None: ...

    def last_alert(self, alert_key: str) -> datetime | None: ...

    def due(
        self, now: datetime, limit: int = 100, *, horizon: datetime | None = None
    ) -> Sequence[Row]:
        """Pending rows with ``next_attempt_at`` at or before ``now``, or after ``horizon``:
        a retry time that far ahead was set while the clock ran ahead, so it is due now.
        Highest ``priority`` first, then oldest (lowest id) first."""
        ...

    def claim(self, row_id: int, now: datetime, ttl_s: float, *, attempts: int) -> bool:
        """Atomically take a pending row for sending until ``now + ttl_s``. False when another
        sender holds a live claim, or the row is no longer pending or no longer has
        ``attempts`` (the count the caller read: someone tried it since), so of two racing
        senders one sends. ``mark_sent`` and ``retry_later`` end the claim; a claimer that
        dies leaves it to expire, and the row is due again."""
        ...

    def outbox_depth(self) -> int: ...

    def outbox_rows(self) -> Sequence[Row]: ...

    def mark_sent(self, row_id: int, now: datetime) -> None: ...

    def retry_later(self, row_id: int, when: datetime, error: str, give_up: bool) -> None: ...

    # -- spend and egress snapshots ------------------------------------------------------------
    def add_spend(
        self, now: datetime, scope: str, *, burn: float, today: float, mtd: float, proj: float
    ) -> None: ...

    def last_spend(self, scope: str) -> Row | None: ...

    def add_egress(self, now: datetime, usd: float, gb: float) -> None: ...

    def egress_history(self, since: datetime, before: datetime) -> list[float]: ...

    def prune_snapshots(self, before: datetime, scopes: list[str]) -> int: ...

    # -- core GPU usage (the core-idle rule; ``coreburst core report``) ----------------------------
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
        """One Slurm job run's GPU-hours so far (replaces the run's earlier record):
        ``used_gpu_h`` None where its GPUs were not all measured."""
        ...

    def core_usage(self, since: datetime) -> Sequence[Row]:
        """The runs seen at or after ``since``: the columns above plus ``last_seen``."""
        ...

    # -- key-value (breaker, caches, last cycle) -------------------------------------------------
    def get(self, key: str, default: Any = None) -> Any: ...

    def put(self, key: str, value: Any) -> None: ...

    # -- versioned documents (compare-and-swap: the burst spend ledger) -------------------------
    def get_versioned(self, key: str) -> tuple[Any, int]:
        """The document under ``key`` and its version (``(None, 0)`` when there is none)."""
        ...

    def put_if_version(self, key: str, value: Any, version: int) -> bool:
        """Write ``value`` only while the stored version is still ``version`` (0: absent);
        False when another writer got there first (read again and retry)."""
        ...

    # -- leader lease ----------------------------------------------------------------------------
    def acquire_lease(
        self, name: str, owner: str, now: datetime, ttl_s: float, *, replace: str | None = None
    ) -> bool:
        """Take or renew the lease for ``owner``: wins when the lease is free, expired, already
        ``owner``'s, or held by ``replace`` (a holder known to be dead). One conditional write."""
        ...

    def lease_holder(self, name: str) -> str | None: ...

    def release_lease(self, name: str, owner: str) -> None: ...
