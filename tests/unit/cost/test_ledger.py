"""Dollars per group (coreburst/cost/ledger.py): the recorded lab's jobs and burst audit log,
the idle core and idle burst rows, rows that add up to the totals to the cent, unpriced never
$0, unknown capacity never idle."""

from __future__ import annotations

import itertools
from dataclasses import replace
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coreburst.common.catalog import load_catalog
from coreburst.cost.accounting import AccountingError, JobRecord, parse_sacct_json
from coreburst.cost.capacity import CoreCapacity
from coreburst.cost.ledger import BurstNode, apportion, build_ledger, instance_lifetimes

HERE = Path(__file__).resolve().parent
FIXTURES = HERE.parents[1] / "fixtures" / "slurm"
NOW = 1796346600
JOBS = parse_sacct_json((FIXTURES / "sacct-22.05-recorded.json").read_bytes(), NOW)
AUDIT = (HERE / "burst-audit-recorded.jsonl").read_text()
P5 = Decimal(repr(load_catalog().on_demand_price("p5.48xlarge", "us-east-1")))
OD1 = {"od-1": BurstNode("od", "p5.48xlarge", "on-demand", 8, P5, "catalog")}
RATE = Decimal("2.35")
# The recorded jobs' core (core1, core2: 8 GPUs each, as the lab's scontrol says), slurmdbd's
# records from 200 s before NOW, core2 drained for a minute around the burst jobs.
CORE = CoreCapacity(
    gpus={"core1": 8, "core2": 8},
    unknown={},
    out_of_service={"core2": [(1796346500, 1796346560)]},
    recorded_from=NOW - 200,
    source="test",
)


def test_recorded_audit_log_lifetime() -> None:
    # resume.launched at 1796346527.691, suspend at 1796346567.54: whole seconds
    assert instance_lifetimes(AUDIT, 0, NOW) == {"od-1": [(1796346527, 1796346567)]}
    # clipped to a window, and an instance still running at the end is billed to the end
    assert instance_lifetimes(AUDIT, 1796346537, 1796346547) == {"od-1": [(1796346537, 1796346547)]}
    launch_only = AUDIT.splitlines()[1]
    assert instance_lifetimes(launch_only, 0, 1796346627) == {"od-1": [(1796346527, 1796346627)]}


def test_malformed_audit_line_is_named() -> None:
    with pytest.raises(AccountingError, match="log line 2: not an audit record"):
        instance_lifetimes(AUDIT.splitlines()[0] + "\n{torn", 0, NOW)


def test_recorded_lab_by_team() -> None:
    led = build_ledger(
        JOBS, since=NOW - 200, until=NOW, now=NOW, by="team", core_rate=RATE,
        burst_nodes=OD1, lifetimes=instance_lifetimes(AUDIT, 0, NOW), core=CORE,
    )  # fmt: skip
    rows = {r.group: r for r in led.rows}
    ml, research = rows["ml"], rows["research"]
    assert ml.core_gpu_s == 8 * 3 and research.core_gpu_s == 0
    assert (ml.burst_gpu_s, research.burst_gpu_s) == (4 * 5, 4 * 3)
    assert ml.core_cents == round(Fraction(24) * Fraction(RATE) / 3600 * 100)  # $0.0157 -> 2 c
    # od-1 ran 40 s x 8 GPUs; jobs used 32 GPU-s of 320; the rest is idle
    assert led.idle.burst_gpu_s == 40 * 8 - 32
    assert led.instance_gpu_s == {"od-1": 320}
    instance_usd = Fraction(40) * Fraction(P5) / 3600  # $0.6116
    assert led.total("burst_cents") == round(instance_usd * 100) == 61
    # shares by time x GPUs: ml 20/320, research 12/320, idle 288/320 of the instance's cost
    assert abs(ml.burst_usd - instance_usd * Fraction(20, 320)) == 0
    assert led.idle.burst_usd == instance_usd * Fraction(288, 320)
    assert sum(r.burst_cents for r in led.all_rows) == 61
    assert not led.notes
    # the core: core1 8 GPUs x 200 s less job 1's 24 GPU-s; core2 8 x (200 - 60 s drained)
    assert led.idle_core.core_gpu_s == (8 * 200 - 24) + 8 * 140
    assert led.idle_core.core_cents == round(Fraction(2696) * Fraction(RATE) / 3600 * 100) == 176
    assert led.idle_core_by_node["core2"]["out_of_service_h"] == round(60 / 3600, 4)
    assert led.total("core_cents") == ml.core_cents + 176


