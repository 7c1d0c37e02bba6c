"""Fixtures shared by unit suites: the daemon's state on both stores, and moto for a whole test
(``aws_env``).

``open_store`` is parametrized over SQLite and DynamoDB (moto, in-process). Either way the
whole test runs inside moto's ``mock_aws``, so a daemon under test also finds EC2, CloudWatch
and the rest emulated, and nothing reaches AWS.
"""

from __future__ import annotations

import copy
import functools
import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import botocore.loaders
import botocore.session
import pulumi.runtime.mocks
import pulumi.runtime.resource
import pulumi.runtime.settings
import pytest
from moto import mock_aws
from moto.cloudwatch import models as moto_cloudwatch_models
from moto.dynamodb import models as moto_dynamodb_models
from moto.ec2 import utils as moto_ec2_utils
from moto.ec2.models import core as moto_ec2_core
from moto.utilities.utils import load_resource

from guardrails.stores.base import StateStore
from guardrails.stores.dynamodb import DynamoState, create_table
from guardrails.stores.sqlite import State
from tests.helpers.aws import atomic_moto_requests, fake_aws_env
from tests.helpers.stores import StoreOpener


def _named_keys(table: Any, transact_items: list[dict[str, Any]]) -> set[tuple[Any, Any]] | None:
    """The (hash, range) keys of ``table``'s items that the transaction names, as moto keys
    them; None when one is not in the plain form read here (then moto copies as it does)."""
    keys = set()
    for entry in transact_items:
        op_type, op = next(iter(entry.items()))
        if op.get("TableName") != table.name:
            continue
        key = op.get("Item") if op_type == "Put" else op.get("Key")
        if not isinstance(key, dict) or table.hash_key_attr not in key:
            return None
        range_key = None
        if table.range_key_attr is not None:
            if table.range_key_attr not in key:
                return None
            range_key = moto_dynamodb_models.DynamoType(key[table.range_key_attr])
        keys.add((moto_dynamodb_models.DynamoType(key[table.hash_key_attr]), range_key))
    return keys


class _SnapshotOfNamedItems:
    """Stands in for ``copy`` inside ``moto.dynamodb.models`` while one TransactWriteItems
    runs. moto takes its rollback snapshot with ``copy.deepcopy(table)`` once per *item* of the
    transaction, all before the first write, keeping the last copy per table, so every outbox
    insert copied its whole table several times (400 inserts took 77 s; 30 s with one copy).
    Here the first copy deep-copies the table's settings and only the items the transaction
    names, each in a new map (the table's, and a hash key's map of range keys); every other
    item and map is the table's own object. Later copies are that one. It is the same
    snapshot: a transaction writes only the items it names (Put replaces a map entry, Delete
    removes one, Update changes the named item in place or puts a new one), so until moto drops
    the snapshot (commit) or puts it back (rollback) what is shared stays as it was. A table
    with a stream (whose records hold items) or a key not in plain form is copied whole, as
    moto does. What moto stores, answers and rolls back is unchanged
    (``test_unit_shims.py`` compares both)."""

    def __init__(self) -> None:
        self.local = threading.local()

    def begin(self, transact_items: list[dict[str, Any]]) -> None:
        self.local.made = {}
        self.local.transact_items = transact_items

    def end(self) -> None:
        self.local.made = None
        self.local.transact_items = None

    def deepcopy(self, x: Any, memo: Any = None) -> Any:
        made: dict[int, tuple[Any, Any]] | None = getattr(self.local, "made", None)
        if made is None or not isinstance(x, moto_dynamodb_models.Table):
            return copy.deepcopy(x, memo)
        if id(x) not in made:  # the original is kept with its copy, so its id is not reused
            made[id(x)] = (x, self.snapshot(x, self.local.transact_items))
        return made[id(x)][1]

    @staticmethod
    def snapshot(table: Any, transact_items: list[dict[str, Any]]) -> Any:
        try:
            named = _named_keys(table, transact_items)
        except Exception:  # a malformed key: moto reports it, from its own copy
            named = None
        if named is None or table.stream_shard is not None:  # a stream's records: as moto
            return copy.deepcopy(table)
        items = copy.copy(table.items)  # a defaultdict(dict) like moto's, a new map
        memo: dict[int, Any] = {id(table.items): items}
        for hash_key, range_key in named:
            if hash_key not in table.items:
                continue
            if table.range_key_attr is None:
                items[hash_key] = copy.deepcopy(table.items[hash_key], memo)
                continue
            bucket = table.items[hash_key]
            if id(bucket) not in memo:  # this bucket may change: a new one
                memo[id(bucket)] = items[hash_key] = dict(bucket)
            if range_key in bucket:
                items[hash_key][range_key] = copy.deepcopy(bucket[range_key], memo)
        return copy.deepcopy(table, memo)

    def __getattr__(self, name: str) -> Any:
        return getattr(copy, name)


