"""``coreburst burst status`` from what Slurm 22.05 printed on the lab (tests/fixtures/status/,
recorded: see its README), its metrics as prometheus_client exposes and parses them, the spend
part against a real guardrails SQLite state, missing sources, --watch, the CLI's bad input, and
the Grafana dashboard against the metric names the product exports."""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from coreburst.burst import status as st
from coreburst.burst.cli import app
from coreburst.burst.commitments import SpendLedger
from coreburst.burst.holds import read_events
from coreburst.common.slurmcmd import SlurmError
from guardrails.adapters.slurm import parse_nodes
from guardrails.metrics import Metrics
from guardrails.stores.sqlite import State

ROOT = Path(__file__).resolve().parents[3]
FIX = ROOT / "tests" / "fixtures" / "status"
DASHBOARD = ROOT / "docs" / "grafana" / "burst-status.json"
# 7 s after the last recorded event (2026-12-05T06:56:37Z)
NOW = datetime.fromtimestamp(1796453805, UTC)
ICE = "InsufficientInstanceCapacity"


@pytest.fixture(autouse=True)
def _utc() -> Iterator[None]:
    """The recording's scontrol printed local times in UTC (its README)."""
    old = os.environ.get("TZ")
    os.environ["TZ"] = "UTC"
    time.tzset()
    yield
    if old is None:
        os.environ.pop("TZ")
    else:
        os.environ["TZ"] = old
    time.tzset()


def _recorded(**over: Any) -> st.Inputs:
    nodes = parse_nodes((FIX / "scontrol-show-nodes.txt").read_text())
    orphan = st.Instance("i-0a1b2c3d4e5f60718", "running", NOW - timedelta(minutes=3), None)
    args: dict[str, Any] = dict(
        stack="lab",
        now=NOW,
        nodes=nodes,
        reservations=st.parse_reservations((FIX / "scontrol-show-reservation.txt").read_text()),
        instances=[orphan],
        events=read_events(FIX / "burst-audit.jsonl"),
        jobs=st.pending_jobs((FIX / "squeue.json").read_text(), {"burst", "spot", "block"}),
        spend=[],
        unknown={},
    )
    return st.Inputs(**(args | over))


def _scrape(doc: dict[str, Any]) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    m = Metrics()  # the daemon's registry, as the burst-reconcile rule sets it
    m.burst_status.set(st.families(doc))
    text = generate_latest(m.registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
        if s.name.startswith("coreburst_burst_")
    }


def test_the_recorded_scene_reads_as_an_operator_needs_it() -> None:
    doc = st.build(_recorded())
    sp = doc["pools"]["sp"]
    assert sp["nodes"]["idle~"] == 1
    (hold,) = sp["holds"]
    assert hold == {
        "reservation": "coreburst-backoff-sp-1796453794801",
        "kind": "backoff",
        "nodes": "sp-1",
        "code": ICE,
        "error_class": "capacity",
        "why": f"{ICE} (capacity)",
        "until": "2026-12-05T07:06:34Z",  # the reservation's EndTime
    }
    assert sp["backoffs"] == [
        {
            "instance_type": "p5.48xlarge",
            "zone": "us-east-1a",
            "code": ICE,
            "until": "2026-12-05T07:06:34Z",
        }
    ]
    assert doc["jobs"] == [
        {
            "job": "1",
            "user": "root",
            "partition": "spot",
            "reason": "BeginTime",
            "note": f"coreburst: burst launch for sp-1 failed ({ICE}: capacity); requeued "
            "2026-12-05 06:56:34Z",
        }
    ]
    assert [(e["event"], e["nodes"], e["code"]) for e in doc["events"]] == [
        ("health.failed", "od-1", None),
        ("resume.failed", "sp-1", ICE),
        ("resume.launched", "od-1", None),
    ]
    assert doc["orphan_instances"][0]["why"] == "no Slurm node tag"
    assert doc["orphan_instances"][0]["age_s"] == 180
    assert doc["nodes_without_instance"] == []
    text = st.render(doc)
    assert text.splitlines()[0] == "burst status of stack lab at 2026-12-05T06:56:45Z"
    assert (
        f"  HELD (backoff {ICE}) by coreburst-backoff-sp-1796453794801 on sp-1: {ICE} "
        "(capacity), until 2026-12-05T07:06:34Z (9 min left)"
    ) in text
    assert f"  backed off p5.48xlarge in us-east-1a: {ICE}, until 2026-12-05T07:06:34Z" in text
    assert "  od-1 idle~: coreburst: health check failed: dcgm: dcgmi diag -r 1" in text
    assert "  job 1 (root, spot): BeginTime; coreburst: burst launch for sp-1 failed" in text
    assert (
        "instance with no node: i-0a1b2c3d4e5f60718 (running, 3 min old): no Slurm node tag" in text
    )
    assert "{" not in text and "None" not in text  # for people: no reprs


