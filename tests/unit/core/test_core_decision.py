"""The core-idle decision (``guardrails.rules.core_idle.assess``): pure, over plain series.

Missing data is blind, never idle; interactive and short jobs have their own thresholds;
exemptions expire; a job younger than its window is not judged.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest

from guardrails.adapters.dcgm import GpuKey
from guardrails.adapters.slurm import SlurmJob
from guardrails.configfile import parse_config
from guardrails.model import Series
from guardrails.rules.core_idle import CoreIdleConfig, assess, exemption, job_kind

NOW = datetime(2026, 12, 3, 12, tzinfo=UTC)
P = CoreIdleConfig()  # batch window 2h, interactive/short 30m, threshold 5 %, max_gap 5m


def job(
    gpus: dict[str, tuple[int, ...]] | None = None,
    *,
    ran: timedelta = timedelta(hours=3),
    interactive: bool = False,
    limit: timedelta | None = timedelta(days=1),
    comment: str = "",
    user: str = "ann",
) -> SlurmJob:
    return SlurmJob(
        "42", user, "ml", "core", NOW - ran, limit, gpus or {"n1": (0, 1)}, interactive, comment
    )


def flat(value: float, *, since: timedelta = timedelta(hours=4), every_s: int = 60) -> Series:
    n = int(since.total_seconds() // every_s)
    return Series.of((NOW - timedelta(seconds=i * every_s), value) for i in range(n, -1, -1))


def data(**by_gpu: Series) -> dict[GpuKey, Series]:
    return {("n1", int(k[1:])): s for k, s in by_gpu.items()}


def test_every_gpu_idle_for_the_window_is_idle_with_its_efficiency() -> None:
    d = data(g0=flat(0.0), g1=flat(2.0))
    a = assess(job(), d, d, NOW, P)
    assert a.state == "idle" and a.idle_gpus == ["n1 GPU 0", "n1 GPU 1"]
    assert a.efficiency_pct == pytest.approx(1.0)
    assert a.allocated_gpu_h == pytest.approx(6.0)  # 2 GPUs x 3 h
    assert a.used_gpu_h == pytest.approx(0.06)


def test_one_busy_gpu_makes_it_some_idle_and_all_busy_is_busy() -> None:
    d = data(g0=flat(0.0), g1=flat(90.0))
    assert assess(job(), d, d, NOW, P).state == "some-idle"
    d = data(g0=flat(50.0), g1=flat(90.0))
    a = assess(job(), d, d, NOW, P)
    assert a.state == "busy" and a.efficiency_pct == pytest.approx(70.0)


def test_a_spike_inside_the_window_is_not_idle() -> None:
    s = flat(0.0)
    s.values[-30] = 40.0  # half an hour ago
    d = data(g0=s, g1=flat(0.0))
    assert assess(job(), d, d, NOW, P).state == "some-idle"


def test_a_gpu_without_a_series_is_blind_never_idle() -> None:
    d = data(g0=flat(0.0))
    a = assess(job(), d, d, NOW, P)
    assert a.state == "blind" and a.reason == "n1 GPU 1: no DCGM data"
    assert a.efficiency_pct is None and a.used_gpu_h is None


def test_a_hole_longer_than_max_gap_is_blind() -> None:
    s = flat(0.0)
    hole = [
        i
        for i, t in enumerate(s.timestamps)
        if NOW - timedelta(minutes=50) < t < NOW - timedelta(minutes=40)
    ]
    for i in reversed(hole):
        del s.timestamps[i], s.values[i]
    d = data(g0=s, g1=flat(0.0))
    a = assess(job(), d, d, NOW, P)
    assert a.state == "blind" and "no DCGM data for 10m" in a.reason
    # Stale: the series stopped 10 minutes ago.
    d = data(
        g0=flat(0.0),
        g1=Series.of([(t, v) for t, v in flat(0.0).samples() if t < NOW - timedelta(minutes=10)]),
    )
    assert assess(job(), d, d, NOW, P).state == "blind"


def test_a_job_younger_than_its_window_is_not_judged() -> None:
    d = data(g0=flat(0.0), g1=flat(0.0))
    a = assess(job(ran=timedelta(hours=1)), d, d, NOW, P)
    assert a.state == "young" and "less than the batch window 2h" in a.reason


def test_interactive_and_short_jobs_have_their_own_thresholds() -> None:
    cfg = parse_config(
        "core_idle: {batch: {window: 6h}, interactive: {window: 30m, threshold_percent: 20},"
        " short: {window: 45m}, short_time_limit: 2h}"
    ).core_idle
    d = data(g0=flat(10.0), g1=flat(10.0))
    one_h = timedelta(hours=1)
    assert job_kind(job(interactive=True), cfg) == "interactive"
    assert assess(job(interactive=True, ran=one_h), d, d, NOW, cfg).state == "idle"  # < 20 %
    assert job_kind(job(limit=timedelta(hours=2)), cfg) == "short"
    assert assess(job(limit=timedelta(hours=2), ran=one_h), d, d, NOW, cfg).state == "busy"
    d0 = data(g0=flat(0.0), g1=flat(0.0))
    assert assess(job(limit=timedelta(hours=2), ran=one_h), d0, d0, NOW, cfg).state == "idle"
    assert assess(job(ran=one_h), d0, d0, NOW, cfg).state == "young"  # batch: 6 h window
    assert job_kind(job(limit=None), cfg) == "batch"  # no limit is not short


def test_exemptions_expire_and_are_capped() -> None:
    today = NOW.date()
    d = data(g0=flat(0.0), g1=flat(0.0))
    ok = job(comment=f"coreburst-exempt-until={today + timedelta(days=3)}")
    assert assess(ok, d, d, NOW, P).state == "exempt"
    expired = job(comment=f"coreburst-exempt-until={today - timedelta(days=1)}")
    assert assess(expired, d, d, NOW, P).state == "idle"
    too_far = job(comment=f"coreburst-exempt-until={today + timedelta(days=60)}")  # max 14 d
    assert exemption(too_far, P, today) is None
    assert exemption(job(comment="coreburst-exempt-until=soon"), P, today) is None
    cfg = parse_config(
        f"core_idle: {{exemptions: [{{user: ann, until: {today}}},"
        " {job: '7', until: 2026-01-01}]}"
    ).core_idle
    assert exemption(job(), cfg, today) == f"exempt until {today} by config (user)"
    assert exemption(job(), cfg, today + timedelta(days=1)) is None
    assert exemption(job(user="bob"), cfg, today) is None
    assert date(2026, 1, 1) < today
