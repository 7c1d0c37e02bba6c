"""The guardrails daemon against a moto server and a webhook receiver on loopback: its config
there, the metric names the emulator publishes, and a fleet made to be reclaimed."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from coreburst.common.telemetry import UTILIZATION_METRICS
from coreburst.sandbox.emulator import FleetNode, launch, launch_asg, publish

METRICS = {
    k: (m.namespace, m.metric_name, m.device_dimension) for k, m in UTILIZATION_METRICS.items()
}


def config_text(endpoint: str, tmp: Path, extra: str = "") -> str:
    return f"""
regions: [us-east-1, us-east-2]
dry_run: false
aws: {{endpoint_url: "{endpoint}", max_attempts: 2, connect_timeout_s: 2}}
idle: {{window: 30m, max_gap: 5m}}
reclaim: {{grace: 20m}}
safety: {{kill_switch_file: "{tmp}/stop"}}
spend:
  spot_price: catalog-estimate
  cost_explorer: false
  direct_connect_ports: []
  include_lustre: false
  scopes: [{{name: account}}]
egress: {{enabled: false}}
slack: {{backoff_base: 1s}}
state: {{path: "{tmp}/state.sqlite", audit_log: "{tmp}/audit.jsonl"}}
metrics_endpoint: {{enabled: false}}
{extra}
"""


def fleet(h: Any) -> dict[str, FleetNode]:
    e1, e2 = h.client("ec2"), h.client("ec2", "us-east-2")
    n: dict[str, FleetNode] = {}
    n["od"] = FleetNode(
        launch(e1, "p5.48xlarge", {"owner": "alice"})[0], "us-east-1", "nvidia", 8, "idle"
    )
    n["spot"] = FleetNode(
        launch(e1, "p5.48xlarge", {"owner": "bob"}, spot=True)[0], "us-east-1", "nvidia", 8, "idle"
    )
    n["asg"] = FleetNode(
        launch_asg(e1, h.client("autoscaling"), "burst", "p5.48xlarge", {"owner": "ci"}),
        "us-east-1",
        "nvidia",
        8,
        "idle",
    )
    n["busy"] = FleetNode(
        launch(e1, "p5.48xlarge", {"owner": "carol"})[0], "us-east-1", "nvidia", 8, "one-idle"
    )
    n["blind"] = FleetNode(
        launch(e1, "p5en.48xlarge", {"owner": "dave"})[0], "us-east-1", "nvidia", 8, "missing"
    )
    # trn2 publishes only the neuron metric: busy must be seen as busy
    n["trn"] = FleetNode(
        launch(e2, "trn2.48xlarge", {"owner": "erin"})[0], "us-east-2", "neuron", 4, "busy"
    )
    return n


def cws(h: Any) -> dict[str, Any]:
    return {r: h.client("cloudwatch", r) for r in ("us-east-1", "us-east-2")}


def step(h: Any, nodes: list[FleetNode], t_from: datetime, **kw: Any) -> Any:
    now = h.clock.now()
    publish(cws(h), nodes, t_from, now + timedelta(minutes=1), metric_defs=METRICS, **kw)
    return h.daemon.run_cycle()
