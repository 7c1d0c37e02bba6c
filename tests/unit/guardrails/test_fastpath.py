"""The fast paths must send the bytes botocore would send and return what botocore would return.

Each test drives two clients on the same canned answers — one plain, one with
``guardrails.fastpath`` — through botocore's ``before-send`` hook, so signing, retries and
error handling are botocore's own, and compares what the caller sees.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from unittest import mock

import botocore.parsers
import botocore.serialize
import pytest
from botocore.awsrequest import AWSResponse
from botocore.config import Config
from botocore.exceptions import ClientError
from botocore.parsers import ResponseParserError
from moto import mock_aws

from coreburst.common.catalog import load_catalog
from coreburst.sandbox.emulator import fake_session, launch
from guardrails import fastpath
from guardrails.adapters.aws import Aws, inventory
from guardrails.adapters.cloudwatch import SeriesRef, get_metric_data
from guardrails.config import AwsConfig

FIXTURE = Path(__file__).parents[2] / "fixtures" / "aws" / "describe_instances_p5.xml"


class _Raw:
    def __init__(self, body: bytes) -> None:
        self.body = body

    def stream(self, *_: Any, **__: Any) -> Any:
        yield self.body


class Canned:
    """Answers every request from a queue and records the request bodies."""

    def __init__(self, answers: list[tuple[int, bytes]]) -> None:
        self.answers = list(answers)
        self.sent: list[bytes] = []

    def __call__(self, request: Any, **_: Any) -> AWSResponse:
        body = request.body or b""
        self.sent.append(body.encode() if isinstance(body, str) else body)
        status, body = self.answers.pop(0)
        ctype = "text/xml" if body.lstrip().startswith(b"<") else "application/x-amz-json-1.0"
        return AWSResponse(request.url, status, {"Content-Type": ctype}, _Raw(body))


def _client(service: str, canned: Canned, fast: bool) -> Any:
    c = fake_session().client(
        service,  # type: ignore[call-overload]
        region_name="us-east-1",
        config=Config(retries={"max_attempts": 1, "mode": "standard"}),
    )
    if fast:
        fastpath.install(c)
    c.meta.events.register("before-send", canned)
    return c


def _both(
    service: str, answers: list[tuple[int, bytes]], call: Any
) -> tuple[Any, Any, list[Canned]]:
    out, canned = [], []
    for fast in (False, True):
        cn = Canned(answers)
        canned.append(cn)
        out.append(call(_client(service, cn, fast)))
    return out[0], out[1], canned


def _strip(resp: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in resp.items() if k != "ResponseMetadata"}


def _project(resp: dict[str, Any]) -> list[dict[str, Any]]:
    """What guardrails.adapters.aws reads from a DescribeInstances answer."""
    keep = [name for name, _ in fastpath.INSTANCE_FIELDS] + ["LaunchTime", "Tags"]
    rows = []
    for res in resp["Reservations"]:
        for inst in res["Instances"]:
            row = {k: inst.get(k) for k in keep}
            row["AZ"] = inst.get("Placement", {}).get("AvailabilityZone")
            row["State"] = inst.get("State")
            rows.append(row)
    return rows


def test_describe_instances_matches_botocore_on_a_p5_answer() -> None:
    body = FIXTURE.read_bytes()
    slow, fast, _ = _both("ec2", [(200, body)], lambda c: c.describe_instances())
    assert _project(fast) == _project(slow)
    assert fast["NextToken"] == slow["NextToken"] == "eyJ2IjoiMiIsImMiOiJwYWdlMiJ9"
    rows = _project(fast)
    assert [r["InstanceLifecycle"] for r in rows] == [None, "spot", "capacity-block", None]
    assert rows[2]["CapacityReservationId"] == "cr-0123456789abcdef0"
    assert rows[1]["Tags"][1] == {"Key": "owner", "Value": "a&b <lab>"}
    assert rows[3]["Tags"] is None and rows[3]["State"] == {"Code": 64, "Name": "stopping"}
    assert rows[2]["LaunchTime"] == datetime(2026, 12, 1, 11, 30, tzinfo=UTC)


def test_describe_instances_paginates_through_the_fast_path() -> None:
    body = FIXTURE.read_bytes()
    last = body.replace(b"<nextToken>eyJ2IjoiMiIsImMiOiJwYWdlMiJ9</nextToken>", b"")
    cn = Canned([(200, body), (200, last)])
    ec2 = _client("ec2", cn, fast=True)
    pages = list(ec2.get_paginator("describe_instances").paginate())
    assert len(pages) == 2 and len(cn.sent) == 2
    assert b"NextToken=eyJ2IjoiMiIsImMiOiJwYWdlMiJ9" in cn.sent[1]


def test_inventory_over_moto_is_the_same_with_and_without_the_fast_path() -> None:
    catalog = load_catalog()
    with mock_aws():
        aws = Aws(AwsConfig(), session=fake_session())
        ec2 = aws.client("ec2", "us-east-1")
        launch(ec2, "p5.48xlarge", {"team": "ml", "owner": "ana"}, count=3)
        launch(ec2, "trn2.48xlarge", {"team": "research"}, count=2, spot=True)
        launch(ec2, "p5.48xlarge", {}, count=1)
        plain = fake_session().client("ec2", region_name="us-east-1")
        types = ["p5.48xlarge", "trn2.48xlarge"]
        fast_nodes = inventory(ec2, "us-east-1", types, catalog)
        slow_nodes = inventory(plain, "us-east-1", types, catalog)
    assert len(fast_nodes) == 6
    assert sorted(fast_nodes, key=lambda n: n.instance_id) == sorted(
        slow_nodes, key=lambda n: n.instance_id
    )
    assert sum(n.market == "spot" for n in fast_nodes) == 2


def _metric_answer(ids: list[str], points: int) -> bytes:
    return json.dumps(
        {
            "MetricDataResults": [
                {
                    "Id": i,
                    "Label": "DCGM_FI_DEV_GPU_UTIL",
                    "Timestamps": [1_795_000_000 + 60 * k for k in range(points)],
                    "Values": [float(k % 7) for k in range(points)],
                    "StatusCode": "Complete",
                }
                for i in ids
            ],
            "Messages": [],
        }
    ).encode()


def _refs(n: int) -> list[SeriesRef]:
    return [
        SeriesRef(
            f"i-{k:017x}",
            str(k % 8),
            "CWAgent",
            "DCGM_FI_DEV_GPU_UTIL",
            (("InstanceId", f"i-{k:017x}"), ("index", str(k % 8))),
        )
        for k in range(n)
    ]


def test_get_metric_data_sends_the_same_request_and_returns_the_same_samples() -> None:
    refs = _refs(12)
    answer = _metric_answer([f"q{i}" for i in range(12)], points=31)
    start, end = datetime(2026, 11, 18, 6, tzinfo=UTC), datetime(2026, 11, 18, 6, 31, tzinfo=UTC)

    def call(cw: Any) -> Any:
        return get_metric_data(cw, refs, start=start, end=end, period_s=60, stat="Maximum")

    (slow, slow_failed), (fast, fast_failed), canned = _both("cloudwatch", [(200, answer)], call)
    assert json.loads(canned[1].sent[0]) == json.loads(canned[0].sent[0])
    sent = json.loads(canned[1].sent[0])
    assert len(sent["MetricDataQueries"]) == 12
    assert sent["MetricDataQueries"][3]["MetricStat"]["Metric"]["Dimensions"][1] == {
        "Name": "index",
        "Value": "3",
    }
    assert slow_failed == fast_failed == set()
    assert fast == slow and len(fast[0]) == 31
    assert fast[0].timestamps[1] == datetime.fromtimestamp(1_795_000_060, UTC)


def test_metric_queries_bypass_botocores_model_walk() -> None:
    """The point of the fast path: 500 queries are not walked value by value."""
    refs = _refs(500)
    answer = _metric_answer([f"q{i}" for i in range(500)], points=5)
    start, end = datetime(2026, 11, 18, 6, tzinfo=UTC), datetime(2026, 11, 18, 6, 31, tzinfo=UTC)
    walked = {}
    for fast in (False, True):
        counts = {"serialize": 0, "parse": 0}
        ser = botocore.serialize.JSONSerializer._serialize_type_structure
        par = botocore.parsers.BaseJSONParser._handle_structure

        def s(self: Any, *a: Any, _f: Any = ser, _c: Any = counts) -> Any:
            _c["serialize"] += 1
            return _f(self, *a)

        def p(self: Any, *a: Any, _f: Any = par, _c: Any = counts) -> Any:
            _c["parse"] += 1
            return _f(self, *a)

        cw = _client("cloudwatch", Canned([(200, answer)]), fast)
        with (
            mock.patch.object(botocore.serialize.JSONSerializer, "_serialize_type_structure", s),
            mock.patch.object(botocore.parsers.BaseJSONParser, "_handle_structure", p),
        ):
            data, _ = get_metric_data(cw, refs, start=start, end=end, period_s=60, stat="Maximum")
        assert len(data) == 500 and all(len(v) == 5 for v in data.values())
        walked[fast] = counts
    assert walked[False]["serialize"] > 1500 and walked[False]["parse"] > 500
    assert walked[True]["serialize"] < 5 and walked[True]["parse"] < 5


def test_list_metrics_answer_is_unchanged() -> None:
    answer = json.dumps(
        {
            "Metrics": [
                {
                    "Namespace": "CWAgent",
                    "MetricName": "DCGM_FI_DEV_GPU_UTIL",
                    "Dimensions": [
                        {"Name": "InstanceId", "Value": "i-0aaaaaaaaaaaaaaa1"},
                        {"Name": "index", "Value": "0"},
                    ],
                }
            ],
            "NextToken": "abc",
        }
    ).encode()
    slow, fast, _ = _both("cloudwatch", [(200, answer)], lambda c: c.list_metrics())
    assert _strip(fast) == _strip(slow) and fast["NextToken"] == "abc"


def test_errors_are_botocore_errors() -> None:
    err = json.dumps(
        {"__type": "InvalidParameterValue", "message": "The time range is too large."}
    ).encode()
    codes = []
    for fast in (False, True):
        cw = _client("cloudwatch", Canned([(400, err)]), fast)
        with pytest.raises(ClientError) as e:
            get = cw.get_metric_data
            get(
                MetricDataQueries=[{"Id": "q0", "Expression": "1", "ReturnData": True}],
                StartTime=datetime(2026, 1, 1, tzinfo=UTC),
                EndTime=datetime(2026, 1, 2, tzinfo=UTC),
            )
        codes.append((e.value.response["Error"]["Code"], e.value.response["Error"]["Message"]))
    assert codes[0] == codes[1] == ("InvalidParameterValue", "The time range is too large.")


def test_an_unreadable_answer_is_left_to_botocore() -> None:
    for fast in (False, True):
        ec2 = _client("ec2", Canned([(200, b"<DescribeInstancesResponse><reservationSet>")]), fast)
        with pytest.raises(ResponseParserError):
            ec2.describe_instances()
