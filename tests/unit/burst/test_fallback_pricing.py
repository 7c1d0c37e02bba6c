"""A pool with fallback types is priced the same by ``coreburst plan`` and by the resume
program's spend gate: at the dearest type it may launch as, since the gate must never reserve
less than the launch can cost (issue 32 item 4). Prices come from the catalog
(coreburst/common/data/catalog.yaml); the stack and guardrails.yaml are made up here, their keys
following infra/config.py, coreburst/burst/config.py and guardrails/config.py."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from coreburst.burst.config import parse_burst
from coreburst.burst.cost import pool_rates
from coreburst.burst.gate import Gate
from coreburst.burst.slurmconf import node_set_of
from coreburst.common.catalog import load_catalog
from coreburst.plan import build_report, to_json, to_markdown
from guardrails.stores.sqlite import State
from tests.helpers.burst import stack_map, with_on_prem

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
CAT = load_catalog()
POOL = {
    "name": "od",
    "instanceType": "p5.48xlarge",
    "fallbackInstanceTypes": ["p5e.48xlarge"],
    "nodes": 4,
    "capacity": {"model": "on-demand"},
}


class _Side:
    """What the gate asks the Slurm side: a job's time limit in hours."""

    def __init__(self, hours: float) -> None:
        self.hours = hours

    def job_hours(self, job_id: str) -> float:
        return self.hours


def _burst(tmp_path: Path) -> dict[str, Any]:
    g = tmp_path / "guardrails.yaml"
    g.write_text(
        yaml.safe_dump(
            {
                "state": {"path": str(tmp_path / "state.sqlite")},
                "spend": {"scopes": [{"name": "account", "daily_limit_usd": 1_000_000}]},
            }
        )
    )
    return {
        "coreNodes": "dgx[01-04]",
        "maxTime": "1-00:00:00",
        "auditLog": str(tmp_path / "a.jsonl"),
        "spendGate": {"guardrailsConfig": str(g)},
    }


def test_plan_and_gate_price_a_p5_pool_with_a_p5e_fallback_alike(tmp_path: Path) -> None:
    stack = parse_burst("t", stack_map([POOL], _burst(tmp_path)))
    p5e = CAT.hourly_price("p5e.48xlarge", "us-east-1", "on-demand")
    assert p5e > CAT.hourly_price("p5.48xlarge", "us-east-1", "on-demand")
    (pool,) = pool_rates(stack)
    assert pool.priced_type == "p5e.48xlarge"
    assert pool.instance_usd_per_node_hour == pytest.approx(p5e)
    assert pool.max_projection_usd == pytest.approx(4 * p5e * 24)

    store = State(tmp_path / "state.sqlite")
    store.add_spend(NOW, "account", burn=0.0, today=0.0, mtd=0.0, proj=0.0)
    events: list[dict[str, Any]] = []
    gate = Gate(
        stack,
        slurm=None,  # type: ignore[arg-type]  # check() only reads and commits
        audit=lambda event, **kw: events.append({"event": event, **kw}),
        now=lambda: NOW,
        nodes_of=node_set_of(stack),
        side=_Side(24.0),  # type: ignore[arg-type]
        store=store,
    )
    names = ["od-1", "od-2", "od-3", "od-4"]
    cost, why = gate.check(names, [("7", names)])
    assert why is None
    # the gate reserves for the job on every node for MaxTime what the plan says it may cost
    assert cost == pytest.approx(pool.max_projection_usd)
    (committed,) = [e for e in events if e["event"] == "spend.committed"]
    assert committed["usd"] == pytest.approx(round(pool.max_projection_usd or 0, 2))


def test_the_plan_says_which_type_it_priced(tmp_path: Path) -> None:
    root = tmp_path / "stacks"
    root.mkdir()
    config = with_on_prem(stack_map([POOL], {**_burst(tmp_path), "node": {"confServer": "c"}}))
    (root / "Pulumi.fb.yaml").write_text(yaml.safe_dump({"config": config}))
    report = build_report("fb", root=root)
    assert (
        "4 x p5.48xlarge on-demand (priced as p5e.48xlarge, the dearest type it may launch)"
        in to_markdown(report)
    )
    (pool,) = to_json(report)["burst"]["pools"]
    assert (pool["instanceType"], pool["pricedAs"]) == ("p5.48xlarge", "p5e.48xlarge")
