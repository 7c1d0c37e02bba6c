"""Fixtures shared by unit suites: the daemon's state on both stores.

``open_store`` is parametrized over SQLite and DynamoDB (moto, in-process). Either way the
whole test runs inside moto's ``mock_aws``, so a daemon under test also finds EC2, CloudWatch
and the rest emulated, and nothing reaches AWS.
"""

from __future__ import annotations

import copy
import functools
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws
from moto.cloudwatch import models as moto_cloudwatch_models
from moto.core.botocore_stubber import BotocoreStubber
from moto.dynamodb import models as moto_dynamodb_models

from guardrails.stores.base import StateStore
from guardrails.stores.dynamodb import DynamoState, create_table
from guardrails.stores.sqlite import State

StoreOpener = Callable[[str], StateStore]


def atomic_moto_requests(monkeypatch: pytest.MonkeyPatch) -> None:
    """One lock per emulated request (see ``open_store``), for any test that races threads on
    moto's in-process DynamoDB."""
    request_lock = threading.Lock()
    unlocked = BotocoreStubber.process_request

    def atomic(self: BotocoreStubber, req: Any) -> Any:
        with request_lock:
            return unlocked(self, req)

    monkeypatch.setattr(BotocoreStubber, "process_request", atomic)


class _OneSnapshotPerTable:
    """Stands in for ``copy`` inside ``moto.dynamodb.models`` while one TransactWriteItems
    runs. moto takes its rollback snapshot with ``copy.deepcopy(table)`` once per *item* of the
    transaction, all before the first write, keeping the last copy per table; the copies are
    therefore identical, and this hands back the first one instead of copying the whole table
    again (a 4-item outbox insert copied its table 4 times: 400 inserts took 77 s). What moto
    stores, answers and rolls back is unchanged."""

    def __init__(self) -> None:
        self.local = threading.local()

    def deepcopy(self, x: Any, memo: Any = None) -> Any:
        made: dict[int, tuple[Any, Any]] | None = getattr(self.local, "made", None)
        if made is None or not isinstance(x, moto_dynamodb_models.Table):
            return copy.deepcopy(x, memo)
        if id(x) not in made:  # the original is kept with its copy, so its id is not reused
            made[id(x)] = (x, copy.deepcopy(x, memo))
        return made[id(x)][1]

    def __getattr__(self, name: str) -> Any:
        return getattr(copy, name)


@pytest.fixture(autouse=True, scope="session")
def _moto_transaction_snapshot_once() -> Iterator[None]:
    """moto's in-process DynamoDB: one rollback snapshot per table per transaction (see
    :class:`_OneSnapshotPerTable`)."""
    backend = moto_dynamodb_models.DynamoDBBackend
    shim = _OneSnapshotPerTable()
    unpatched = backend.transact_write_items

    @functools.wraps(unpatched)
    def transact_write_items(self: Any, transact_items: Any) -> None:
        shim.local.made = {}
        try:
            return unpatched(self, transact_items)
        finally:
            shim.local.made = None

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(moto_dynamodb_models, "copy", shim)
        mp.setattr(backend, "transact_write_items", transact_write_items)
        yield


def _dims_key(dims: Any) -> tuple[tuple[Any, Any], ...] | None:
    """The dimensions as a sorted tuple of (name, value); None when a value is None (moto's
    ``Dimension.__eq__`` treats a None value as matching any)."""
    pairs = [(d.name, d.value) for d in dims]
    if any(v is None for _, v in pairs):
        return None
    return tuple(sorted(pairs, key=repr))


