"""Per-job-run GPU usage (``record_core_usage`` / ``core_usage``) on both state stores: SQLite
and DynamoDB (on moto), the same suite as tests/unit/state."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from guardrails.stores.base import StateStore
from guardrails.stores.dynamodb import DynamoState, create_table
from guardrails.stores.sqlite import State

T0 = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


@pytest.fixture(params=["sqlite", "dynamodb"])
def store(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: Any) -> Iterator[Any]:
    if request.param == "sqlite":
        s = State(tmp_path / "state.sqlite")
        yield s
        s.close()
        return
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with mock_aws():
        table = create_table(boto3.resource("dynamodb", region_name="us-east-1"), "cb-state")
        yield DynamoState(table)


def _rec(store: StateStore, key: str, at: datetime, used: float | None, **kw: Any) -> None:
    store.record_core_usage(
        key, at, job_id=key.split(":", maxsplit=1)[0], user=kw.get("user", "ann"), account="ml",
        partition="core", start=T0, gpus=8, allocated_gpu_h=kw.get("alloc", 8.0),
        used_gpu_h=used, state=kw.get("state", "busy"),
    )  # fmt: skip


def test_a_run_is_one_record_updated_each_cycle(store: Any) -> None:
    assert isinstance(store, StateStore)
    _rec(store, "7:100", T0 + timedelta(hours=1), 2.0)
    _rec(store, "7:100", T0 + timedelta(hours=2), 5.0, alloc=16.0)
    _rec(store, "8:100", T0 + timedelta(hours=2), None, state="blind")
    rows = store.core_usage(T0)
    assert [r["run_key"] for r in rows] == ["7:100", "8:100"]
    first = rows[0]
    assert (first["allocated_gpu_h"], first["used_gpu_h"], first["gpus"]) == (16.0, 5.0, 8)
    assert first["last_seen"] == (T0 + timedelta(hours=2)).isoformat()
    assert first["start"] == T0.isoformat() and first["account"] == "ml"
    assert rows[1]["used_gpu_h"] is None and rows[1]["state"] == "blind"


def test_only_runs_seen_since_are_returned(store: Any) -> None:
    _rec(store, "1:1", T0, 1.0)
    _rec(store, "2:1", T0 + timedelta(days=3), 1.0)
    assert [r["job_id"] for r in store.core_usage(T0 + timedelta(days=1))] == ["2"]
