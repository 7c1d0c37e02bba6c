"""How busy each job's GPUs were, from DCGM where it was recorded (``--prometheus``).

A job's *GPU active* figure is the mean of ``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` (dcgm-exporter's
ratio 0..1 of time the graphics engine was busy) over the job's GPUs and its run, read from
Prometheus with the core-idle rule's client and label handling (``guardrails.adapters.dcgm``:
``hostname``/``Hostname``, ``gpu``, ``hpc_job``, exporter host to Slurm node). Only that
field is read: ``DCGM_FI_DEV_GPU_UTIL`` measures something else (any kernel running), so a GPU
without the profiling field is unmeasured, not guessed.

Which GPUs a job had: sacct keeps its GPU count, not their indices. So a job is measured on

* the GPUs whose series carry its id as ``hpc_job`` (exporters run with
  ``--hpc-job-mapping-dir``), else
* every GPU of its nodes when it held them all (its GPUs per node = the node's GPU count),

and is otherwise unmeasured (``None``): shown ``n/a``, never 0. So is a job where one of those
GPUs has no sample in its run (no series, a hole, a run shorter than the query's step).

Each group's figure is the GPU-seconds-weighted mean of its measured jobs, with the share of
its GPU-hours that were measured.

    >>> # prom = Prometheus("http://prometheus:9090")
    >>> # active, notes = measure_jobs(prom, jobs, gpus_of, since=t0, until=t1, now=t1)
    >>> # active[job]   # 0.62, or None
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from fractions import Fraction
from typing import Any

from coreburst.cost.accounting import JobRecord
from guardrails.adapters.dcgm import (
    GR_ENGINE_ACTIVE,
    Activity,
    node_selector,
    parse_series,
    step_for,
    to_nodes,
)
from guardrails.model import Series

NODES_PER_QUERY = 32  # keeps one answer well under the client's size cap on a big fleet
STEP_S = 15.0  # dcgm-exporter's default collection interval is 30 s; Prometheus often 15 s


def _mean_in(series: Series, lo: int, hi: int) -> tuple[float, int] | None:
    """(sum, count) of the points in [lo, hi], None when there are none."""
    vals = [
        v
        for t, v in zip(series.timestamps, series.values, strict=True)
        if lo <= t.timestamp() <= hi
    ]
    return (sum(vals), len(vals)) if vals else None


def activity(
    prom: Any,
    nodes: set[str],
    since: int,
    until: int,
    *,
    step_s: float = STEP_S,
    host_map: Mapping[str, str] | None = None,
) -> Activity:
    """``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` (ratio) of every GPU of ``nodes`` over the window,
    keyed by Slurm node, a range query per :data:`NODES_PER_QUERY` nodes. ``prom``:
    ``guardrails.adapters.dcgm.Prometheus``; raises its ``PrometheusError``."""
    host_map = host_map or {}
    start, end = datetime.fromtimestamp(since, UTC), datetime.fromtimestamp(until, UTC)
    step = step_for(start, end, step_s)
    out = Activity()
    ordered = sorted(nodes)
    for i in range(0, len(ordered), NODES_PER_QUERY):
        chunk = set(ordered[i : i + NODES_PER_QUERY])
        query = node_selector(GR_ENGINE_ACTIVE, chunk, host_map)
        series, jobs = parse_series(prom.query_range(query, start, end, step), 1.0)
        got = to_nodes(series, jobs, chunk, host_map)
        out.series.update(got.series)
        out.hpc_jobs.update(got.hpc_jobs)
        out.unmapped.update(got.unmapped)
    return out


def job_active(
    job: JobRecord, act: Activity, gpus_of: Mapping[str, int], *, since: int, until: int, now: int
) -> float | None:
    """The job's mean engine-active ratio over its run in the window, or None (unmeasured)."""
    start, end = job.span(now)
    lo, hi = max(start, since), min(end, until)
    if hi <= lo or job.gpus <= 0 or not job.nodes:
        return None
    labelled = [
        s for (node, _), per in act.hpc_jobs.items() if node in job.nodes
        for name, s in per.items() if name == job.job_id
    ]  # fmt: skip
    if labelled:
        picked = labelled
    else:
        if any(gpus_of.get(n) != job.gpus_per_node for n in job.nodes):
            return None  # it held some of a node's GPUs: which ones, sacct does not say
        picked = []
        for node in job.nodes:
            for gpu in range(gpus_of[node]):
                s = act.series.get((node, gpu))
                if s is None:
                    return None
                picked.append(s)
    means = []
    for s in picked:
        got = _mean_in(s, lo, hi)
        if got is None:
            return None
        means.append(got[0] / got[1])
    return sum(means) / len(means)


def measure_jobs(
    prom: Any,
    jobs: Iterable[JobRecord],
    gpus_of: Mapping[str, int],
    *,
    since: int,
    until: int,
    now: int,
    step_s: float = STEP_S,
    host_map: Mapping[str, str] | None = None,
) -> tuple[dict[JobRecord, float | None], list[str]]:
    """Each job run's engine-active ratio (None: unmeasured), and notes."""
    runs = [j for j in jobs if j.seconds(since, until, now) > 0 and j.gpus > 0 and j.nodes]
    nodes = {n for j in runs for n in j.nodes}
    if not nodes:
        return {}, []
    act = activity(prom, nodes, since, until, step_s=step_s, host_map=host_map)
    out = {j: job_active(j, act, gpus_of, since=since, until=until, now=now) for j in runs}
    notes = [f"DCGM: {why}" for _, why in sorted(act.unmapped.items())]
    unmeasured = sum(1 for v in out.values() if v is None)
    if unmeasured:
        notes.append(
            f"DCGM: {unmeasured} of {len(out)} job run(s) unmeasured (n/a): no "
            f"{GR_ENGINE_ACTIVE} samples for all their GPUs over their run, or they held part "
            "of a node without hpc_job labels naming them"
        )
    return out, notes


def weighted(pairs: Iterable[tuple[Fraction, float | None]]) -> tuple[float | None, Fraction]:
    """(GPU-seconds-weighted mean of the measured ratios or None, measured GPU-seconds)."""
    measured = Fraction(0)
    active = Fraction(0)
    for gpu_s, ratio in pairs:
        if ratio is None or gpu_s <= 0:
            continue
        measured += gpu_s
        active += gpu_s * Fraction(ratio)
    return (float(active / measured) if measured else None), measured