class _MetricsOfOneSeries:
    """moto's in-process CloudWatch ``get_metric_data`` scans every stored datum for every
    query and period (O(queries x periods x data): 540 queries over 180 instances took 114 s
    of CPU). Each ``MetricStat`` query is answered here by moto's own code over only the
    data that can match it: every filter moto applies needs the datum's metric name to be
    the query's, and a query with dimensions needs moto's element-wise equality of the two
    sorted dimension lists, which (with no None value) implies the same multiset of (name,
    value) pairs. Data are kept in their stored order, so sums add up in the same order.
    With an ``Expression`` query, or none, moto runs as it is. What moto answers is
    unchanged (``test_moto_metric_data_shim.py`` compares both on the same data)."""

    def __init__(self) -> None:
        self.local = threading.local()
        self.unpatched = moto_cloudwatch_models.CloudWatchBackend.get_metric_data
        self.all_metrics = moto_cloudwatch_models.CloudWatchBackend.get_all_metrics

    def get_all_metrics(self, backend: Any) -> list[Any]:
        only = getattr(self.local, "only", None)
        return self.all_metrics(backend) if only is None else only

    def get_metric_data(
        self, backend: Any, queries: list[dict[str, Any]], *args: Any, **kwargs: Any
    ) -> list[dict[str, Any]]:
        if not queries or any("MetricStat" not in q for q in queries):
            return self.unpatched(backend, queries, *args, **kwargs)
        by_name: dict[str, list[tuple[int, Any]]] = {}
        by_series: dict[tuple[str, Any], list[tuple[int, Any]]] = {}
        wild: dict[str, list[tuple[int, Any]]] = {}  # data with a None dimension value
        for i, md in enumerate(self.all_metrics(backend)):
            by_name.setdefault(md.name, []).append((i, md))
            key = _dims_key(md.dimensions)
            if key is None:
                wild.setdefault(md.name, []).append((i, md))
            else:
                by_series.setdefault((md.name, key), []).append((i, md))
        out: list[dict[str, Any]] = []
        try:
            for q in queries:
                metric = q["MetricStat"]["Metric"]
                name = metric["MetricName"]
                dims = [moto_cloudwatch_models.Dimension(d["Name"], d["Value"])
                        for d in metric.get("Dimensions", [])]  # fmt: skip
                key = _dims_key(dims) if dims else None
                if key is None:
                    subset = by_name.get(name, [])
                else:
                    subset = sorted(by_series.get((name, key), []) + wild.get(name, []),
                                    key=lambda p: p[0])  # fmt: skip
                self.local.only = [md for _, md in subset]
                out += self.unpatched(backend, [q], *args, **kwargs)
        finally:
            self.local.only = None
        return out


@pytest.fixture(autouse=True, scope="session")
def _moto_metric_data_by_name() -> Iterator[_MetricsOfOneSeries]:
    """moto's in-process CloudWatch: each query reads only the data that can match it (see
    :class:`_MetricsOfOneSeries`)."""
    backend = moto_cloudwatch_models.CloudWatchBackend
    shim = _MetricsOfOneSeries()

    def get_all_metrics(self: Any) -> list[Any]:
        return shim.get_all_metrics(self)

    def get_metric_data(self: Any, queries: list[dict[str, Any]], *a: Any, **kw: Any) -> Any:
        return shim.get_metric_data(self, queries, *a, **kw)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(backend, "get_all_metrics", get_all_metrics)
        mp.setattr(backend, "get_metric_data", get_metric_data)
        yield shim


@pytest.fixture(params=["sqlite", "dynamodb"])
def open_store(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[StoreOpener]:
    """``open_store(name)`` opens a new handle on the store ``name`` (created on first use),
    as a second daemon or a restarted one would."""
    for var in ("AWS_ENDPOINT_URL", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    opened: list[StateStore] = []
    # DynamoDB applies each request atomically: a conditional UpdateItem checks its condition
    # and writes as one step ("Condition expressions", DynamoDB Developer Guide: "If the
    # condition expression evaluates to true, the operation succeeds"). moto's in-process
    # backend checks and then writes without a lock, so two threads can both pass the same
    # condition (seen: one outbox row sent twice). One lock per emulated request restores that
    # atomicity; requests from two threads still interleave between calls.
    atomic_moto_requests(monkeypatch)
    with mock_aws():
        ddb: Any = boto3.resource("dynamodb", region_name="us-east-1")
        tables: dict[str, Any] = {}

        def opener(name: str) -> StateStore:
            store: StateStore
            if request.param == "sqlite":
                store = State(tmp_path / f"{name}.sqlite")
            else:
                if name not in tables:
                    tables[name] = create_table(ddb, f"state-{name}")
                store = DynamoState(tables[name])
            opened.append(store)
            return store

        yield opener
        for s in opened:
            s.close()
