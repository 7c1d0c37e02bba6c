"""``coreburst plan`` on a burst stack: the clusters' Auto Scaling groups hold no instance (Slurm
starts the nodes through the resume program), so the plan prices the burst nodes per
node-hour, per pool, with the largest projection the spend gate can be asked to approve,
instead of showing the GPU nodes at $0. Prices are worked out here by hand from the catalog.

The stack and guardrails.yaml below are made up for these tests; their keys follow
infra/config.py (StackConfig, BurstSection), coreburst/burst/config.py (BurstSettings) and
guardrails/config.py (spend.scopes, burst_reconcile.spend_scope).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from rich.console import Console

from coreburst.common.catalog import load_catalog
from coreburst.plan import BURST_NOTE, build_report, print_table, to_json, to_markdown
from infra.config import StackConfigError
from infra.cost import estimate_stack, totals
from infra.offline import evaluate_config, load_stack_yaml
from policies.pricing import price_resources
from policies.sources import from_offline
from tests.helpers.burst import with_on_prem

CAT = load_catalog()
H = CAT.hours_per_month


def _burst_config(tmp_path: Path, gate: bool = True, daily: float = 5000) -> dict[str, Any]:
    cfg = copy.deepcopy(load_stack_yaml("dev"))  # dev-p5: 2 x p5.48xlarge spot, 512 GiB root
    burst: dict[str, Any] = {
        "coreNodes": "dgx[01-04]",
        "node": {"confServer": "slurmctl.corp.example:6817"},
    }
    if gate:
        g = tmp_path / "guardrails.yaml"
        g.write_text(
            yaml.safe_dump(
                {
                    "state": {"path": str(tmp_path / "g.db")},
                    "spend": {
                        "scopes": [
                            {"name": "burst", "daily_limit_usd": daily, "monthly_limit_usd": 90000}
                        ]
                    },
                    "burst_reconcile": {"spend_scope": "burst"},
                }
            )
        )
        burst["spendGate"] = {"guardrailsConfig": str(g)}
    cfg["coreburst:burst"] = burst
    return with_on_prem(cfg)


def _write(root: Path, name: str, config: dict[str, Any]) -> None:
    (root / f"Pulumi.{name}.yaml").write_text(yaml.safe_dump({"config": config}))


def _p5_spot() -> float:
    od = CAT.instance("p5.48xlarge").on_demand_usd_per_hour["us-east-1"].value
    return od * CAT.spot_fraction_of_on_demand.value


def test_burst_pools_are_priced_per_node_hour_not_zero(tmp_path: Path) -> None:
    """The ASG line is $0 and says why; the burst table prices a node-hour (instance + its
    512 GiB gp3 root volume), the pool's hour, and 2 nodes x $/h x 168 h (MaxTime a week)."""
    _write(tmp_path, "bx", _burst_config(tmp_path))
    report = build_report("bx", root=tmp_path)
    (asg,) = [x for x in report.lines if x.item == "dev-p5-asg"]
    assert asg.hourly_usd == 0.0 and BURST_NOTE in asg.detail
    assert report.burst is not None
    (pool,) = report.burst.pools
    rate = _p5_spot()
    volume = 512 * CAT.ebs_gp3_usd_per_gb_month.value / H
    assert (pool.cluster, pool.partition, pool.market, pool.nodes) == ("dev-p5", "spot", "spot", 2)
    assert pool.instance_usd_per_node_hour == pytest.approx(rate)
    assert pool.usd_per_node_hour == pytest.approx(rate + volume)
    assert pool.usd_per_hour_all_nodes == pytest.approx(2 * (rate + volume))
    assert pool.max_projection_usd == pytest.approx(2 * rate * 168)
    assert pool.usd_per_node_hour > 0

    doc = to_json(report)
    json.dumps(doc, allow_nan=False)
    (jp,) = doc["burst"]["pools"]
    assert jp["usdPerNodeHour"] == pytest.approx(rate + volume, abs=1e-4)
    assert jp["maxTime"] == "7-00:00:00"
    assert doc["burst"]["spendGate"]["scope"] == "burst"
    assert doc["burst"]["spendGate"]["dailyLimitUsd"] == 5000
    md = to_markdown(report)
    assert "billed per node-hour" in md and f"{rate + volume:,.3f}" in md
    assert "spend gate: scope burst, $5,000.00 a day and $90,000.00 a month" in md
    # 2 x $/h x 168 h is over $5,000 a day: such a job would wait for good; the plan says so.
    assert 2 * rate * 168 > 5000
    assert (
        f"warning: pool dev-p5: a job on all 2 nodes for MaxTime 7-00:00:00 projects "
        f"${2 * rate * 168:,.2f}, over the $5,000.00 a day limit" in md
    )
    assert doc["burst"]["spendGateNotes"][1].startswith("warning: pool dev-p5")

    console = Console(record=True, width=200)
    print_table(report, console)
    text = console.export_text()
    assert f"{rate + volume:,.3f}" in text and "spend gate: scope burst" in text


