"""Daemon state in DynamoDB, the second ``guardrails.stores.base.StateStore`` beside SQLite.

Used when the daemon runs as a scheduled Lambda: invocations can overlap, so every write that
decides something (an action's intent, an alert's first enqueue, the leader lease) is a
conditional write — the second writer loses cleanly instead of acting twice.

One table, key ``(pk, sk)``: ``pk`` names the record kind, ``sk`` the record. Rows come back as
plain dicts with the same keys as the SQLite rows. Spend and egress snapshots carry a TTL
attribute (``TTL_ATTRIBUTE``, epoch seconds), so DynamoDB deletes them by itself even when the
hourly prune cannot run.

    >>> state = DynamoState(boto3.resource("dynamodb").Table("coreburst-state"))  # doctest: +SKIP
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from boto3.dynamodb.conditions import Attr, Key
from botocore.exceptions import ClientError

from guardrails.timefmt import iso, parse_iso

Row = dict[str, Any]

# DynamoDB Time to Live reads this attribute: a Number holding epoch seconds ("Using time to
# live (TTL) in DynamoDB", Amazon DynamoDB Developer Guide). The Pulumi component enables TTL on
# the same name.
TTL_ATTRIBUTE = "expires_at"

# The newest non-suppressed alert per alert key (``pk`` = ALERT_LAST, ``sk`` = the key), and the
# kv flag saying a table from before these items has been indexed.
ALERT_LAST = "alert-last"
ALERT_LAST_INDEXED = "alert-last-indexed"
# A ref per pending outbox row (``sk`` = its dedupe key), removed when it is sent or given up.
OUTBOX_PENDING = "outbox-pending"
OUTBOX_PENDING_INDEXED = "outbox-pending-indexed"


def _conditional_failed(exc: ClientError) -> bool:
    """True only when a write lost on its condition (someone else wrote first)."""
    code = exc.response.get("Error", {}).get("Code", "")
    if code == "TransactionCanceledException":
        reasons = exc.response.get("CancellationReasons", [])
        return any(r.get("Code") == "ConditionalCheckFailed" for r in reasons)
    return code == "ConditionalCheckFailedException"


def _plain(item: dict[str, Any]) -> Row:
    out: Row = {}
    for k, v in item.items():
        if k in ("pk", "sk"):
            continue
        if isinstance(v, Decimal):
            out[k] = int(v) if v == v.to_integral_value() else float(v)
        else:
            out[k] = v
    return out


def _num(x: float) -> Decimal:
    return Decimal(repr(float(x)))


class DynamoState:
    def __init__(self, table: Any, snapshot_retention: timedelta = timedelta(days=35)) -> None:
        self.table = table
        self.snapshot_retention = snapshot_retention
        # The resource's client takes plain Python values, also in transactions.
        self.client = table.meta.client
        self._alert_times_indexed = False
        self._pending_indexed = False

    def close(self) -> None:
        """Nothing to close; present for interface parity with the SQLite store."""

    # -- helpers ---------------------------------------------------------------------------
    def _query(self, pk: str, **kw: Any) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        args: dict[str, Any] = {"KeyConditionExpression": Key("pk").eq(pk), **kw}
        if "sk_between" in args:
            lo, hi = args.pop("sk_between")
            args["KeyConditionExpression"] = Key("pk").eq(pk) & Key("sk").between(lo, hi)
        while True:
            page = self.table.query(**args)
            items.extend(page.get("Items", []))
            if "LastEvaluatedKey" not in page or "Limit" in args:
                return items
            args["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def _next_id(self, counter: str) -> int:
        resp = self.table.update_item(
            Key={"pk": "counter", "sk": counter},
            UpdateExpression="ADD n :one",
            ExpressionAttributeValues={":one": 1},
            ReturnValues="UPDATED_NEW",
        )
        return int(resp["Attributes"]["n"])

    def _put_new(self, item: dict[str, Any]) -> bool:
        try:
            self.table.put_item(Item=item, ConditionExpression=Attr("pk").not_exists())
        except ClientError as exc:
            if _conditional_failed(exc):
                return False
            raise
        return True

    # -- marks -----------------------------------------------------------------------------
    def marks(self) -> dict[str, Row]:
        return {i["sk"]: _plain(i) for i in self._query("mark")}

    def add_mark(
        self, instance_id: str, region: str, at: datetime, action: str, *, reason: str, dry: bool
    ) -> None:
        self._put_new(
            {
                "pk": "mark",
                "sk": instance_id,
                "instance_id": instance_id,
                "region": region,
                "marked_at": iso(at),
                "action": action,
                "reason": reason,
                "dry_run": int(dry),
            }
        )

    def remove_mark(self, instance_id: str) -> None:
        self.table.delete_item(Key={"pk": "mark", "sk": instance_id})

    # -- actions ---------------------------------------------------------------------------
    def record_intent(
        self, key: str, instance_id: str, region: str, kind: str, now: datetime
    ) -> bool:
        """False when this exact action was already recorded — by this or another run."""
        if self.table.get_item(Key={"pk": "action", "sk": key}).get("Item"):
            return False
        return self._put_new(
            {
                "pk": "action",
                "sk": key,
                "id": self._next_id("action"),
                "key": key,
                "instance_id": instance_id,
                "region": region,
                "kind": kind,
                "status": "intent",
                "created_at": iso(now),
                "updated_at": iso(now),
                "detail": "",
            }
        )

    def action(self, key: str) -> Row | None:
        item = self.table.get_item(Key={"pk": "action", "sk": key}).get("Item")
        return _plain(item) if item else None

    def finish_action(self, key: str, status: str, now: datetime, detail: str = "") -> None:
        self.table.update_item(
            Key={"pk": "action", "sk": key},
            UpdateExpression="SET #s = :s, updated_at = :u, detail = :d",
            ExpressionAttributeNames={"#s": "status"},
            ExpressionAttributeValues={":s": status, ":u": iso(now), ":d": detail},
            ConditionExpression=Attr("pk").exists(),
        )

    def drop_intent(self, key: str) -> bool:
        """Forget an intent that was never carried out; a finished action stays."""
        try:
            self.table.delete_item(
                Key={"pk": "action", "sk": key},
                ConditionExpression=Attr("status").eq("intent"),
            )
        except ClientError as exc:
            if _conditional_failed(exc):
                return False
            raise
        return True

    def actions(self) -> list[Row]:
        return sorted((_plain(i) for i in self._query("action")), key=lambda r: r["id"])

    def pending_intents(self) -> list[Row]:
        return [r for r in self.actions() if r["status"] == "intent"]

    # -- outbox ----------------------------------------------------------------------------
    def _outbox_insert(
        self,
        dedupe_key: str,
        alert_key: str,
        payload: str,
        now: datetime,
        status: str,
        *,
        priority: int = 0,
    ) -> bool:
        if self.table.get_item(Key={"pk": "outbox", "sk": dedupe_key}).get("Item"):
            return False
        row_id = self._next_id("outbox")
        item = {
            "pk": "outbox",
            "sk": dedupe_key,
            "id": row_id,
            "dedupe_key": dedupe_key,
            "alert_key": alert_key,
            "payload": payload,
            "created_at": iso(now),
            "next_attempt_at": iso(now),
            "attempts": 0,
            "status": status,
            "sent_at": None,
            "last_error": None,
            "priority": int(priority),
        }
        writes: list[dict[str, Any]] = [
            {
                "Put": {
                    "TableName": self.table.name,
                    "Item": item,
                    "ConditionExpression": "attribute_not_exists(pk)",
                }
            },
            {
                "Put": {
                    "TableName": self.table.name,
                    "Item": {"pk": "outbox-id", "sk": f"{row_id:012d}", "ref": dedupe_key},
                }
            },
        ]
        if status == "pending":
            # ``due`` and ``outbox_depth`` read this small partition, not every alert ever sent.
            writes.append(
                {
                    "Put": {
                        "TableName": self.table.name,
                        "Item": {"pk": OUTBOX_PENDING, "sk": dedupe_key},
                    }
                }
            )
        if status != "suppressed":
            # ``last_alert`` reads this one item instead of the whole outbox partition.
            writes.append(
                {
                    "Put": {
                        "TableName": self.table.name,
                        "Item": {"pk": ALERT_LAST, "sk": alert_key, "at": iso(now)},
                    }
                }
            )
        try:
            # The event, its id index and the alert's last time land together, or none does.
            self.client.transact_write_items(TransactItems=writes)
        except ClientError as exc:
            if _conditional_failed(exc):
                return False
            raise
        return True

    def enqueue(
        self,
        dedupe_key: str,
        alert_key: str,
        payload: dict[str, Any],
        now: datetime,
        *,
        priority: int = 0,
    ) -> bool:
        return self._outbox_insert(
            dedupe_key, alert_key, json.dumps(payload), now, "pending", priority=priority
        )

    def has_event(self, dedupe_key: str) -> bool:
        return "Item" in self.table.get_item(Key={"pk": "outbox", "sk": dedupe_key})

    def remember(self, dedupe_key: str, alert_key: str, now: datetime) -> None:
        self._outbox_insert(dedupe_key, alert_key, "{}", now, "suppressed")

    def outbox_rows(self) -> list[Row]:
        return sorted((_plain(i) for i in self._query("outbox")), key=lambda r: r["id"])

    def last_alert(self, alert_key: str) -> datetime | None:
        """One GetItem per call. A table written before the ``alert-last`` items existed is
        indexed once, from one read of the outbox, the first time it is asked."""
        self._index_alert_times()
        item = self.table.get_item(Key={"pk": ALERT_LAST, "sk": alert_key}).get("Item")
        return parse_iso(str(item["at"])) if item else None

    def _index_alert_times(self) -> None:
        if self._alert_times_indexed:
            return
        if not self.get(ALERT_LAST_INDEXED):
            latest: dict[str, str] = {}
            for r in self.outbox_rows():
                if r["status"] != "suppressed":
                    key = r["alert_key"]
                    latest[key] = max(latest.get(key, ""), r["created_at"])
            with self.table.batch_writer() as batch:
                for key, at in latest.items():
                    batch.put_item(Item={"pk": ALERT_LAST, "sk": key, "at": at})
            self.put(ALERT_LAST_INDEXED, True)
        self._alert_times_indexed = True

    def due(self, now: datetime, limit: int = 100, *, horizon: datetime | None = None) -> list[Row]:
        """As ``State.due``: pending rows whose time has come or lies past ``horizon``,
        highest ``priority`` first (an item from before priorities has none: routine, 0),
        then oldest first."""
        at, far = iso(now), iso(horizon) if horizon is not None else "9999"
        rows = [
            r
            for r in self._pending_rows()
            if r["status"] == "pending"
            and (r["next_attempt_at"] <= at or r["next_attempt_at"] > far)
        ]
        rows.sort(key=lambda r: (-int(r.get("priority") or 0), r["id"]))
        return rows[:limit]

    def claim(self, row_id: int, now: datetime, ttl_s: float, *, attempts: int) -> bool:
        """As ``State.claim``, as one conditional UpdateItem: of two senders only one wins."""
        t = now.timestamp()
        try:
            self.table.update_item(
                Key={"pk": "outbox", "sk": self._outbox_key(row_id)},
                UpdateExpression="SET claimed_until = :until",
                ConditionExpression=Attr("status").eq("pending")
                & Attr("attempts").eq(attempts)
                & (
                    Attr("claimed_until").not_exists()
                    | Attr("claimed_until").lt(_num(t))
                    | Attr("claimed_until").gt(_num(t + 2 * ttl_s))
                ),
                ExpressionAttributeValues={":until": _num(t + ttl_s)},
            )
        except ClientError as exc:
            if _conditional_failed(exc):
                return False
            raise
        return True

    def outbox_depth(self) -> int:
        self._index_pending()
        return sum(
            int(page.get("Count", 0))
            for page in self.client.get_paginator("query").paginate(
                TableName=self.table.name,
                KeyConditionExpression="pk = :p",
                ExpressionAttributeValues={":p": OUTBOX_PENDING},
                Select="COUNT",
            )
        )

    def _pending_rows(self) -> list[Row]:
        """The outbox rows still pending, read through their refs (BatchGetItem, 100 keys a
        call) instead of the whole outbox partition, which keeps every alert ever sent for
        dedupe."""
        self._index_pending()
        keys = [{"pk": "outbox", "sk": str(i["sk"])} for i in self._query(OUTBOX_PENDING)]
        rows: list[Row] = []
        for start in range(0, len(keys), 100):
            request: dict[str, Any] = {self.table.name: {"Keys": keys[start : start + 100]}}
            while request:
                resp = self.client.batch_get_item(RequestItems=request)
                rows.extend(_plain(i) for i in resp["Responses"].get(self.table.name, []))
                request = resp.get("UnprocessedKeys") or {}
        return rows

    def _index_pending(self) -> None:
        """A table from before the pending refs: write one for each pending row, once."""
        if self._pending_indexed:
            return
        if not self.get(OUTBOX_PENDING_INDEXED):
            with self.table.batch_writer() as batch:
                for r in self.outbox_rows():
                    if r["status"] == "pending":
                        batch.put_item(Item={"pk": OUTBOX_PENDING, "sk": r["dedupe_key"]})
            self.put(OUTBOX_PENDING_INDEXED, True)
        self._pending_indexed = True

    def _settle(self, row_id: int, update: dict[str, Any], *, still_pending: bool) -> None:
        """One outbox row's update and its pending ref's removal, together."""
        ref = self._outbox_key(row_id)
        writes: list[dict[str, Any]] = [
            {"Update": {"TableName": self.table.name, "Key": {"pk": "outbox", "sk": ref}, **update}}
        ]
        if not still_pending:
            writes.append(
                {"Delete": {"TableName": self.table.name, "Key": {"pk": OUTBOX_PENDING, "sk": ref}}}
            )
        self.client.transact_write_items(TransactItems=writes)

    def _outbox_key(self, row_id: int) -> str:
        item = self.table.get_item(Key={"pk": "outbox-id", "sk": f"{row_id:012d}"}).get("Item")
        if not item:
            raise KeyError(f"no outbox row {row_id}")
        return str(item["ref"])

    def mark_sent(self, row_id: int, now: datetime) -> None:
        self._settle(
            row_id,
            {
                "UpdateExpression": (
                    "SET #s = :s, sent_at = :t ADD attempts :one REMOVE claimed_until"
                ),
                "ExpressionAttributeNames": {"#s": "status"},
                "ExpressionAttributeValues": {":s": "sent", ":t": iso(now), ":one": 1},
            },
            still_pending=False,
        )

    def retry_later(self, row_id: int, when: datetime, error: str, give_up: bool) -> None:
        self._settle(
            row_id,
            {
                "UpdateExpression": (
                    "SET #s = :s, next_attempt_at = :w, last_error = :e ADD attempts :one"
                    " REMOVE claimed_until"
                ),
                "ExpressionAttributeNames": {"#s": "status"},
                "ExpressionAttributeValues": {
                    ":s": "failed" if give_up else "pending",
                    ":w": iso(when),
                    ":e": error,
                    ":one": 1,
                },
            },
            still_pending=not give_up,
        )

    # -- snapshots -------------------------------------------------------------------------
    def _expires(self, now: datetime) -> int:
        return int((now + self.snapshot_retention).timestamp())

    def add_spend(
        self, now: datetime, scope: str, *, burn: float, today: float, mtd: float, proj: float
    ) -> None:
        self.table.put_item(
            Item={
                "pk": f"spend#{scope}",
                "sk": iso(now),
                "ts": iso(now),
                "scope": scope,
                "burn": _num(burn),
                "today": _num(today),
                "mtd": _num(mtd),
                "projected_month": _num(proj),
                TTL_ATTRIBUTE: self._expires(now),
            }
        )

    def last_spend(self, scope: str) -> Row | None:
        items = self._query(f"spend#{scope}", ScanIndexForward=False, Limit=1)
        return _plain(items[0]) if items else None

    def add_egress(self, now: datetime, usd: float, gb: float) -> None:
        self.table.put_item(
            Item={
                "pk": "egress",
                "sk": iso(now),
                "ts": iso(now),
                "projected_day_usd": _num(usd),
                "projected_day_gb": _num(gb),
                TTL_ATTRIBUTE: self._expires(now),
            }
        )

    def prune_snapshots(self, before: datetime, scopes: list[str]) -> int:
        """As ``State.prune_snapshots``; snapshots live in one partition per scope."""
        cut = iso(before)
        doomed: list[dict[str, Any]] = []
        for scope in scopes:
            items = self._query(f"spend#{scope}", ScanIndexForward=False)
            doomed += [i for i in items[1:] if i["sk"] < cut]  # keep the latest
        doomed += [i for i in self._query("egress") if i["sk"] < cut]
        with self.table.batch_writer() as batch:
            for i in doomed:
                batch.delete_item(Key={"pk": i["pk"], "sk": i["sk"]})
        return len(doomed)

    def egress_history(self, since: datetime, before: datetime) -> list[float]:
        items = self._query("egress", sk_between=(iso(since), iso(before)))
        return [
            float(i["projected_day_usd"])
            for i in sorted(items, key=lambda i: i["sk"])
            if i["sk"] < iso(before)
        ]

    # -- core GPU usage (one item per job run; expires like the snapshots) -------------------
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
        self.table.put_item(
            Item={
                "pk": "core-usage",
                "sk": run_key,
                "run_key": run_key,
                "job_id": job_id,
                "user": user,
                "account": account,
                "partition": partition,
                "start": iso(start),
                "last_seen": iso(now),
                "gpus": gpus,
                "allocated_gpu_h": _num(allocated_gpu_h),
                "used_gpu_h": None if used_gpu_h is None else _num(used_gpu_h),
                "state": state,
                TTL_ATTRIBUTE: self._expires(now),
            }
        )

    def core_usage(self, since: datetime) -> list[Row]:
        cut = iso(since)
        rows = [_plain(i) for i in self._query("core-usage") if i["last_seen"] >= cut]
        return sorted(rows, key=lambda r: (r["start"], r["run_key"]))

    # -- kv --------------------------------------------------------------------------------
    def get(self, key: str, default: Any = None) -> Any:
        item = self.table.get_item(Key={"pk": "kv", "sk": key}).get("Item")
        return json.loads(item["value"]) if item else default

    def put(self, key: str, value: Any) -> None:
        self.table.put_item(Item={"pk": "kv", "sk": key, "value": json.dumps(value, default=str)})

    # -- versioned documents (compare-and-swap) ---------------------------------------------
    def get_versioned(self, key: str) -> tuple[Any, int]:
        item = self.table.get_item(Key={"pk": "cas", "sk": key}, ConsistentRead=True).get("Item")
        return (json.loads(item["value"]), int(item["version"])) if item else (None, 0)

    def put_if_version(self, key: str, value: Any, version: int) -> bool:
        """A conditional PutItem (DynamoDB developer guide, "Condition expressions":
        the write happens only while the condition holds, atomically), so of two writers that
        read the same version one wins."""
        cond = Attr("pk").not_exists() if version == 0 else Attr("version").eq(version)
        try:
            self.table.put_item(
                Item={
                    "pk": "cas",
                    "sk": key,
                    "value": json.dumps(value, default=str, sort_keys=True),
                    "version": version + 1,
                },
                ConditionExpression=cond,
            )
        except ClientError as exc:
            if _conditional_failed(exc):
                return False
            raise
        return True

    # -- leader lease ----------------------------------------------------------------------
    def acquire_lease(
        self, name: str, owner: str, now: datetime, ttl_s: float, *, replace: str | None = None
    ) -> bool:
        """Take or renew the lease ``name`` for ``owner``; False while another owner holds an
        unexpired one, unless that owner is ``replace`` (a holder known to be dead). Only the
        holder may act."""
        expires = now.timestamp() + ttl_s
        cond = (
            Attr("pk").not_exists()
            | Attr("owner").eq(owner)
            | Attr("expires").lt(_num(now.timestamp()))
        )
        if replace is not None:
            cond = cond | Attr("owner").eq(replace)
        try:
            self.table.put_item(
                Item={"pk": "lease", "sk": name, "owner": owner, "expires": _num(expires)},
                ConditionExpression=cond,
            )
        except ClientError as exc:
            if _conditional_failed(exc):
                return False
            raise
        return True

    def lease_holder(self, name: str) -> str | None:
        item = self.table.get_item(Key={"pk": "lease", "sk": name}).get("Item")
        return str(item["owner"]) if item else None

    def release_lease(self, name: str, owner: str) -> None:
        try:
            self.table.delete_item(
                Key={"pk": "lease", "sk": name}, ConditionExpression=Attr("owner").eq(owner)
            )
        except ClientError as exc:
            if not _conditional_failed(exc):
                raise


def create_table(dynamodb: Any, name: str) -> Any:
    """Create the state table (tests, local runs); the Pulumi component creates it in AWS."""
    table = dynamodb.create_table(
        TableName=name,
        KeySchema=[
            {"AttributeName": "pk", "KeyType": "HASH"},
            {"AttributeName": "sk", "KeyType": "RANGE"},
        ],
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    table.wait_until_exists()
    dynamodb.meta.client.update_time_to_live(
        TableName=name,
        TimeToLiveSpecification={"Enabled": True, "AttributeName": TTL_ATTRIBUTE},
    )
    return table
