"""Everything that talks to AWS but CloudWatch metric reads (``guardrails.adapters.cloudwatch``).
Clients come in from outside (``Aws``); nothing here runs at import time. Each function turns
API answers into the plain data of ``guardrails.model``.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import boto3
from botocore.config import Config

from coreburst.common.catalog import Catalog
from guardrails import fastpath
from guardrails.config import AwsConfig
from guardrails.model import Market, Node


class AwsUnreachableError(RuntimeError):
    """The AWS endpoint could not be reached or refused our credentials (user-fixable)."""


class ApiCounter:
    """Counts API calls by operation through botocore's ``before-call`` event."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()

    def attach(self, client: Any) -> None:
        client.meta.events.register("before-call", self._before)
        client.meta.events.register("after-call-error", self._error)

    def _before(self, model: Any, **_: Any) -> None:
        self.calls[model.name] += 1

    def _error(self, model: Any = None, **_: Any) -> None:
        if model is not None:
            self.errors[model.name] += 1


class Aws:
    """A cache of clients per (service, region), all built from one session and config.

    Its EC2 and CloudWatch clients carry ``guardrails.fastpath``: DescribeInstances answers
    hold only the fields this package reads."""

    def __init__(self, cfg: AwsConfig, session: boto3.session.Session | None = None) -> None:
        self.cfg = cfg
        self.session = session or boto3.session.Session()
        self.counter = ApiCounter()
        self._clients: dict[tuple[str, str], Any] = {}
        self._botocfg = Config(
            connect_timeout=cfg.connect_timeout_s,
            read_timeout=cfg.read_timeout_s,
            retries={"max_attempts": cfg.max_attempts, "mode": "standard"},
            # Requests are built here from typed data; client-side validation of thousands of
            # metric queries per cycle was a third of the daemon's CPU (benchmarks/).
            parameter_validation=False,
        )

    def client(self, service: str, region: str) -> Any:
        key = (service, region)
        if key not in self._clients:
            c = self.session.client(
                service,  # type: ignore[call-overload]
                region_name=region,
                endpoint_url=self.cfg.endpoint_url,
                config=self._botocfg,
            )
            self.counter.attach(c)
            fastpath.install(c)
            self._clients[key] = c
        return self._clients[key]


# -- inventory ------------------------------------------------------------------------------
def _market(inst: dict[str, Any]) -> Market:
    lifecycle = inst.get("InstanceLifecycle")
    if lifecycle == "spot":
        return "spot"
    if lifecycle == "capacity-block":
        return "capacity-block"
    if inst.get("CapacityReservationId"):
        return "capacity-reservation"
    return "on-demand"


def inventory(ec2: Any, region: str, types: list[str], catalog: Catalog) -> list[Node]:
    """Every running instance of the watched types, in as few pages as the API allows."""
    nodes: list[Node] = []
    pages = ec2.get_paginator("describe_instances").paginate(
        Filters=[
            {"Name": "instance-type", "Values": types},
            {"Name": "instance-state-name", "Values": ["running"]},
        ],
        PaginationConfig={"PageSize": 1000},
    )
    for page in pages:
        for res in page.get("Reservations", []):
            for inst in res.get("Instances", []):
                itype = inst["InstanceType"]
                acc = catalog.instance(itype).accelerator
                tags = {t["Key"]: t["Value"] for t in inst.get("Tags", [])}
                nodes.append(
                    Node(
                        instance_id=inst["InstanceId"],
                        region=region,
                        az=inst.get("Placement", {}).get("AvailabilityZone", ""),
                        instance_type=itype,
                        accelerator_kind=acc.kind,
                        accelerator_count=acc.count,
                        market=_market(inst),
                        launch_time=inst["LaunchTime"],
                        tags=tags,
                        asg=tags.get("aws:autoscaling:groupName"),
                        ebs_root=inst.get("RootDeviceType", "ebs") == "ebs",
                        state=inst.get("State", {}).get("Name", "running"),
                    )
                )
    return nodes


