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

# What the guardrails read from a rollup per period: busy/idle, one idle accelerator, coverage.
ROLLUP_STATS = ("Maximum", "Minimum", "SampleCount")

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


# The nvidia_gpu measurements the agent collects; each is published per GPU (InstanceId +
# index) and as the per-instance rollup (InstanceId), never a third time with every dimension
# the plugin adds (drop_original_metrics).
NVIDIA_MEASUREMENTS = ("utilization_gpu", "memory_used", "power_draw", "temperature_gpu")


def cloudwatch_agent_config(metrics_interval_s: int = PUBLISH_INTERVAL_S) -> str:
    """CloudWatch agent JSON (CloudWatch agent configuration file reference, "Manually create or
    edit the CloudWatch agent configuration file", metrics section) that publishes GPU
    utilization under exactly two dimension sets:

    - ``aggregation_dimensions`` [InstanceId, index]: one series per GPU, for ``explain``;
    - ``aggregation_dimensions`` [InstanceId]: the per-instance rollup the idle decision reads
      (``UtilizationMetric.rollup_dimension_names``);

    and ``drop_original_metrics`` so the agent does not also publish each GPU's value with
    every dimension the plugin adds (host, name, arch...), a duplicate billed per metric-month.
    ``append_dimensions`` InstanceId (``${aws:InstanceId}``) is what both sets roll up to.
    """
    metric = UTILIZATION_METRICS["nvidia"]
    config = {
        "agent": {"metrics_collection_interval": metrics_interval_s},
        "metrics": {
            "namespace": metric.namespace,
            "append_dimensions": {"InstanceId": "${aws:InstanceId}"},
            "aggregation_dimensions": [
                list(metric.dimension_names),
                list(metric.rollup_dimension_names),
            ],
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
