"""Lean wire handling for the calls whose size grows with the fleet.

botocore serializes requests and parses responses by walking the service model for every
value. For the three calls that scale with the fleet — DescribeInstances pages, GetMetricData
batches and ListMetrics pages — that walk was about 80% of a cycle's CPU at 1,000 instances
(``benchmarks/guardrails_cycle.py``: 1.5 s for one DescribeInstances page, 0.9 s to encode and
decode 9,000 metric queries). The handlers here hook botocore's own events and do the same
job directly on the JSON / XML; signing, retries, endpoints, error parsing and pagination stay
botocore's.

- GetMetricData requests: the queries are JSON-encoded as given (they hold only strings and
  integers, so the document is the one botocore's serializer would send).
- GetMetricData and ListMetrics responses: decoded with orjson, timestamps converted.
- DescribeInstances responses (EC2 XML): only the fields ``guardrails.adapters.aws`` reads are kept
—
  see ``INSTANCE_FIELDS``. A client with these handlers returns nothing else for that call.

Any answer that is not a 200, or that these parsers cannot read, is left to botocore, so
errors look exactly as they would without the fast path.

>>> ec2 = boto3.client("ec2", region_name="us-east-1")
>>> install(ec2)  # every later DescribeInstances on ``ec2`` is parsed here
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from datetime import UTC, datetime
from typing import Any

import orjson
from botocore.utils import parse_timestamp

_STASH = "coreburst.metric_queries"

# DescribeInstances fields kept, as (botocore name, EC2 XML element name).
INSTANCE_FIELDS = (
    ("InstanceId", "instanceId"),
    ("InstanceType", "instanceType"),
    ("InstanceLifecycle", "instanceLifecycle"),
    ("CapacityReservationId", "capacityReservationId"),
    ("RootDeviceType", "rootDeviceType"),
    # burst-reconcile: which of a node's duplicate instances is at Slurm's NodeAddr.
    ("PrivateIpAddress", "privateIpAddress"),
)


def install(client: Any) -> None:
    """Register the fast paths that apply to this client's service (others: no-op)."""
    service = client.meta.service_model.service_id.hyphenize()
    ev = client.meta.events
    if service == "cloudwatch":
        ev.register("before-parameter-build.cloudwatch.GetMetricData", _stash_queries)
        ev.register("before-call.cloudwatch.GetMetricData", _inject_queries)
        ev.register("before-parse.cloudwatch.GetMetricData", _parse_json_answer)
        ev.register("before-parse.cloudwatch.ListMetrics", _parse_json_answer)
    elif service == "ec2":
        ev.register("before-parse.ec2.DescribeInstances", _parse_describe_instances)


def _is_json(model: Any) -> bool:
    return bool(model.service_model.resolved_protocol == "json")


# -- GetMetricData request ---------------------------------------------------------------------
def _stash_queries(params: dict[str, Any], model: Any, context: dict[str, Any], **_: Any) -> None:
    queries = params.get("MetricDataQueries")
    if _is_json(model) and isinstance(queries, list) and queries:
        context[_STASH] = queries
        params["MetricDataQueries"] = []


def _inject_queries(params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
    # Returns None on purpose: a value returned from before-call replaces the whole call.
    queries = context.pop(_STASH, None)
    if queries is None:
        return
    body = orjson.loads(params["body"])
    body["MetricDataQueries"] = queries
    params["body"] = orjson.dumps(body)


# -- JSON responses ----------------------------------------------------------------------------
def _timestamp(value: Any) -> datetime:
    if isinstance(value, int | float):
        return datetime.fromtimestamp(value, UTC)
    try:
        return datetime.fromisoformat(value)
    except (TypeError, ValueError):
        return parse_timestamp(value)


def _json_body(model: Any, response: dict[str, Any]) -> dict[str, Any] | None:
    if response.get("status_code") != 200 or not _is_json(model):
        return None
    try:
        data = orjson.loads(response["body"])
    except (TypeError, orjson.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def _parse_json_answer(
    operation_model: Any,
    response_dict: dict[str, Any],
    customized_response_dict: dict[str, Any],
    **_: Any,
) -> None:
    """GetMetricData / ListMetrics: the decoded JSON is what botocore would return, once
    GetMetricData's timestamps are datetimes (ListMetrics answers hold only strings)."""
    data = _json_body(operation_model, response_dict)
    if data is None:
        return
    # Every series of a batch has the same period boundaries: convert each distinct value
    # once (31 conversions instead of 15,500 for 500 series over 30 minutes) and share the
    # resulting datetimes.
    try:
        results = data.get("MetricDataResults", [])
        distinct: set[Any] = set()
        for r in results:
            distinct.update(r.get("Timestamps", ()))
        table = {t: _timestamp(t) for t in distinct}
        for r in results:
            r["Timestamps"] = list(map(table.__getitem__, r.get("Timestamps", ())))
    except (TypeError, ValueError, AttributeError):
        return
    customized_response_dict.update(data)
    response_dict["body"] = b"{}"


# -- DescribeInstances response ------------------------------------------------------------------
def _parse_describe_instances(
    operation_model: Any,
    response_dict: dict[str, Any],
    customized_response_dict: dict[str, Any],
    **_: Any,
) -> None:
    if response_dict.get("status_code") != 200:
        return
    try:
        parsed = parse_describe_instances(response_dict["body"])
    except (ET.ParseError, ValueError, TypeError, AttributeError):
        return  # botocore parses it (and reports what is wrong with it)
    customized_response_dict.update(parsed)
    response_dict["body"] = b"<DescribeInstancesResponse/>"


def parse_describe_instances(body: bytes) -> dict[str, Any]:
    """The fields of a DescribeInstances answer that coreburst reads, under botocore's names."""
    root = ET.fromstring(body)
    ns = root.tag[: root.tag.index("}") + 1] if root.tag.startswith("{") else ""
    if root.tag != f"{ns}DescribeInstancesResponse":
        raise ValueError(f"not a DescribeInstances answer: {root.tag}")

    def text(el: ET.Element, path: str) -> str | None:
        found = el.find(path)
        return None if found is None else (found.text or "")

    reservations: list[dict[str, Any]] = []
    for res in root.iterfind(f"{ns}reservationSet/{ns}item"):
        instances: list[dict[str, Any]] = []
        for inst in res.iterfind(f"{ns}instancesSet/{ns}item"):
            out: dict[str, Any] = {}
            for name, tag in INSTANCE_FIELDS:
                v = text(inst, ns + tag)
                if v is not None:
                    out[name] = v
            launch = text(inst, ns + "launchTime")
            if launch is not None:
                out["LaunchTime"] = _timestamp(launch)
            az = text(inst, f"{ns}placement/{ns}availabilityZone")
            if az is not None:
                out["Placement"] = {"AvailabilityZone": az}
            state = inst.find(ns + "instanceState")
            if state is not None:
                out["State"] = {
                    "Code": int(text(state, ns + "code") or 0),
                    "Name": text(state, ns + "name") or "",
                }
            tags = inst.find(ns + "tagSet")
            if tags is not None:
                out["Tags"] = [
                    {"Key": text(t, ns + "key") or "", "Value": text(t, ns + "value") or ""}
                    for t in tags.iterfind(ns + "item")
                ]
            instances.append(out)
        reservations.append(
            {
                "ReservationId": text(res, ns + "reservationId") or "",
                "OwnerId": text(res, ns + "ownerId") or "",
                "Instances": instances,
            }
        )
    parsed: dict[str, Any] = {"Reservations": reservations}
    token = text(root, ns + "nextToken")
    if token:
        parsed["NextToken"] = token
    return parsed
