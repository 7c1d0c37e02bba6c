"""The spend gate on a real slurmctld (Debian slurm-wlm 22.05), EC2 on moto server, and the
guardrails daemon's own SQLite state (guardrails.state.State) as the spend source.

A job whose projected cost (1 node x p5.48xlarge on-demand $/h from the catalog x its 60 min
time limit) exceeds what the scope has left today is not launched: the resume program sets its
node into a MAINT reservation (so slurmctld stops asking for it), sets it DOWN (the job
requeues) and powers it down. When the limit rises, ``Power.release_spend_holds`` deletes the
reservation, slurmctld runs the resume program again, and the job runs on a burst node.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from burst.config import load_burst_stack
from burst.power import SPEND_HOLD_RESERVATION, Audit, Power, Scontrol
from common.catalog import load_catalog
from common.pricing import instance_rate
from guardrails.state import State
from sandbox.slurmlab import BurstLab

pytestmark = pytest.mark.integration


def _audit(lab: BurstLab) -> list[dict[str, object]]:
    path = lab.slurm.lab / "log" / "burst-audit.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def _job(lab: BurstLab, job: str) -> dict[str, str]:
    out = lab.slurm.run("scontrol", "-o", "show", "job", job).stdout
    return dict(t.partition("=")[::2] for t in out.split() if "=" in t)


def _set_gate(stack_file: Path, original: str, state: Path, daily_limit: float) -> None:
    gate = f"    spendGate: {{statePath: {state}, scope: account, dailyLimitUsd: {daily_limit}}}\n"
    stack_file.write_text(original + gate)


def test_gate_holds_then_releases_when_the_limit_rises(
    burst_lab: BurstLab, monkeypatch: pytest.MonkeyPatch
) -> None:
    lab, slurm = burst_lab, burst_lab.slurm
    rate, _ = instance_rate(load_catalog(), "p5.48xlarge", "us-east-1", "on-demand")
    spent = 900.0
    state_path = slurm.lab / "guardrails-state.sqlite"
    store = State(state_path)  # what the daemon writes each cycle (rules/spend_limit.py)
    store.add_spend(datetime.now(UTC), "account", burn=0.0, today=spent, mtd=spent, proj=spent * 30)
    store.db.close()
    stack_file = slurm.lab / "Pulumi.lab.yaml"
    original = stack_file.read_text()
    # One hour of one node does not fit what is left today (half an hour's worth).
    _set_gate(stack_file, original, state_path, spent + rate / 2)
    job = ""
    try:
        job = slurm.run(
            "sbatch", "--parsable", "-o", "/dev/null", "-p", "burst", "--exclusive", "-N1",
            "-t", "60", "--wrap", "sleep 2",
        ).stdout.strip().split(";")[0]  # fmt: skip
        lab.wait(
            "resume held",
            lambda: any(e["event"] == "resume.held" for e in _audit(lab)),
            20,
        )
        held = next(e for e in _audit(lab) if e["event"] == "resume.held")
        node = str(held["nodes"])
        assert node in ("od-1", "od-2")
        assert held["jobs"] == [int(job)] or held["jobs"] == [job]
        assert held["cost_usd"] == pytest.approx(rate, abs=0.01)
        assert "left today (account)" in str(held["reason"])
        assert lab.instances(node, ("pending", "running", "terminated")) == []
        assert not any(e["event"] == "resume.launched" for e in _audit(lab))
        resv = str(held["reservation"])
        assert resv.startswith(SPEND_HOLD_RESERVATION)
        shown = slurm.run("scontrol", "-o", "show", "reservation", resv).stdout
        assert f"Nodes={node}" in shown and "MAINT" in shown
        lab.wait(
            "job requeued, node powered down",
            lambda: (
                _job(lab, job)["JobState"] == "PENDING"
                and "POWERED_DOWN" in slurm.node_state(node)
                and "POWERING_DOWN" not in slurm.node_state(node)
            ),
            20,
        )
        assert int(_job(lab, job).get("Restarts", "0")) >= 1
        # The requeue set the job's BeginTime cred_expire (70 s here) ahead: start it now, so
        # only the hold keeps Slurm from powering a node up for it.
        slurm.run("scontrol", "update", f"jobid={job}", "starttime=now")
        # Slurm asks for the partition's other node, which the gate holds too; then, with
        # every burst node reserved, it asks no more.
        other = ({"od-1", "od-2"} - {node}).pop()
        lab.wait(
            f"{other} held too",
            lambda: any(e["event"] == "resume.held" and e["nodes"] == other for e in _audit(lab)),
            20,
        )
        requests = [e for e in _audit(lab) if e["event"] == "resume.request"]
        assert [e["nodes"] for e in requests] == [node, other]
        time.sleep(5)  # five power-save intervals and two backfill passes
        assert [e for e in _audit(lab) if e["event"] == "resume.request"] == requests
        assert _job(lab, job)["JobState"] == "PENDING"
        assert lab.instances(node) == [] and lab.instances(other) == []

        monkeypatch.setenv("SLURM_CONF", str(slurm.conf))
        power = Power(
            load_burst_stack("lab", slurm.lab),
            lab.ec2,
            Scontrol(),
            Audit(slurm.lab / "log" / "burst-audit.jsonl"),
        )
        assert power.release_spend_holds() == []  # still no room: the hold stays
        assert resv in slurm.run("scontrol", "show", "reservation").stdout

        _set_gate(stack_file, original, state_path, spent + rate * 3)
        power = Power(
            load_burst_stack("lab", slurm.lab),
            lab.ec2,
            Scontrol(),
            Audit(slurm.lab / "log" / "burst-audit.jsonl"),
        )
        assert sorted(power.release_spend_holds()) == ["od-1", "od-2"]
        assert resv not in slurm.run("scontrol", "show", "reservation").stdout
        assert any(e["event"] == "spend.released" for e in _audit(lab))
        # The second hold requeued the job again (BeginTime 70 s ahead once more).
        slurm.run("scontrol", "update", f"jobid={job}", "starttime=now")
        lab.wait("job done on a burst node", lambda: _job(lab, job)["JobState"] == "COMPLETED", 90)
        assert _job(lab, job)["NodeList"] in ("od-1", "od-2")
        assert _job(lab, job)["NodeList"] in [n for n, _ in lab.watcher.boots]
        launched = [e for e in _audit(lab) if e["event"] == "resume.launched"]
        assert len(launched) == 1
    finally:
        stack_file.write_text(original)
        if job:
            slurm.run("scancel", job, check=False)
