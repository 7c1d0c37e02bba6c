"""``coreburst core report`` on the scheduled Lambda's DynamoDB state (``--state-table``, or
``COREBURST_STATE_TABLE`` as the Lambda has it), opened by ``guardrails.cli.open_store``: the
same rows give the same report as from SQLite. DynamoDB is moto's, in process (``mock_aws``),
with the table schema of ``guardrails.stores.dynamodb.create_table``; a missing table is moto's
``ResourceNotFoundException`` from DescribeTable, one line and exit 2."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import boto3
import pytest
from moto import mock_aws
from typer.testing import CliRunner

from coreburst.cli import app
from guardrails.stores.base import StateStore
from guardrails.stores.dynamodb import DynamoState, create_table
from guardrails.stores.sqlite import State

TABLE = "guardrails-state"
RUNS = [  # (job, account, user, allocated, used, seen hours ago)
    ("1", "ml", "ann", 300.0, 150.0, 1),
    ("2", "ml", "bob", 100.0, 98.4, 2),
    ("3", "ml", "bob", 12.0, None, 1),  # blind: unmeasured
    ("4", "vision", "cy", 50.0, 50.0, 30),
    ("9", "ml", "old", 999.0, 0.0, 24 * 9),  # outside --since 7d
]


def _fill(st: StateStore, now: datetime) -> None:
    for job, acct, user, alloc, used, ago in RUNS:
        st.record_core_usage(
            f"{job}:1", now - timedelta(hours=ago), job_id=job, user=user, account=acct,
            partition="core", start=now - timedelta(days=10), gpus=8, allocated_gpu_h=alloc,
            used_gpu_h=used, state="busy" if used is not None else "blind",
        )  # fmt: skip
    st.add_spend(now, "ml", burn=10.0, today=100.0, mtd=4210.0, proj=9000.0)


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    monkeypatch.delenv("COREBURST_STATE_TABLE", raising=False)
    with mock_aws():
        yield


@pytest.fixture
def cfg(tmp_path: Path, aws: None) -> Path:
    now = datetime.now(UTC)
    sqlite = State(tmp_path / "g.db")
    _fill(sqlite, now)
    sqlite.close()
    _fill(
        DynamoState(create_table(boto3.resource("dynamodb", region_name="eu-west-1"), TABLE)), now
    )
    path = tmp_path / "g.yaml"
    path.write_text(
        f'state: {{path: "{tmp_path}/g.db", audit_log: "{tmp_path}/a.jsonl"}}\n'
        "spend: {scopes: [{name: account}, {name: ml, tag_key: team, tag_value: ml}]}\n"
        "core_idle: {gpu_hour_usd: 1.9}\n"
    )
    return path


def _report(cfg: Path, *extra: str, env: dict[str, str] | None = None) -> str:
    r = CliRunner().invoke(
        app, ["core", "report", "--config", str(cfg), "--since", "7d", *extra], env=env
    )
    assert r.exit_code == 0, r.output
    return r.output


def _json(out: str) -> dict[str, object]:
    doc = json.loads(out)
    del doc["since"], doc["until"]  # the moment each report ran
    return doc  # type: ignore[no-any-return]


def test_the_dynamodb_state_gives_the_same_report_as_sqlite(cfg: Path) -> None:
    from_sqlite = _report(cfg, "--format", "json")
    from_dynamo = _report(cfg, "--format", "json", "--state-table", TABLE)
    assert _json(from_dynamo) == _json(from_sqlite)
    doc = _json(from_dynamo)
    assert [t["team"] for t in doc["teams"]] == ["ml", "vision"]  # type: ignore[attr-defined]
    assert doc["total"]["allocated_gpu_h"] == 462.0  # type: ignore[index]
    # The printed table and the team lines, too; the SQLite file is not read for it.
    table = _report(cfg, "--state-table", TABLE)
    assert table == _report(cfg)
    assert (
        "team ml: core 412 GPU-h at $1.90 = $783, burst $4,210 month-to-date; 38 % of the "
        "400 measured GPU-hours idle (12 GPU-h unmeasured)"
    ) in table
    (cfg.parent / "g.db").unlink()
    assert _report(cfg, env={"COREBURST_STATE_TABLE": TABLE}) == table


def test_a_missing_table_is_one_line(cfg: Path) -> None:
    r = CliRunner().invoke(app, ["core", "report", "--config", str(cfg), "--state-table", "nope"])
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert r.output.strip() == (
        "error: state table 'nope' (eu-west-1) does not exist; give the table the guardrails "
        "stack created (its state_table output) and its region (AWS_REGION)"
    )
    r = CliRunner().invoke(app, ["core", "report", "--config", str(cfg), "--state-table", "a"])
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1
    assert "state table 'a'" in r.output  # botocore: a table name has 3 to 255 characters
