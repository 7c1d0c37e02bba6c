"""The accelerator-utilization metrics nodes publish, defined once.

The launch template's user data configures the CloudWatch agent (NVIDIA) or the neuron-monitor
publisher (Trainium) from these definitions, and the guardrail daemon queries the same names,
namespace and dimensions. Real CloudWatch matches the *exact* dimension set, so the two sides
must never be written separately.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Literal

AcceleratorKind = Literal["nvidia", "neuron"]


@dataclass(frozen=True)
class UtilizationMetric:
    namespace: str
    metric_name: str
    # Dimension set of each per-accelerator series: always the instance id plus the
    # per-device dimension named here.
    device_dimension: str

    @property
    def dimension_names(self) -> tuple[str, str]:
        return ("InstanceId", self.device_dimension)

    @property
    def rollup_dimension_names(self) -> tuple[str]:
        """The per-instance rollup: every accelerator's value published again under the
        instance id alone. CloudWatch aggregates the values of one dimension set in one period
        into one statistic set, so per period Maximum = the busiest accelerator, Minimum = the
        idlest and SampleCount = how many values arrived (``ROLLUP_STATS``)."""
        return ("InstanceId",)


# Every accelerator's utilization is published once per this many seconds (the CloudWatch
# agent's metrics_collection_interval; the Neuron publisher's --interval), so a rollup period
# of P seconds holds accelerators x P / PUBLISH_INTERVAL_S samples when every one reported.
PUBLISH_INTERVAL_S = 60

# What the idle rule reads from a rollup per period: busy/idle (the busiest accelerator) and
# coverage (how many values arrived). GetMetricData bills each statistic as one metric.
ROLLUP_STATS = ("Maximum", "SampleCount")
# ...and with ``idle.report_partial_idle`` (and in ``explain``) also the idlest accelerator, for
# the "N of M devices idle (reported, not reclaimed)" note on a busy node: a third metric.
ROLLUP_PARTIAL_IDLE_STATS = ("Maximum", "Minimum", "SampleCount")

UTILIZATION_METRICS: dict[AcceleratorKind, UtilizationMetric] = {
    # CloudWatch agent nvidia_gpu plugin; `index` is the GPU ordinal.
    "nvidia": UtilizationMetric("CWAgent", "nvidia_smi_utilization_gpu", "index"),
    # Published by the neuron-monitor relay installed by the launch template.
    "neuron": UtilizationMetric("CoreBurst/Neuron", "neuroncore_utilization", "neuroncore"),
}


@dataclass(frozen=True)
class HeartbeatMetric:
    """A per-instance liveness series (value 1 each period) from a node-side publisher of ours.
    Without a fresh datapoint the node is blind: "publisher dead" must never read as idle."""

    namespace: str
    metric_name: str
    dimension_names: tuple[str, ...] = ("InstanceId",)


# Published by the Neuron publisher (coreburst/common/neuron_report.py, installed by the launch
# template)
# with every report from neuron-monitor, next to one utilization datapoint per logical
# NeuronCore (0 % for a core no Neuron application holds).
PUBLISHER_HEARTBEATS: dict[AcceleratorKind, HeartbeatMetric] = {
    "neuron": HeartbeatMetric("CoreBurst/Neuron", "coreburst_publisher_heartbeat"),
}


# A Trainium node whose runtime runs at a logical NeuronCore size other than the catalog's
# default (NEURON_LOGICAL_NC_CONFIG; trn2: 1 or 2, default 2) carries it in this instance tag,
# so the guardrails expect chips x physical cores per chip / size series (trn2 at LNC=1: 128).
# The launch template that sets the variable sets the tag; ``idle.neuron_lnc`` sets it fleet-wide.
NEURON_LNC_TAG = "coreburst:neuron-lnc"


# The nvidia_gpu measurements the agent collects: only what the guardrails read (GPU
# utilization, ``UTILIZATION_METRICS["nvidia"]``). Every measurement listed is one more custom
# metric per node (and 8 more per p5 with per-device series), billed per metric-month
# (coreburst/common/cloudwatch_cost.py), so nothing is collected that nothing reads.
NVIDIA_MEASUREMENTS = ("utilization_gpu",)
# The agent names each nvidia_gpu measurement nvidia_smi_<measurement> (its translator maps the
# section to the nvidia_smi input and decorates names with that prefix).
NVIDIA_METRIC_PREFIX = "nvidia_smi_"

# The agent's force_flush_interval (metrics section): it sends what it buffered once per this
# many seconds, one PutMetricData request (up to 1,000 datums) per flush, so each node makes
# 86,400 / AGENT_FLUSH_INTERVAL_S requests a day (288 at 300 s, was 1,440 at 60 s). Collection
# stays every PUBLISH_INTERVAL_S, so the datapoints keep their 1-minute resolution and their own
# timestamps, but the newest arrive up to this late. The idle rule allows for that delay at the
# end of the window only (``idle.publish_delay``, default this value): a hole inside the window
# is still held to ``idle.max_gap``, and a node with no data is blind, never idle.
AGENT_FLUSH_INTERVAL_S = 300
# The Neuron publisher (coreburst/common/neuron_report.py) likewise collects once per
# PUBLISH_INTERVAL_S and sends what it collected once per this many seconds (``--flush-interval``;
# each datapoint keeps its own timestamp), so both families are late by at most as much.
NEURON_FLUSH_INTERVAL_S = AGENT_FLUSH_INTERVAL_S
# PutMetricData: at most 1,000 metric datums per request (the agent's max_datums_per_call; the
# CloudWatch API Reference's limit; coreburst/common/neuron_report.py's MAX_METRICS_PER_PUT).
PUT_MAX_DATUMS = 1000


def cloudwatch_agent_config(
    metrics_interval_s: int = PUBLISH_INTERVAL_S,
    *,
    per_device: bool = False,
    flush_interval_s: int = AGENT_FLUSH_INTERVAL_S,
) -> str:
    """CloudWatch agent JSON ("Manually create or edit the CloudWatch agent configuration
    file", metrics section) that publishes GPU utilization under exactly the dimension sets the
    guardrails read:

    - ``aggregation_dimensions`` [InstanceId]: the per-instance rollup the idle decision reads
      (``UtilizationMetric.rollup_dimension_names``), always;
    - [InstanceId, index]: one series per GPU, only with ``per_device`` (the stack's
      ``perDeviceMetrics``), for ``coreburst guardrails explain``'s per-GPU rows;

    and ``drop_original_metrics`` so the agent does not also publish each GPU's value with
    every dimension the plugin adds (host, name, arch...), a duplicate billed per metric-month.
    ``append_dimensions`` InstanceId (``${aws:InstanceId}``) is what both sets roll up to.
    ``force_flush_interval``: see ``AGENT_FLUSH_INTERVAL_S``.
    """
    metric = UTILIZATION_METRICS["nvidia"]
    dims = [list(metric.rollup_dimension_names)]
    if per_device:
        dims.append(list(metric.dimension_names))
    config = {
        "agent": {"metrics_collection_interval": metrics_interval_s},
        "metrics": {
            "namespace": metric.namespace,
            "force_flush_interval": flush_interval_s,
            "append_dimensions": {"InstanceId": "${aws:InstanceId}"},
            "aggregation_dimensions": dims,
            "metrics_collected": {
                "nvidia_gpu": {
                    "measurement": list(NVIDIA_MEASUREMENTS),
                    "metrics_collection_interval": metrics_interval_s,
                    "drop_original_metrics": list(NVIDIA_MEASUREMENTS),
                }
            },
        },
    }
    return json.dumps(config, indent=2)


@dataclass(frozen=True)
class Series:
    """One CloudWatch series a node publishes: namespace, metric name and the *names* of its
    dimensions (the values are the node's instance id and device ordinals)."""

    namespace: str
    metric_name: str
    dimension_names: tuple[str, ...]


def agent_config_series(config_json: str) -> list[Series]:
    """The series a CloudWatch agent config publishes for the nvidia_gpu section, read from the
    config itself the way the agent's translator reads it (amazon-cloudwatch-agent,
    translator/translate/metrics/metrics_collect/gpu/nvidiaSmi.go and
    translator/translate/otel/common/metrics.go GetDropOriginalMetrics): each measurement is
    published as nvidia_smi_<measurement> under every ``aggregation_dimensions`` set (only those
    whose dimensions the metric carries: the appended ones plus the plugin's ``index``), and
    under its full original dimension set unless ``drop_original_metrics`` names it.

    >>> [s.dimension_names for s in agent_config_series(cloudwatch_agent_config())]
    [('InstanceId',)]
    """
    cfg = json.loads(config_json)
    metrics = cfg["metrics"]
    namespace = metrics.get("namespace", "CWAgent")
    section = metrics["metrics_collected"]["nvidia_gpu"]
    carried = {
        *metrics.get("append_dimensions", {}),
        UTILIZATION_METRICS["nvidia"].device_dimension,
    }
    dropped = {
        d if d.startswith(NVIDIA_METRIC_PREFIX) else NVIDIA_METRIC_PREFIX + d
        for d in section.get("drop_original_metrics", [])
    }
    out: list[Series] = []
    for m in section["measurement"]:
        name = m if m.startswith(NVIDIA_METRIC_PREFIX) else NVIDIA_METRIC_PREFIX + m
        if name not in dropped:
            # the plugin's own tags (host, index, name, uuid, ...) plus the appended ones
            out.append(Series(namespace, name, ("<every dimension the plugin adds>",)))
        for dims in metrics.get("aggregation_dimensions", []):
            if set(dims) <= carried:
                out.append(Series(namespace, name, tuple(dims)))
    return out


def neuron_publisher_series(per_device: bool = False) -> list[Series]:
    """The series the Neuron publisher (coreburst/common/neuron_report.py) sends for one node:
    the utilization rollup and the heartbeat (InstanceId), plus one utilization series per
    logical NeuronCore with ``per_device``."""
    m, hb = UTILIZATION_METRICS["neuron"], PUBLISHER_HEARTBEATS["neuron"]
    out = [Series(m.namespace, m.metric_name, m.rollup_dimension_names)]
    if per_device:
        out.append(Series(m.namespace, m.metric_name, m.dimension_names))
    out.append(Series(hb.namespace, hb.metric_name, hb.dimension_names))
    return out