def _core_ledger(core: CoreCapacity | None, jobs: list[JobRecord] = JOBS) -> Any:
    return build_ledger(
        jobs, since=0, until=NOW, now=NOW, by="team", core_rate=RATE, burst_nodes=OD1,
        lifetimes=instance_lifetimes(AUDIT, 0, NOW), core=core,
    )  # fmt: skip


def test_gpus_held_while_draining_are_not_taken_twice() -> None:
    # core1 drains while job 1 (8 GPUs, 1796346525..528) runs, and stays out 10 s more
    core = replace(CORE, out_of_service={"core1": [(1796346526, 1796346538)]})
    led = _core_ledger(core)
    # in service 200 - 12 s; job 1 held 8 GPUs 1 s of that (525..526)
    assert led.idle_core_by_node["core1"]["idle_gpu_h"] == round((8 * 188 - 8) / 3600, 4)
    assert led.idle_core.core_gpu_s == (8 * 188 - 8) + 8 * 200


def test_unknown_capacity_is_never_idle() -> None:
    unreadable = replace(
        CORE, gpus={"core1": None, "core2": 8}, unknown={"core1": "node core1: GRES 'x' unreadable"}
    )
    led = _core_ledger(unreadable)
    assert set(led.idle_core_by_node) == {"core2"} and led.idle_core.core_gpu_s == 8 * 140
    assert "core1" in led.core_unknown
    assert any("GRES 'x' unreadable" in n for n in led.notes)
    # a node the jobs ran on that scontrol no longer lists
    gone = replace(CORE, gpus={"core2": 8})
    assert "scontrol does not list it" in _core_ledger(gone).core_unknown["core1"]
    # more GPU-seconds held than the node had: the records disagree, no idle figure
    small = replace(CORE, gpus={"core1": 0, "core2": 8})
    assert "more than its 0 GPUs" in _core_ledger(small).core_unknown["core1"]
    # no cluster record in slurmdbd at all
    blind = replace(CORE, recorded_from=None)
    assert _core_ledger(blind).idle_core.core_gpu_s == 0
    assert len(_core_ledger(blind).core_unknown) == 2


def test_no_capacity_is_an_unknown_row_left_out_of_the_totals() -> None:
    led = _core_ledger(None)
    assert led.idle_core.unknown and led.idle_core.core_gpu_s == 0
    assert any("idle core GPU-hours are unknown" in n for n in led.notes)
    assert led.total("core_cents") == sum(r.core_cents or 0 for r in led.rows)


def test_capacity_counts_only_from_slurmdbd_records() -> None:
    late = replace(CORE, recorded_from=NOW - 50, out_of_service={})
    led = _core_ledger(late)
    # core1's job (before the records) is outside the counted span: 50 s x 8 GPUs per node
    assert led.idle_core.core_gpu_s == 2 * 8 * 50
    assert any("slurmdbd has the cluster only from" in n for n in led.notes)


def test_teams_mapping_and_other_groupings() -> None:
    kw = dict(since=0, until=NOW, now=NOW, core_rate=RATE, burst_nodes=OD1, lifetimes=None)
    led = build_ledger(JOBS, by="team", teams={"ml": "vision", "research": "vision"}, **kw)  # type: ignore[arg-type]
    assert [r.group for r in led.rows] == ["vision"] and len(led.rows[0].jobs) == 3
    assert [r.group for r in build_ledger(JOBS, by="partition", **kw).rows] == ["burst", "core"]  # type: ignore[arg-type]
    assert {r.group for r in build_ledger(JOBS, by="job", **kw).rows} == {"1", "2", "3"}  # type: ignore[arg-type]
    assert [r.group for r in build_ledger(JOBS, by="user", **kw).rows] == ["root"]  # type: ignore[arg-type]