@pytest.fixture(autouse=True, scope="session")
def _moto_builtin_images_only(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """moto's in-process EC2: each region's backend holds moto's 44 built-in images (the
    ``ami-12c6146b`` the tests launch from is one), not also the ~1,250 region-specific ones
    (its "latest" and ECS-optimized lists) that no unit test names. moto builds a backend on a
    region's first request and again at every ``mock_aws`` reset, and each image costs an EBS
    volume and snapshot with random ids: 0.6-0.8 s of CPU per backend, most of a small EC2
    test. This is moto's own switch (``MOTO_AMIS_PATH``: images from this file, and none of
    the region lists) given moto's own built-in list, so every built-in image and every
    instance launched from one are as before (``test_unit_shims.py`` compares both).
    Inherited by a moto server a unit test starts as a child process."""
    path = tmp_path_factory.mktemp("moto") / "amis.json"
    path.write_text(json.dumps(load_resource("ec2/resources/amis.json")))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MOTO_AMIS_PATH", str(path))
        yield


@pytest.fixture(autouse=True, scope="session")
def _one_botocore_loader() -> Iterator[dict[Any, botocore.loaders.Loader]]:
    """Every botocore session in the test process shares one data loader per data path, as
    every client of one session already does. A new session otherwise parses each service
    model's JSON again (0.1-0.25 s per client; tests build a session per daemon, production
    one per process, and the burst agent already reuses its warm loader). The loader only
    reads and caches botocore's data files; events, credentials and config stay per
    session."""
    loaders: dict[Any, botocore.loaders.Loader] = {}

    def register_data_loader(self: Any) -> None:
        def shared() -> botocore.loaders.Loader:
            path = self.get_config_variable("data_path")
            if path not in loaders:
                loaders[path] = botocore.loaders.create_loader(path)
            return loaders[path]

        self._components.lazy_register_component("data_loader", shared)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(botocore.session.Session, "_register_data_loader", register_data_loader)
        yield loaders


@pytest.fixture(autouse=True, scope="session")
def _no_stack_traces_for_pulumi_mocks() -> Iterator[None]:
    """Under ``pulumi.runtime.set_mocks`` the SDK still walks the whole Python stack (under
    pytest, about 80 frames, each made a ``file://`` URI) for every resource it registers or
    reads, and hands the trace to the mock monitor, which never reads it (``MockMonitor`` uses
    the type, name, inputs and options). That was a third of the CPU of the Pulumi-program
    tests (``test_pricing_agreement.py``: 15 of 64 s). With the mock monitor the trace is
    empty; with any other monitor the SDK builds it as it does."""
    unpatched = pulumi.runtime.resource._get_stack_trace

    @functools.wraps(unpatched)
    def stack_trace() -> Any:
        if isinstance(pulumi.runtime.settings.get_monitor(), pulumi.runtime.mocks.MockMonitor):
            return pulumi.runtime.resource.source_pb2.StackTrace()
        return unpatched()

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(pulumi.runtime.resource, "_get_stack_trace", stack_trace)
        yield


def _tags_of_one_resource(resource: Any) -> list[dict[str, str]]:
    """moto's ``TaggedEC2Resource.get_tags`` asks ``describe_tags`` for the resource's id, which
    matches every tag of every resource against that id (an fnmatch pattern anchored at both
    ends): each instance described costs a pass over all tags, O(n^2) for n instances (600
    launched instances: 7 s). An id without wildcard characters matches itself only, so its
    tags are the backend's entry for that id, in the same order and the same rows; an id with
    one goes to moto as it is (``test_unit_shims.py`` compares both)."""
    rid = resource.id
    if not rid or any(c in rid for c in "*?[]\\"):
        return _unpatched_get_tags(resource)
    rtype = moto_ec2_utils.EC2_PREFIX_TO_RESOURCE.get(moto_ec2_utils.get_prefix(rid), "")
    return [
        {"resource_id": rid, "key": key, "value": value, "resource_type": rtype}
        for key, value in resource.ec2_backend.tags.get(rid, {}).items()
    ]


_unpatched_get_tags = moto_ec2_core.TaggedEC2Resource.get_tags


@pytest.fixture(autouse=True, scope="session")
def _moto_tags_by_resource_id() -> Iterator[Callable[[Any], list[dict[str, str]]]]:
    """moto's in-process EC2: a resource's own tags read by its id (see
    :func:`_tags_of_one_resource`); yields moto's own ``get_tags``."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(moto_ec2_core.TaggedEC2Resource, "get_tags", _tags_of_one_resource)
        yield _unpatched_get_tags


@pytest.fixture(autouse=True, scope="session")
def _moto_transaction_snapshot_once() -> Iterator[_SnapshotOfNamedItems]:
    """moto's in-process DynamoDB: one rollback snapshot per table per transaction, copying
    only the items the transaction names (see :class:`_SnapshotOfNamedItems`)."""
    backend = moto_dynamodb_models.DynamoDBBackend
    shim = _SnapshotOfNamedItems()
    unpatched = backend.transact_write_items

    @functools.wraps(unpatched)
    def transact_write_items(self: Any, transact_items: Any) -> None:
        shim.begin(transact_items)
        try:
            return unpatched(self, transact_items)
        finally:
            shim.end()

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(moto_dynamodb_models, "copy", shim)
        mp.setattr(backend, "transact_write_items", transact_write_items)
        yield shim


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


@pytest.fixture
def aws_region() -> str:
    """The ``AWS_DEFAULT_REGION`` that ``aws_env`` sets. A module whose code under test takes
    its region from the environment overrides this fixture (test_rule_selection.py: us-east-2,
    where its deployed config's region is)."""
    return "us-east-1"


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch, aws_region: str) -> Iterator[None]:
    """The whole test inside moto's ``mock_aws``: no endpoint or profile from the machine, test
    credentials, ``aws_region`` as the default region."""
    fake_aws_env(monkeypatch)
    monkeypatch.setenv("AWS_DEFAULT_REGION", aws_region)
    with mock_aws():
        yield


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
