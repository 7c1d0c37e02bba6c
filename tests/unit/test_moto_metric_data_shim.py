"""The suite's speed-up of moto's in-process CloudWatch (tests/unit/conftest.py,
``_MetricsOfOneName``) answers exactly what moto itself answers: the same stored data is
queried through the shim and through moto's own ``get_metric_data``, for queries with and
without dimensions, with a unit, across namespaces that share a metric name (moto ignores the
namespace of a query with dimensions; the shim must keep that), periods and statistics."""

from __future__ import annotations

import random
from datetime import datetime, timedelta
from typing import Any

import boto3
from moto import mock_aws
from moto.cloudwatch.models import cloudwatch_backends

T0 = datetime(2026, 12, 1, 12, 0)  # naive: moto keeps timestamps as it parsed them


def _query(i: int, ns: str, name: str, dims: list[dict[str, str]], **extra: Any) -> dict[str, Any]:
    stat = {"Metric": {"Namespace": ns, "MetricName": name, "Dimensions": dims}, **extra}
    return {"Id": f"q{i}", "MetricStat": stat}


def test_the_shim_answers_what_moto_answers(_moto_metric_data_by_name: Any) -> None:
    rng = random.Random(7)
    with mock_aws():
        cw = boto3.client("cloudwatch", region_name="us-east-1")
        for minute in range(15):
            data = [
                {
                    "MetricName": name,
                    "Dimensions": [{"Name": "host", "Value": host}]
                    + ([{"Name": "gpu", "Value": "0"}] if name == "mem" else []),
                    "Timestamp": T0 + timedelta(minutes=minute, seconds=rng.randrange(60)),
                    "Value": rng.random() * 100,
                    "Unit": rng.choice(["Percent", "Count"]),
                }
                for name in ("util", "beat", "mem")
                for host in ("h1", "h2", "h3")
            ]
            for ns in ("A", "B"):
                cw.put_metric_data(Namespace=ns, MetricData=[d for d in data if rng.random() < 0.8])
        queries = []
        for ns in ("A", "B"):
            for name in ("util", "beat", "mem", "absent"):
                for dims in (
                    [],
                    [{"Name": "host", "Value": "h2"}],
                    [{"Name": "gpu", "Value": "0"}, {"Name": "host", "Value": "h3"}],
                ):
                    for period, stat in ((60, "Average"), (300, "Maximum"), (120, "SampleCount")):
                        queries.append(
                            _query(len(queries), ns, name, dims, Period=period, Stat=stat)
                        )
                queries.append(
                    _query(len(queries), ns, name, [], Period=60, Stat="Sum", Unit="Percent")
                )
        backend = cloudwatch_backends["123456789012"]["us-east-1"]
        start, end = T0, T0 + timedelta(minutes=16)
        shim = _moto_metric_data_by_name
        for scan_by in ("TimestampAscending", "TimestampDescending"):
            kw = {"start_time": start, "end_time": end, "scan_by": scan_by}
            moto_says = shim.unpatched(backend, queries=queries, **kw)
            shim_says = backend.get_metric_data(queries=queries, **kw)
            assert shim_says == moto_says
            assert sum(len(r["values"]) for r in moto_says) > 200  # the data was really there
        # and through the API, as the code under test calls it
        resp = cw.get_metric_data(MetricDataQueries=queries, StartTime=start, EndTime=end)
        assert [r["Id"] for r in resp["MetricDataResults"]] == [q["Id"] for q in queries]
