"""Plain data the pure guardrail logic works on (no boto3 types)."""

from __future__ import annotations

from collections.abc import Iterable
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
    timestamp: datetime
    value: float


@dataclass(slots=True)
class Series:
    """One device's datapoints as two parallel lists.

    Lists rather than one object per datapoint: a 1,000-node fleet returns ~250,000
    datapoints a cycle, and building an object for each was the largest CPU cost of a cycle
    (benchmarks/guardrails_cycle.py).

    >>> Series.of([Sample(datetime(2026, 1, 1), 3.0)]).values
    [3.0]
    """

    timestamps: list[datetime] = field(default_factory=list)
    values: list[float] = field(default_factory=list)

    @classmethod
    def of(cls, samples: Iterable[Sample]) -> Series:
        s = cls()
        for t, v in samples:
            s.timestamps.append(t)
            s.values.append(v)
        return s

    def extend(self, timestamps: Iterable[datetime], values: Iterable[float]) -> None:
        ts, vs = list(timestamps), list(values)
        if len(ts) != len(vs):  # a malformed answer must not misalign the two
            n = min(len(ts), len(vs))
            ts, vs = ts[:n], vs[:n]
        self.timestamps += ts
        self.values += vs

    def __len__(self) -> int:
        return len(self.timestamps)

    def samples(self) -> list[Sample]:
        return list(map(Sample, self.timestamps, self.values))


# device id (the per-device dimension's value) -> its datapoints
DeviceSeries = dict[str, Series]
