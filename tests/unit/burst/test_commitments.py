"""The spend gate's ledger (burst/ledger.py) under racing processes, on both state stores: the
daemon's SQLite file and DynamoDB (moto server on 127.0.0.1, a process of its own, so the
conditional PutItem is decided by the emulator, not by a lock of ours). Eight approvals that
each fit the limit alone, of which only three fit together, start at one barrier: three pass.
"""

from __future__ import annotations

import multiprocessing as mp
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest

from coreburst.burst.commitments import SpendLedger, remaining_usd
from coreburst.sandbox.emulator import MotoProcess
from guardrails.stores.dynamodb import DynamoState, create_table
from guardrails.stores.sqlite import State

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
RACERS = 8
RATE = 10.0  # $/h per node; 1 h each; 35 left: three fit
LEFT = {"today": 35.0, "this month": 1000.0}


@pytest.fixture(scope="module")
def moto_url() -> Iterator[str]:
    # one request at a time, so that a conditional PutItem is atomic as DynamoDB documents it
    # (moto_serial_server.py says why)
    m = MotoProcess(
        launcher=[sys.executable, str(Path(__file__).with_name("moto_serial_server.py"))]
    ).start()
    try:
        yield m.url
    finally:
        m.stop()


def _dynamo(url: str, table: str) -> DynamoState:
    ddb = boto3.resource(
        "dynamodb",
        region_name="us-east-1",
        endpoint_url=url,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    return DynamoState(ddb.Table(table))


def _open(kind: str, where: str) -> Any:
    return State(Path(where)) if kind == "sqlite" else _dynamo(*where.split("|"))


def _racer(kind: str, where: str, i: int, barrier: Any, out: Any) -> None:
    store = _open(kind, where)
    ledger = SpendLedger(store, "account")
    barrier.wait(30)
    r = ledger.reserve({f"od-{i}": (RATE, 1.0)}, LEFT, NOW, jobs=[str(100 + i)])
    out.put((i, r.ok))


def _race(kind: str, where: str) -> list[int]:
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(RACERS)
    out = ctx.Queue()
    procs = [ctx.Process(target=_racer, args=(kind, where, i, barrier, out)) for i in range(RACERS)]
    for p in procs:
        p.start()
    results = [out.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    return sorted(i for i, ok in results if ok)


@pytest.mark.parametrize("kind", ["sqlite", "dynamodb"])
def test_racing_approvals_never_commit_over_the_limit(
    kind: str, tmp_path: Path, moto_url: str, request: pytest.FixtureRequest
) -> None:
    if kind == "sqlite":
        where = str(tmp_path / "state.sqlite")
        State(Path(where)).close()  # schema first, as the daemon does
    else:
        table = f"state-{request.node.name[-12:].strip('[]')}-{tmp_path.name[-6:]}"
        ddb = boto3.resource(
            "dynamodb",
            region_name="us-east-1",
            endpoint_url=moto_url,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )
        create_table(ddb, table)
        where = f"{moto_url}|{table}"
    winners = _race(kind, where)
    assert len(winners) == 3, winners
    ledger = SpendLedger(_open(kind, where), "account")
    assert ledger.committed(NOW) == pytest.approx(3 * RATE)
    assert sorted(ledger.entries(NOW)) == sorted(f"od-{i}" for i in winners)


def test_commitment_shrinks_as_hours_pass_and_goes_on_release(tmp_path: Path) -> None:
    ledger = SpendLedger(State(tmp_path / "s.sqlite"), "account")
    assert ledger.reserve({"od-1": (RATE, 2.0), "od-2": (RATE, 1.0)}, LEFT, NOW).ok
    assert ledger.committed(NOW) == pytest.approx(30.0)
    assert ledger.committed(NOW + timedelta(minutes=30)) == pytest.approx(20.0)
    assert ledger.committed(NOW + timedelta(hours=1)) == pytest.approx(10.0)
    # od-1's job ended early: its node powered down.
    assert ledger.release(["od-1"], NOW + timedelta(minutes=30)) == pytest.approx(15.0)
    assert ledger.committed(NOW + timedelta(minutes=30)) == pytest.approx(5.0)
    # Room again for a request that did not fit before.
    r = ledger.reserve({"od-3": (RATE, 3.0)}, LEFT, NOW + timedelta(minutes=30))
    assert r.ok and r.committed_usd == pytest.approx(5.0)


def test_a_request_over_what_is_left_after_commitments_is_refused_with_the_sums(
    tmp_path: Path,
) -> None:
    ledger = SpendLedger(State(tmp_path / "s.sqlite"), "account")
    assert ledger.reserve({"od-1": (55.04, 1.0)}, {"today": 82.56}, NOW).ok
    r = ledger.reserve({"od-2": (55.04, 1.0)}, {"today": 82.56}, NOW + timedelta(seconds=3))
    assert not r.ok
    assert r.why == "$55 projected + $55 committed > $83 left today (account)"
    # The same node asked again (Slurm's retry) replaces its own entry: no double count.
    again = ledger.reserve({"od-1": (55.04, 1.0)}, {"today": 82.56}, NOW)
    assert again.ok and again.committed_usd == 0.0


def test_entry_remaining_is_never_negative() -> None:
    e = {"usd_per_hour": 10.0, "since": 0.0, "until": NOW.timestamp() - 60}
    assert remaining_usd(e, NOW) == 0.0
