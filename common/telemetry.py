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


# Published by the Neuron publisher (common/neuron_report.py, installed by the launch template)
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


def cloudwatch_agent_config(metrics_interval_s: int = 60) -> str:
    """CloudWatch agent JSON that publishes per-GPU utilization with exactly the dimension set
    in ``UTILIZATION_METRICS['nvidia']`` (InstanceId + index, nothing else)."""
    metric = UTILIZATION_METRICS["nvidia"]
    config = {
        "agent": {"metrics_collection_interval": metrics_interval_s},
        "metrics": {
            "namespace": metric.namespace,
            "append_dimensions": {"InstanceId": "${aws:InstanceId}"},
            # Roll the plugin's extra dimensions (host, name, arch) up to the exact set the
            # guardrails query.
            "aggregation_dimensions": [list(metric.dimension_names)],
            "metrics_collected": {
                "nvidia_gpu": {
                    "measurement": [
                        "utilization_gpu",
                        "memory_used",
                        "power_draw",
                        "temperature_gpu",
                    ],
                    "metrics_collection_interval": metrics_interval_s,
                }
            },
        },
    }
    return json.dumps(config, indent=2)