def test_metrics_carry_the_documents_figures() -> None:
    doc = st.build(_recorded())
    got = _scrape(doc)
    resv = "coreburst-backoff-sp-1796453794801"
    labels = (("code", ICE), ("kind", "backoff"), ("pool", "sp"), ("reservation", resv))
    assert got[("coreburst_burst_pool_hold", labels)] == 1
    assert (
        got[("coreburst_burst_pool_hold_until_timestamp_seconds", labels)]
        == datetime(2026, 12, 5, 7, 6, 34, tzinfo=UTC).timestamp()
    )
    assert got[("coreburst_burst_nodes", (("pool", "od"), ("state", "idle~")))] == 2
    assert got[("coreburst_burst_nodes", (("pool", "od"), ("state", "down")))] == 0
    assert (
        got[("coreburst_burst_pending_jobs", (("partition", "spot"), ("reason", "BeginTime")))] == 1
    )
    key = (("code", ICE), ("event", "resume.failed"), ("pool", "sp"))
    assert got[("coreburst_burst_events_last_24h", key)] == 1
    assert got[("coreburst_burst_orphan_instances", ())] == 1
    assert got[("coreburst_burst_status_timestamp_seconds", ())] == NOW.timestamp()
    assert not [k for k in got if k[0] == "coreburst_burst_status_unknown"]
    names = {k[0] for k in got}
    assert names <= set(st.METRICS)


@pytest.mark.parametrize(
    ("state", "want"),
    [  # as scontrol -o show node prints them (slurm.conf(5), scontrol(1); 22.05)
        ("IDLE+CLOUD+POWERED_DOWN", "idle~"),
        ("IDLE+CLOUD+MAINTENANCE+POWERED_DOWN+RESERVED", "idle~"),
        ("ALLOCATED+CLOUD+POWERING_UP", "launching"),
        ("MIXED+CLOUD", "up"),
        ("IDLE+CLOUD", "up"),
        ("IDLE+CLOUD+DRAIN", "draining"),
        ("ALLOCATED+CLOUD+DRAIN", "draining"),
        ("IDLE+CLOUD+POWERING_DOWN", "powering-down"),
        ("DOWN+CLOUD+POWERED_DOWN", "down"),
        ("IDLE+CLOUD+NOT_RESPONDING", "down"),
        ("DOWN+CLOUD+POWERING_DOWN", "down"),
    ],
)
def test_node_states(state: str, want: str) -> None:
    node = parse_nodes(f"NodeName=od-1 State={state} Partitions=burst")["od-1"]
    assert st.node_state(node.states) == want