def test_no_audit_log_means_idle_unknown_not_zero() -> None:
    led = build_ledger(
        JOBS, since=0, until=NOW, now=NOW, by="team", core_rate=RATE, burst_nodes=OD1,
        lifetimes=None,
    )  # fmt: skip
    assert led.idle.burst_gpu_s == 0 and led.instance_gpu_s == {}
    assert led.idle.unknown  # shown as unknown and left out of the totals, never $0.00
    assert led.total("burst_cents") == sum(r.burst_cents for r in led.rows)
    assert any("idle burst instance-hours are unknown (not zero)" in n for n in led.notes)


def test_jobs_are_clipped_to_their_instance_and_never_bill_more() -> None:
    # the recorded jobs 2 (1796346554..557) and 3 (..559) on od-1, against an instance that
    # lived 2 s of that (555..557): Slurm's records run 1 s and 3 s past it
    short = {"od-1": [(1796346555, 1796346557)]}
    led = build_ledger(
        JOBS, since=0, until=NOW, now=NOW, by="job", core_rate=RATE, burst_nodes=OD1,
        lifetimes=short,
    )  # fmt: skip
    billed = Fraction(2) * Fraction(P5) / 3600  # 2 s of p5.48xlarge
    rows = {r.group: r for r in led.rows}
    assert rows["2"].burst_gpu_s == rows["3"].burst_gpu_s == 4 * 2
    assert sum((r.burst_usd for r in led.all_rows), start=Fraction(0)) == billed
    assert led.total("burst_cents") == round(billed * 100)
    assert led.idle.burst_gpu_s == 0 and not led.idle.unknown  # the jobs held all 8 GPUs
    (note,) = [n for n in led.notes if "outside its instance" in n]
    assert "2 job run(s) on od-1 (2, 3)" in note and "4 s outside" in note
    assert led.instances["od-1"]["jobs"] == ["2", "3"]
    assert led.instances["od-1"]["clipped_s"] == {"2": 1, "3": 3}


def test_the_issue_case_84_s_recorded_on_an_instance_that_lived_53_85_s() -> None:
    """Issue 33: two 4-GPU jobs kept in CONFIGURING on a node that never registered are
    recorded 84 s each; the audit log (resume.launched .. resume-fail, the resume program's
    events, coreburst/burst/power.py) says the instance lived 53.85 s. Made-up records in
    the recorded layouts (sacct-22.05-recorded.json's fields, burst-audit-recorded.jsonl's)."""
    t = 1796346600
    audit = (
        f'{{"event": "resume.launched", "instances": ["i-1"], "nodes": "od-1", "ts": {t}.10}}\n'
        f'{{"event": "resume-fail", "instances": ["i-1"], "nodes": "od-1", "ts": {t + 53}.95}}\n'
    )
    recs = [
        JobRecord(j, "ann", a, "burst", "burstlab", ("od-1",), 4, t, t + 84, "NODE_FAIL")
        for j, a in (("41", "ml"), ("42", "research"))
    ]
    led = build_ledger(
        recs, since=t - 100, until=t + 200, now=t + 300, by="team", core_rate=RATE,
        burst_nodes=OD1, lifetimes=instance_lifetimes(audit, t - 100, t + 200), core=None,
    )  # fmt: skip
    # whole seconds of the audit log: 53 s x 8 GPUs, what the jobs are charged in all
    billed = Fraction(53) * Fraction(P5) / 3600
    assert sum((r.burst_usd for r in led.rows), start=Fraction(0)) == billed  # not x 84/53
    assert sum(r.burst_cents for r in led.rows) == round(billed * 100) == 81
    assert all(r.burst_gpu_s == 4 * 53 for r in led.rows)
    assert any("2 job run(s) on od-1 (41, 42)" in n and "62 s outside" in n for n in led.notes)


def test_jobs_on_a_node_the_audit_log_never_launched_leave_idle_unknown() -> None:
    led = build_ledger(
        JOBS, since=0, until=NOW, now=NOW, by="team", core_rate=RATE, burst_nodes=OD1,
        lifetimes={},
    )  # fmt: skip
    assert led.idle.unknown and led.total("burst_cents") == sum(r.burst_cents for r in led.rows)
    assert any("no instance there" in n and "od-1" in n for n in led.notes)


