"""Plain data the pure guardrail logic works on (no boto3 types)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal, NamedTuple

Market = Literal["on-demand", "spot", "capacity-block", "capacity-reservation"]


@dataclass(frozen=True)
class Node:
    """One running accelerated instance as the inventory saw it."""

    instance_id: str
    region: str
    az: str
    instance_type: str
    accelerator_kind: Literal["nvidia", "neuron"]
    accelerator_count: int
    market: Market
    launch_time: datetime
    tags: dict[str, str] = field(default_factory=dict)
    asg: str | None = None
    ebs_root: bool = True
    state: str = "running"


class Sample(NamedTuple):
    # A tuple, not a dataclass: a 1,000-node fleet yields 250,000 per cycle, and tuples are
    # built and sorted (by timestamp first) at C speed.
    timestamp: datetime
    value: float


# device id (the per-device dimension's value) -> datapoints, oldest first
DeviceSeries = dict[str, list[Sample]]