def test_an_unlimited_hold_has_no_end_and_a_node_without_instance_is_named() -> None:
    resv = st.parse_reservations(
        "ReservationName=coreburst-protect-od StartTime=2026-12-05T06:00:00 "
        "EndTime=2027-12-05T06:00:00 Duration=UNLIMITED Nodes=od-[1-2] Flags=MAINT\n"
        "ReservationName=site-maint StartTime=x EndTime=y Duration=1:00:00 Nodes=core1\n"
    )
    assert [r.name for r in resv] == ["coreburst-protect-od"]
    nodes = parse_nodes("NodeName=od-2 State=ALLOCATED+CLOUD Partitions=burst\n")
    doc = st.build(_recorded(reservations=resv, nodes=nodes, instances=[]))
    (hold,) = doc["pools"]["od"]["holds"]
    assert hold["until"] is None and hold["kind"] == "protect"
    assert "until an operator lifts it" in st.render(doc)
    assert doc["nodes_without_instance"] == [{"node": "od-2", "pool": "od", "state": "up"}]
    assert "node with no instance: od-2 (up)" in st.render(doc)
    got = _scrape(doc)
    assert not [k for k in got if k[0] == "coreburst_burst_pool_hold_until_timestamp_seconds"]
    assert got[("coreburst_burst_nodes_without_instance", (("pool", "od"),))] == 1


def test_a_backoff_is_gone_once_over_or_released() -> None:
    events = read_events(FIX / "burst-audit.jsonl")
    later = st.build(_recorded(now=NOW + timedelta(minutes=11)))
    assert later["pools"]["sp"]["backoffs"] == []
    released = [*events, {"ts": NOW.timestamp() - 1, "event": "operator.released", "pool": "sp"}]
    assert st.build(_recorded(events=released))["pools"]["sp"]["backoffs"] == []


def test_foreign_audit_lines_are_not_read(tmp_path: Path) -> None:
    log = tmp_path / "audit.jsonl"
    good = (FIX / "burst-audit.jsonl").read_text()
    log.write_text(
        good + '{"ts": 1796453800, "event": "resume.backoff", "pool": "sp", "seconds": "ten", '
        '"choices": "p5@a", "code": 7}\n'
        + '{"ts": 1796453800, "event": "resume.failed", "nodes": ["sp-1"], "code": "X"}\n'
        + '{"ts": 1796453800, "event": "resume.launched", "nodes": "sp-1", "instances": [1]}\n'
        + "[1, 2]\nnot json\n"
    )
    assert st.build(_recorded(events=read_events(log))) == st.build(_recorded())


def test_spend_committed_vs_limit_and_no_snapshot_is_unknown_not_zero(tmp_path: Path) -> None:
    state = State(tmp_path / "g.sqlite")
    try:
        ledger = SpendLedger(state, "account")
        assert ledger.reserve({"od-1": (55.04, 2.0)}, {"today": 1000.0}, NOW).ok
        rows = st.spend_rows([(state, "account", 1000.0, 20000.0)], NOW)
        assert rows[0]["committed_usd"] == 110.08
        assert rows[0]["unknown"].startswith("no spend snapshot for scope account")
        assert rows[0]["spent_usd"] is None and rows[0]["left_usd"] is None
        doc = st.build(_recorded(spend=rows))
        got = _scrape(doc)
        assert not [k for k in got if k[0] in ("coreburst_burst_spend_spent_usd",
                                                "coreburst_burst_spend_left_usd")]  # fmt: skip
        assert "spend account: $110.08 committed; spent unknown" in st.render(doc)
        state.add_spend(NOW, "account", burn=10, today=400.0, mtd=9000.0, proj=12000.0)
        (row,) = st.spend_rows([(state, "account", 1000.0, 20000.0)], NOW)
        assert row["spent_usd"] == {"today": 400.0, "this month": 9000.0}
        assert row["left_usd"] == {"today": 489.92, "this month": 10889.92}
        doc = st.build(_recorded(spend=[row]))
        assert (
            "spend account: today $400.00 spent + $110.08 committed of $1,000.00 ($489.92 left)"
            in st.render(doc)
        )
        got = _scrape(doc)
        scope = (("period", "today"), ("scope", "account"))
        assert got[("coreburst_burst_spend_left_usd", scope)] == 489.92
        assert got[("coreburst_burst_spend_committed_usd", (("scope", "account"),))] == 110.08
    finally:
        state.close()