def test_more_gpus_held_than_the_instance_has_share_its_cost() -> None:
    # 16 GPUs of jobs on an 8-GPU instance at once (records that disagree)
    t = 1796346600
    recs = [JobRecord(j, "u", "ml", "p", "c", ("od-1",), 8, t, t + 10, "COMPLETED") for j in "ab"]
    led = build_ledger(
        recs, since=t, until=t + 10, now=t + 10, by="job", core_rate=RATE, burst_nodes=OD1,
        lifetimes={"od-1": [(t, t + 10)]},
    )  # fmt: skip
    billed = Fraction(10) * Fraction(P5) / 3600
    assert sum((r.burst_usd for r in led.rows), start=Fraction(0)) == billed
    assert any("more GPUs at once" in n for n in led.notes)


def test_unknown_prices_are_unpriced_never_zero() -> None:
    unpriced = {"od-1": BurstNode("od", "p9.99xlarge", "on-demand", 8, None, "no price")}
    led = build_ledger(
        JOBS, since=0, until=NOW, now=NOW, by="team", core_rate=None, burst_nodes=unpriced,
        lifetimes=instance_lifetimes(AUDIT, 0, NOW),
    )  # fmt: skip
    rows = {r.group: r for r in led.rows}
    assert rows["ml"].core_cents is None and rows["ml"].total_cents is None
    assert (rows["ml"].unpriced_gpu_s, rows["ml"].burst_gpu_s) == (20, 0)
    assert led.idle.unpriced_gpu_s == 288 and led.idle.burst_gpu_s == 0
    assert led.total("core_cents") is None


def test_apportion_keeps_the_total() -> None:
    assert apportion(100, [Fraction(1, 3)] * 3) == [34, 33, 33]
    assert apportion(0, [Fraction(0)]) == [0]
    # floors over the total: a cent comes off a part that has one
    assert apportion(1, [Fraction(1, 100), Fraction(1, 100)]) == [1, 0]
    assert apportion(0, [Fraction(0), Fraction(1, 100)]) == [0, 0]


_jobs = st.lists(
    st.tuples(
        st.sampled_from(["a", "b", "c", "d"]),
        st.sampled_from([("core1",), ("core1", "core2"), ("od-1",), ("od-1", "od-2"), ("sp-1",)]),
        st.integers(0, 16),
        st.integers(0, 10_000),
        st.integers(1, 400_000),
    ),
    max_size=30,
)


_spans = st.lists(
    st.tuples(st.integers(0, 400_000), st.integers(0, 100_000)).map(lambda t: (t[0], t[0] + t[1])),
    max_size=4,
)


def _idle_by_sweep(
    gpus: int, out: list[tuple[int, int]], jobs: list[JobRecord], node: str, window: tuple[int, int]
) -> Fraction:
    """Idle GPU-seconds of one node by another route: cut [lo, hi) at every event and job
    boundary and add up each piece that is in service (GPUs - what jobs held there)."""
    lo, hi = window
    mine = [j for j in jobs if node in j.nodes]
    cuts = sorted(
        {lo, hi}
        | {t for a, b in out for t in (a, b) if lo < t < hi}
        | {t for j in mine for t in j.span(600_000) if lo < t < hi}
    )
    idle = Fraction(0)
    for a, b in itertools.pairwise(cuts):
        if any(x <= a and b <= y for x, y in out):
            continue
        busy = sum(
            (j.gpus_per_node for j in mine if j.span(600_000)[0] <= a and b <= j.span(600_000)[1]),
            start=Fraction(0),
        )
        idle += (gpus - busy) * (b - a)
    return idle


