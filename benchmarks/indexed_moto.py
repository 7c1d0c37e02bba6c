"""moto server whose CloudWatch answers metric queries from an index (benchmark only).

Stock moto scans every stored datapoint for every query and every period, and de-duplicates
ListMetrics pairwise, so a 5,000-instance fleet with 30 minutes of per-GPU data (1.4 M
datapoints, 40,000 series) would take it hours per cycle. This launcher keeps moto's answers
— same series matching, same periods, same statistics (moto's own ``Statistics``) — and only
finds the datapoints through a per-series index. Queries other than MetricStat fall through
to stock moto. The client under test cannot tell the difference; the emulator's own CPU is
reported separately by the benchmark.

$ python benchmarks/indexed_moto.py -H 127.0.0.1 -p 5000
"""

from __future__ import annotations

import bisect
import sys
from datetime import datetime, timedelta
from typing import Any

from moto.cloudwatch import models
from moto.cloudwatch.exceptions import ValidationError

_stock_get_metric_data = models.CloudWatchBackend.get_metric_data

Key = tuple[str, tuple[tuple[str, str], ...]]  # metric name, sorted dimensions
SeriesKey = tuple[str, str, tuple[tuple[str, str], ...]]  # namespace, name, sorted dimensions


def _key(name: str, dims: Any) -> Key:
    return name, tuple(sorted((d.name, d.value) for d in dims))


def _series_key(namespace: str, name: str, dims: Any) -> SeriesKey:
    """A series is its namespace, name and exact dimension set (as in CloudWatch): values of
    one series in one period are aggregated together, values of two never are."""
    return namespace, name, tuple(sorted((d.name, d.value) for d in dims))


def _index(backend: Any) -> dict[SeriesKey, tuple[list[datetime], list[Any]]]:
    """Series key -> (sorted timestamps, datapoints), extended as datapoints arrive. Several
    datapoints of one series in one period (an agent's rollup, a statistic set) all stay
    here; ``get_metric_data`` hands them to moto's ``Statistics`` together."""
    idx: dict[SeriesKey, tuple[list[datetime], list[Any]]] = backend.__dict__.setdefault(
        "_cb_idx", {}
    )
    data = backend.get_all_metrics()
    done = backend.__dict__.get("_cb_done", 0)
    if len(data) < done:  # cannot shrink in moto; rebuild if it ever does
        idx.clear()
        done = 0
    touched = set()
    for md in data[done:]:
        k = _series_key(md.namespace, md.name, md.dimensions)
        ts, pts = idx.setdefault(k, ([], []))
        ts.append(md.timestamp)
        pts.append(md)
        touched.add(k)
    for k in touched:
        ts, pts = idx[k]
        order = sorted(range(len(ts)), key=ts.__getitem__)
        idx[k] = ([ts[i] for i in order], [pts[i] for i in order])
    backend._cb_done = len(data)
    return idx


def get_metric_data(
    self: Any,
    queries: list[dict[str, Any]],
    start_time: datetime,
    end_time: datetime,
    scan_by: str = "TimestampAscending",
) -> list[dict[str, Any]]:
    if not queries or any("MetricStat" not in q for q in queries):
        return _stock_get_metric_data(self, queries, start_time, end_time, scan_by)
    start_time = start_time.replace(microsecond=0)
    end_time = end_time.replace(microsecond=0)
    if start_time >= end_time:
        raise ValidationError("The parameter EndTime must be greater than StartTime.")
    idx = _index(self)
    out = []
    for q in queries:
        ms = q["MetricStat"]
        name, stat, unit = ms["Metric"]["MetricName"], ms["Stat"], ms.get("Unit")
        dims = [models.Dimension(d["Name"], d["Value"]) for d in ms["Metric"].get("Dimensions", [])]
        ts, pts = idx.get(_series_key(ms["Metric"]["Namespace"], name, dims), ([], []))
        delta = timedelta(seconds=int(ms["Period"]))
        values: list[Any] = []
        stamps: list[datetime] = []
        p = start_time
        lo = bisect.bisect_left(ts, max(start_time, p))
        while p <= end_time and lo < len(ts):
            # moto counts a datapoint when start <= t < end of the request, per period
            hi = bisect.bisect_left(ts, min(p + delta, end_time))
            chosen = [md for md in pts[lo:hi] if not unit or md.unit == unit]
            if chosen:
                s = models.Statistics([stat], p)
                s.metric_data = chosen
                values.append(s.get_statistics_for_type(stat))
                stamps.append(s.timestamp)
            lo = bisect.bisect_left(ts, p + delta)
            p += delta
        if scan_by == "TimestampDescending":
            values.reverse()
            stamps.reverse()
        if q.get("ReturnData", True):
            out.append(
                {
                    "id": q["Id"],
                    "label": q.get("Label") or f"{name} {stat}",
                    "values": values,
                    "timestamps": stamps,
                    "status_code": "Complete",
                }
            )
    return out


def get_filtered_metrics(
    self: Any, metric_name: str, namespace: str, dimensions: list[dict[str, str]]
) -> list[Any]:
    seen: set[tuple[str, Key]] = set()
    out = []
    for md in self.get_all_metrics():
        if not md.filter(namespace=namespace, name=metric_name, dimensions=dimensions):
            continue
        k = (md.namespace, _key(md.name, md.dimensions))
        if md.dimensions and k in seen:
            continue
        seen.add(k)
        out.append(md)
    return out


models.CloudWatchBackend.get_metric_data = get_metric_data  # type: ignore[method-assign]
models.CloudWatchBackend.get_filtered_metrics = get_filtered_metrics  # type: ignore[method-assign]

if __name__ == "__main__":
    from moto.server import main

    main(sys.argv[1:])