def test_gate_config_not_on_this_machine_is_said_not_fatal(tmp_path: Path) -> None:
    """The guardrails.yaml usually lives on the controller: the plan still prices the pools
    and says the limits cannot be read here."""
    cfg = _burst_config(tmp_path)
    (tmp_path / "guardrails.yaml").unlink()
    _write(tmp_path, "bx", cfg)
    report = build_report("bx", root=tmp_path)
    assert report.burst is not None and report.burst.gate is not None
    assert report.burst.gate.scope is None and report.burst.gate.unreadable
    assert "not readable here" in to_markdown(report)


def test_no_gate_says_slurm_may_start_every_node(tmp_path: Path) -> None:
    _write(tmp_path, "bx", _burst_config(tmp_path, gate=False))
    report = build_report("bx", root=tmp_path)
    assert report.burst is not None and report.burst.gate is None
    assert to_json(report)["burst"]["spendGate"] is None
    assert "spend gate: none" in to_markdown(report)


def test_plain_stack_has_no_burst_section() -> None:
    report = build_report("dev")
    assert report.burst is None and to_json(report)["burst"] is None
    assert all(BURST_NOTE not in x.detail for x in report.lines)


def test_stack_outputs_agree_with_the_plan_on_a_burst_stack(tmp_path: Path) -> None:
    """The program's estimatedCostPer*Usd outputs (infra/cost.py, from the config) and the
    plan (policies/pricing.py, from the resources: the ASG's desiredCapacity 0) price a burst
    stack the same: no GPU instance in the fixed cost. Before, the outputs counted every
    burst node running all month."""
    ev = evaluate_config("dev", _burst_config(tmp_path))
    from_config = {x.item: round(x.monthly_usd, 6) for x in estimate_stack(ev.config, CAT)}
    from_resources = {
        x.item: round(x.monthly_usd, 6)
        for x in price_resources(from_offline(ev.resources, "dev"), CAT)
    }
    assert from_config == from_resources
    assert from_config["dev-p5-asg"] == 0.0 and "dev-p5-asg/volumes" not in from_config
    _, monthly = totals(estimate_stack(ev.config, CAT))
    assert ev.outputs["estimatedCostPerMonthUsd"] == round(monthly, 2)


def test_no_warning_when_the_largest_job_fits_the_limits(tmp_path: Path) -> None:
    _write(tmp_path, "bx", _burst_config(tmp_path, daily=50000))
    report = build_report("bx", root=tmp_path)
    assert report.burst is not None
    assert "warning:" not in to_markdown(report)
    assert len(to_json(report)["burst"]["spendGateNotes"]) == 1


def test_a_bad_burst_setting_is_one_line(tmp_path: Path) -> None:
    """A key only the Slurm side reads (infra's BurstSection lets it through) is still checked:
    the plan stops with coreburst/burst/config.py's one-line message (the CLI prints it, exit 2)."""
    cfg = _burst_config(tmp_path)
    cfg["coreburst:burst"]["maxTime"] = "a week"
    _write(tmp_path, "bx", cfg)
    with pytest.raises(StackConfigError) as err:
        build_report("bx", root=tmp_path)
    msg = str(err.value)
    assert msg.startswith("coreburst:burst.maxTime: ") and "\n" not in msg