@settings(max_examples=150, deadline=None)
@given(
    jobs=_jobs,
    rate=st.decimals("0.01", "9.99", places=4),
    p=st.decimals("0.5", "120", places=5),
    core_gpus=st.tuples(st.integers(0, 16), st.integers(0, 16)),
    outs=st.tuples(_spans, _spans),
    recorded_from=st.integers(0, 100_000),
)
def test_rows_add_up_to_totals_to_the_cent(  # noqa: PLR0917
    jobs: list[tuple[str, tuple[str, ...], int, int, int]],
    rate: Decimal,
    p: Decimal,
    core_gpus: tuple[int, int],
    outs: tuple[list[tuple[int, int]], list[tuple[int, int]]],
    recorded_from: int,
) -> None:
    nodes = {
        "od-1": BurstNode("od", "p5.48xlarge", "on-demand", 8, p, "x"),
        "od-2": BurstNode("od", "p5.48xlarge", "on-demand", 8, p, "x"),
        "sp-1": BurstNode("sp", "p5.48xlarge", "spot", 8, p / 3, "x"),
    }
    recs = [
        JobRecord(str(i), "u", acct, "p", "c", ns, gpus, start, start + dur, "COMPLETED")
        for i, (acct, ns, gpus, start, dur) in enumerate(jobs)
    ]
    lifetimes = {n: [(0, 500_000)] for n in nodes}
    core = CoreCapacity(
        gpus={"core1": core_gpus[0], "core2": core_gpus[1]},
        unknown={},
        out_of_service={"core1": outs[0], "core2": outs[1]},
        recorded_from=recorded_from,
        source="x",
    )
    led = build_ledger(
        recs, since=5_000, until=300_000, now=600_000, by="account", core_rate=rate,
        burst_nodes=nodes, lifetimes=lifetimes, core=core,
    )  # fmt: skip
    burst_exact = sum((r.burst_usd for r in led.all_rows), start=Fraction(0))
    total_burst = led.total("burst_cents")
    assert sum(r.burst_cents for r in led.all_rows) == total_burst
    # every row within a cent of its exact dollars (a whole cent only when one is taken off a
    # row in whole cents), and the idle row the same under another --by
    assert all(
        abs(Fraction(r.burst_cents, 100) - r.burst_usd) <= Fraction(1, 100) for r in led.all_rows
    )
    by_job = build_ledger(
        recs, since=5_000, until=300_000, now=600_000, by="job", core_rate=rate,
        burst_nodes=nodes, lifetimes=lifetimes, core=core,
    )  # fmt: skip
    assert by_job.idle.burst_cents == led.idle.burst_cents
    assert by_job.total("burst_cents") == total_burst
    assert abs(Fraction(total_burst, 100) - burst_exact) <= Fraction(1, 200)
    # when every job fits in its nodes' lifetimes, burst = instance-hours x price exactly
    if not any("more GPUs at once" in n for n in led.notes):
        inst = sum(
            Fraction(s) * Fraction(nodes[n].usd_per_hour or 0) / (8 * 3600)
            for n, s in led.instance_gpu_s.items()
        )
        assert burst_exact == inst
    # core: the idle core cell is its own GPU-hours x rate, to the cent; the groups share the
    # rest of the column's total, each within a cent; one total whatever --by
    per_h = Fraction(rate) / 3600
    assert led.idle_core.core_cents == round(led.idle_core.core_gpu_s * per_h * 100)
    assert all(abs(Fraction(r.core_cents or 0, 100) - r.core_gpu_s * per_h) <= Fraction(1, 100)
               for r in led.rows)  # fmt: skip
    exact_core = sum((r.core_gpu_s for r in led.all_rows), start=Fraction(0)) * per_h
    assert led.total("core_cents") == round(exact_core * 100)
    assert by_job.total("core_cents") == led.total("core_cents")
    assert by_job.idle_core.core_cents == led.idle_core.core_cents
    # the idle core: each node known or named unknown, and known ones agree with a sweep
    lo = max(5_000, recorded_from)
    idle_sum = Fraction(0)
    for i, node in enumerate(("core1", "core2")):
        swept = _idle_by_sweep(core_gpus[i], outs[i], recs, node, (lo, 300_000))
        if node in led.core_unknown:
            assert swept < 0 and node not in led.idle_core_by_node
        else:
            assert swept >= 0
            idle_sum += swept
    assert led.idle_core.core_gpu_s == idle_sum
