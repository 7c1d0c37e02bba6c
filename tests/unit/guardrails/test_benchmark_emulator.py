"""The benchmark's indexed CloudWatch must answer exactly as stock moto does, or its figures
would measure a different workload."""

from __future__ import annotations

import importlib.util
import sys
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from moto import mock_aws
from moto.cloudwatch import models

from coreburst.sandbox.emulator import fake_session

ROOT = Path(__file__).parents[3]


@pytest.fixture
def indexed() -> Any:
    stock = (
        models.CloudWatchBackend.get_metric_data,
        models.CloudWatchBackend.get_filtered_metrics,
    )
    spec = importlib.util.spec_from_file_location(
        "indexed_moto", ROOT / "benchmarks/indexed_moto.py"
    )
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules["indexed_moto"] = mod
    spec.loader.exec_module(mod)
    models.CloudWatchBackend.get_metric_data, models.CloudWatchBackend.get_filtered_metrics = stock
    yield mod
    del sys.modules["indexed_moto"]


def _seed(cw: Any, t0: datetime) -> None:
    data = []
    for node in range(3):
        for dev in range(2):
            for m in range(0, 40, 1 + node):  # node 1 and 2 have gaps
                data.append(
                    {
                        "MetricName": "util",
                        "Dimensions": [
                            {"Name": "InstanceId", "Value": f"i-{node}"},
                            {"Name": "index", "Value": str(dev)},
                        ],
                        "Timestamp": t0 + timedelta(minutes=m, seconds=7 * dev),
                        "Value": float((node * 13 + dev * 5 + m) % 17),
                        "Unit": "Percent",
                    }
                )
    data.append({"MetricName": "util", "Dimensions": [], "Timestamp": t0, "Value": 1.0})
    for i in range(0, len(data), 500):
        cw.put_metric_data(Namespace="CWAgent", MetricData=data[i : i + 500])


def test_same_answers_as_stock_moto(indexed: Any) -> None:
    t0 = datetime(2026, 12, 2, 10)  # moto keeps naive UTC datetimes
    with mock_aws():
        cw = fake_session().client("cloudwatch", region_name="us-east-1")
        _seed(cw, t0)
        backend = models.cloudwatch_backends["123456789012"]["us-east-1"]
        queries = [
            {
                "Id": f"q{node}{dev}{period}{stat}",
                "MetricStat": {
                    "Metric": {
                        "Namespace": "CWAgent",
                        "MetricName": "util",
                        "Dimensions": [
                            {"Name": "index", "Value": str(dev)},
                            {"Name": "InstanceId", "Value": f"i-{node}"},
                        ],
                    },
                    "Period": period,
                    "Stat": stat,
                },
            }
            for node in range(4)  # i-3 has no data
            for dev in range(2)
            for period in (60, 300)
            for stat in ("Maximum", "SampleCount", "Average")
        ]
        for start, end, scan in [
            (t0, t0 + timedelta(minutes=31), "TimestampAscending"),
            (
                t0 + timedelta(minutes=5, seconds=30),
                t0 + timedelta(minutes=20),
                "TimestampDescending",
            ),
            (t0 - timedelta(hours=1), t0 + timedelta(hours=2), "TimestampAscending"),
        ]:
            want = models.CloudWatchBackend.get_metric_data(backend, queries, start, end, scan)
            got = indexed.get_metric_data(backend, queries, start, end, scan)
            assert got == want
            assert sum(len(r["values"]) for r in got) > 0
        filt = [{"Name": "InstanceId"}]
        want_m = models.CloudWatchBackend.get_filtered_metrics(backend, "util", "CWAgent", filt)
        got_m = indexed.get_filtered_metrics(backend, "util", "CWAgent", filt)

        # stock moto repeats a series once per datapoint here; CloudWatch (and the index)
        # list each series once
        def keys(ms: list[Any]) -> list[tuple[tuple[str, str], ...]]:
            return [tuple(sorted((d.name, d.value) for d in m.dimensions)) for m in ms]

        assert len(want_m) > 6
        assert keys(got_m) == list(dict.fromkeys(keys(want_m)))
        assert len(got_m) == 6