def instance_states(ec2: Any, ids: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for chunk in _chunks(ids, 1000):
        for page in ec2.get_paginator("describe_instances").paginate(InstanceIds=chunk):
            for res in page.get("Reservations", []):
                for inst in res.get("Instances", []):
                    out[inst["InstanceId"]] = inst["State"]["Name"]
    return out


# -- CloudWatch -----------------------------------------------------------------------------
def _chunks(items: list[Any], n: int) -> Iterator[list[Any]]:
    it = iter(items)
    while chunk := list(itertools.islice(it, n)):
        yield chunk


# -- prices and other billed resources --------------------------------------------------------
def spot_prices(ec2: Any, types: list[str], now: datetime) -> dict[tuple[str, str], float]:
    """Latest Linux spot price per (type, AZ)."""
    latest: dict[tuple[str, str], tuple[datetime, float]] = {}
    pages = ec2.get_paginator("describe_spot_price_history").paginate(
        InstanceTypes=types, StartTime=now, EndTime=now
    )
    for page in pages:
        for p in page.get("SpotPriceHistory", []):
            if not p.get("ProductDescription", "").startswith("Linux/UNIX"):
                continue
            k = (p["InstanceType"], p["AvailabilityZone"])
            ts = p["Timestamp"]
            if k not in latest or ts > latest[k][0]:
                latest[k] = (ts, float(p["SpotPrice"]))
    return {k: v for k, (_, v) in latest.items()}


@dataclass(frozen=True)
class LustreFs:
    fs_id: str
    deployment_type: str
    throughput: int | None
    capacity_gib: int
    tags: dict[str, str]
    # DescribeFileSystems' CreationTime: a file system made today bills from then, not midnight
    created: datetime | None = None


def lustre_file_systems(fsx: Any) -> list[LustreFs]:
    out: list[LustreFs] = []
    for page in fsx.get_paginator("describe_file_systems").paginate():
        for fs in page.get("FileSystems", []):
            if fs.get("FileSystemType") != "LUSTRE":
                continue
            lc = fs.get("LustreConfiguration", {})
            out.append(
                LustreFs(
                    fs["FileSystemId"],
                    lc.get("DeploymentType", "PERSISTENT_2"),
                    lc.get("PerUnitStorageThroughput"),
                    int(fs.get("StorageCapacity", 0)),
                    {t["Key"]: t["Value"] for t in fs.get("Tags", [])},
                    fs.get("CreationTime"),
                )
            )
    return out


def dx_connections(dx: Any) -> list[tuple[str, str, dict[str, str]]]:
    """(connection id, bandwidth, tags) of every connection that bills."""
    resp = dx.describe_connections()
    return [
        (
            c["connectionId"],
            c["bandwidth"],
            {t["key"]: t.get("value", "") for t in c.get("tags", [])},
        )
        for c in resp.get("connections", [])
        if c.get("connectionState") in ("available", "ordering", "pending", "down")
    ]


def nat_gateways(ec2: Any) -> list[str]:
    ids: list[str] = []
    for page in ec2.get_paginator("describe_nat_gateways").paginate(
        Filter=[{"Name": "state", "Values": ["available"]}]
    ):
        ids.extend(g["NatGatewayId"] for g in page.get("NatGateways", []))
    return ids


def cost_explorer_actuals(
    ce: Any,
    start: datetime,
    end: datetime,
    tag: tuple[str, str] | None,
    *,
    metric: str = "UnblendedCost",
    usage_type_group: str | None = None,
) -> float:
    """Sum of a Cost Explorer metric over complete days [start, end)."""
    if end.date() <= start.date():
        return 0.0
    kw: dict[str, Any] = {
        "TimePeriod": {"Start": start.date().isoformat(), "End": end.date().isoformat()},
        "Granularity": "MONTHLY",
        "Metrics": [metric],
    }
    filters: list[dict[str, Any]] = []
    if tag:
        filters.append({"Tags": {"Key": tag[0], "Values": [tag[1]]}})
    if usage_type_group:
        filters.append({"Dimensions": {"Key": "USAGE_TYPE_GROUP", "Values": [usage_type_group]}})
    if len(filters) == 1:
        kw["Filter"] = filters[0]
    elif filters:
        kw["Filter"] = {"And": filters}
    total = 0.0
    token: str | None = None
    while True:
        if token:
            kw["NextPageToken"] = token
        resp = ce.get_cost_and_usage(**kw)
        for r in resp.get("ResultsByTime", []):
            tot = r.get("Total", {})
            amt = tot.get(metric) or next(iter(tot.values()), None)
            if amt:
                total += float(amt["Amount"])
        token = resp.get("NextPageToken")
        if not token:
            return total


# -- actions --------------------------------------------------------------------------------
def tag_instance(ec2: Any, instance_id: str, key: str, value: str) -> None:
    ec2.create_tags(Resources=[instance_id], Tags=[{"Key": key, "Value": value}])


def untag_instance(ec2: Any, instance_id: str, key: str) -> None:
    ec2.delete_tags(Resources=[instance_id], Tags=[{"Key": key}])


def reclaim(ec2: Any, asg: Any, node: Node, action: str) -> str:
    if action == "stop":
        ec2.stop_instances(InstanceIds=[node.instance_id])
        return "StopInstances"
    if action == "terminate":
        ec2.terminate_instances(InstanceIds=[node.instance_id])
        return "TerminateInstances"
    if action == "scale-in":
        asg.terminate_instance_in_auto_scaling_group(
            InstanceId=node.instance_id, ShouldDecrementDesiredCapacity=True
        )
        return "TerminateInstanceInAutoScalingGroup"
    raise ValueError(f"not an action: {action}")


def scope_asgs(asg: Any, tag: tuple[str, str] | None) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for page in asg.get_paginator("describe_auto_scaling_groups").paginate():
        for g in page.get("AutoScalingGroups", []):
            tags = {t["Key"]: t["Value"] for t in g.get("Tags", [])}
            if tag is None or tags.get(tag[0]) == tag[1]:
                out.append(g)
    return out


def scale_to_zero(asg: Any, name: str) -> None:
    asg.update_auto_scaling_group(AutoScalingGroupName=name, MinSize=0, DesiredCapacity=0)


def window_start(now: datetime, window: timedelta) -> datetime:
    return now - window