class _DeadSlurm:
    def nodes(self) -> dict[str, Any]:
        raise SlurmError("scontrol --json show nodes timed out after 30s")

    def run(self, *args: str) -> str:
        raise SlurmError("scontrol -o show reservation timed out after 30s")

    def squeue(self, *args: str) -> str:
        raise AssertionError("not read without nodes")


class _DeadEc2:
    def get_paginator(self, name: str) -> Any:
        raise ConnectionError("Could not connect to the endpoint URL")


def test_what_cannot_be_read_is_unknown_never_empty(tmp_path: Path) -> None:
    bad = tmp_path / "audit.jsonl"
    bad.write_bytes(b"\xff\xfe not text")
    src = st.Sources("lab", _DeadSlurm(), [_DeadEc2()], bad)
    doc = st.read(src, NOW)
    assert set(doc["unknown"]) == {"slurm nodes", "slurm reservations", "ec2", "audit log"}
    assert doc["nodes"] is None and doc["orphan_instances"] is None and doc["events"] is None
    text = st.render(doc)
    assert "  UNKNOWN ec2: DescribeInstances: ConnectionError: Could not connect" in text
    assert "UNKNOWN slurm nodes: scontrol --json show nodes timed out after 30s" in text
    got = _scrape(doc)
    assert got[("coreburst_burst_status_unknown", (("source", "ec2"),))] == 1
    assert ("coreburst_burst_orphan_instances", ()) not in got  # unknown, not 0


def test_watch_prints_count_times_and_stops_on_interrupt() -> None:
    printed: list[str] = []
    slept: list[float] = []
    n = st.watch(lambda: "x", printed.append, interval_s=5, count=3, sleep=slept.append)
    assert (n, printed, slept) == (3, ["x", "x", "x"], [5, 5])

    def interrupted(_s: float) -> None:
        raise KeyboardInterrupt

    assert st.watch(lambda: "y", printed.append, interval_s=5, count=None, sleep=interrupted) == 1


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--format", "xml"], "error: --format 'xml': use text or json"),
        (["--watch", "--interval", "0"], "error: --interval 0: give at least 1 second"),
        (["--count", "2"], "error: --count goes with --watch"),
        (["--watch", "--count", "0"], "error: --count 0: give at least 1"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], said: str, tmp_path: Path) -> None:
    out = CliRunner().invoke(app, ["status", "--stack", "burst", "--stack-dir", str(ROOT), *args])
    assert out.exit_code == 2
    assert out.output.strip() == said


def test_unknown_stack_is_one_line(tmp_path: Path) -> None:
    out = CliRunner().invoke(app, ["status", "--stack", "nope", "--stack-dir", str(tmp_path)])
    assert out.exit_code == 2 and out.output.startswith("error: no stack 'nope'")
    assert len(out.output.strip().splitlines()) == 1


def _exported() -> set[str]:
    """Every metric name the daemon's registry exposes (the burst status families included),
    with the suffixes the exposition gives counters and histograms."""
    m = Metrics()
    m.burst_status.set(st.families(st.build(_recorded())))
    names: set[str] = set()
    for fam in m.registry.collect():
        names.add(fam.name)
        if fam.type == "counter":
            names.add(fam.name + "_total")
        if fam.type == "histogram":
            names |= {fam.name + s for s in ("_bucket", "_sum", "_count")}
    return names


def test_the_grafana_dashboard_uses_only_exported_metrics_and_shows_every_status_figure() -> None:
    dash = json.loads(DASHBOARD.read_text())
    exported = _exported()
    used: set[str] = set()
    for panel in dash["panels"]:
        assert panel["targets"], panel["title"]
        for t in panel["targets"]:
            found = set(re.findall(r"\bcoreburst_[a-z0-9_]+\b", t["expr"]))
            assert found, (panel["title"], t["expr"])
            assert found <= exported, (panel["title"], found - exported)
            used |= found
    assert set(st.METRICS) <= used, set(st.METRICS) - used
    assert "coreburst_guardrails_idle_gpus" in used
