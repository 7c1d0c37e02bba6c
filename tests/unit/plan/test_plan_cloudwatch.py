"""``coreburst plan`` shows the guardrails' own CloudWatch bill a day for the stack's fleet
(issue 23, item 4), each term and the all-in figure, from coreburst/common/cloudwatch_cost.py
at the daemon's default cadence (guardrails/config.py: idle.every, egress.every).

The stack below is the shipped dev stack (2 x p5.48xlarge) with ``perDeviceMetrics`` switched on
for one variant; its keys follow infra/config.py (Cluster).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml
from rich.console import Console

from coreburst.common.catalog import load_catalog
from coreburst.common.cloudwatch_cost import Cadence, FleetGroup, bill
from coreburst.plan import build_report, print_table, to_json, to_markdown
from infra.offline import load_stack_yaml

DEFAULT = Cadence(idle_every_s=300, egress_every_s=900)


@pytest.mark.parametrize("per_device", [False, True])
def test_plan_prints_each_cloudwatch_term_and_the_all_in(tmp_path: Path, per_device: bool) -> None:
    cfg = copy.deepcopy(load_stack_yaml("dev"))
    cfg["coreburst:clusters"][0]["perDeviceMetrics"] = per_device
    (tmp_path / "Pulumi.cw.yaml").write_text(yaml.safe_dump({"config": cfg}))
    report = build_report("cw", root=tmp_path)
    want = bill([FleetGroup("p5.48xlarge", 2, per_device)], load_catalog(), DEFAULT)
    assert report.cloudwatch == want
    assert want.custom_metrics == (18 if per_device else 2)
    doc = json.loads(json.dumps(to_json(report)))["cloudwatchPerDay"]
    assert doc["customMetrics"] == want.custom_metrics
    assert doc["putMetricDataRequests"] == 2 * 288  # an agent flush every 5 min
    # each busy node's rollup (2 metrics) every 25 min, NetworkOut every 15 min
    assert doc["getMetricDataMetrics"] == round(2 * (2 * 57.6 + 96))
    assert doc["totalUsd"] == round(want.total_usd_day, 2) and doc["unverified"] is True
    md = to_markdown(report)
    line = next(x for x in md.splitlines() if x.startswith("guardrails' CloudWatch per day"))
    for term in ("custom metrics", "PutMetricData", "GetMetricData"):
        assert term in line
    assert f"${want.total_usd_day:,.2f}" in line and "unverified" in line
    console = Console(record=True, width=300)
    print_table(report, console)
    assert line in console.export_text()
