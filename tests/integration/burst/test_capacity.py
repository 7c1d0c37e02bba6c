"""Insufficient capacity on a real slurmctld (Debian slurm-wlm 22.05): EC2 is moto server behind
coreburst/sandbox/slurmlab.py's CapacityProxy, which answers CreateFleet on the on-demand pool's
launch
template the way EC2 answers an ``instant`` fleet it cannot fill (HTTP 200, no instance, an
``InsufficientInstanceCapacity`` item in ``errorSet``; EC2 API reference, CreateFleet; moto has
no notion of capacity, so this response is made up in that documented shape).

The job's resume fails fast (the node is DOWN with the error code and powered down, and the job
requeues well inside ResumeTimeout); a guardrails daemon cycle (burst-reconcile, under its gate)
then holds the pool for ``capacity_backoff`` in a MAINT reservation, so Slurm stops asking for
it; once capacity is back and the hold is gone the job runs on a burst node.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from coreburst.sandbox.emulator import fake_session
from coreburst.sandbox.slurmlab import BurstLab, burst_lab, missing_prerequisite
from guardrails.adapters.aws import Aws
from guardrails.config import load_config
from guardrails.daemon import Daemon
from guardrails.stores.sqlite import State

pytestmark = pytest.mark.integration

ICE = "InsufficientInstanceCapacity"


@pytest.fixture(scope="module", name="lab")
def lab_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BurstLab]:
    why = missing_prerequisite()
    if why:
        pytest.skip(why)
    with burst_lab(tmp_path_factory.mktemp("icelab"), capacity_proxy=True) as lab:
        yield lab


def _audit(lab: BurstLab) -> list[dict[str, object]]:
    path = lab.slurm.lab / "log" / "burst-audit.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def _job(lab: BurstLab, job: str) -> dict[str, str]:
    out = lab.slurm.run("scontrol", "-o", "show", "job", job).stdout
    return dict(t.partition("=")[::2] for t in out.split() if "=" in t)


def _guardrails_yaml(lab: BurstLab) -> Path:
    d = lab.slurm.lab
    path = d / "guardrails.yaml"
    path.write_text(
        "rules: [burst-reconcile]\ndry_run: false\n"
        f"aws: {{endpoint_url: {lab.moto.url}}}\n"
        f'state: {{path: "{d}/g.sqlite", audit_log: "{d}/log/g-audit.jsonl"}}\n'
        "metrics_endpoint: {enabled: false}\n"
        f'safety: {{kill_switch_file: "{d}/stop"}}\n'
        "burst_reconcile: {enabled: true, stack: lab, spend_scope: null, capacity_backoff: 10m, "
        f'slurm_conf: "{lab.slurm.conf}", burst_audit_log: "{d}/log/burst-audit.jsonl"}}\n'
    )
    return path


def _daemon_cycle(path: Path) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
    """One cycle of the guardrails daemon: (its audit events, the Slack outbox rows)."""
    cfg = load_config(path)
    log = cfg.state.audit_log
    before = log.read_text().count("\n") if log.exists() else 0
    state = State(cfg.state.path)
    d = Daemon(cfg, Aws(cfg.aws, fake_session()), state)
    try:
        report = d.run_cycle()
        outbox = [json.loads(r["payload"]) | {"key": r["dedupe_key"]} for r in state.outbox_rows()]
    finally:
        d.close()
        state.close()
    assert report.errors == []
    return [json.loads(x) for x in log.read_text().splitlines()[before:]], outbox


def test_capacity_error_requeues_at_once_then_the_pool_backs_off(lab: BurstLab) -> None:
    slurm, proxy = lab.slurm, lab.proxy
    assert proxy is not None
    (lt,) = lab.ec2.describe_launch_templates(LaunchTemplateNames=["od-lt-a1b2c3d"])[
        "LaunchTemplates"
    ]
    proxy.out_of_capacity.add(lt["LaunchTemplateId"])
    job = slurm.run(
        "sbatch", "--parsable", "-o", "/dev/null", "-p", "burst", "--exclusive", "-N1",
        "-t", "10", "--wrap", "sleep 1",
    ).stdout.strip().split(";")[0]  # fmt: skip
    try:
        lab.wait(
            "resume failure audited",
            lambda: any(e["event"] == "resume.failed" for e in _audit(lab)),
            20,
        )
        (failed,) = [e for e in _audit(lab) if e["event"] == "resume.failed"]
        node = str(failed["nodes"])
        assert node in ("od-1", "od-2") and failed["code"] == ICE
        assert proxy.refused == 1
        assert lab.instances(node, ("pending", "running", "terminated")) == []
        # Fast: requeued and powered down long before ResumeTimeout (40 s here).
        lab.wait(
            "job requeued, node powered down",
            lambda: (
                _job(lab, job)["JobState"] == "PENDING"
                and int(_job(lab, job).get("Restarts", "0")) >= 1
                and "POWERED_DOWN" in slurm.node_state(node)
                and "POWERING_DOWN" not in slurm.node_state(node)
            ),
            15,
        )
        assert f"(Code:{ICE})" in slurm.node(node).get("Reason", "")
        # The requeued job says why, in one line (issue 21: reasons on the job).
        shown = slurm.run("scontrol", "show", "job", job).stdout
        assert f"AdminComment=coreburst: burst launch for {node} failed ({ICE}); requeued" in shown

        # The daemon's cycle backs the pool off: both od nodes in one MAINT reservation.
        events, outbox = _daemon_cycle(_guardrails_yaml(lab))
        (hold,) = [e for e in events if e["event"] == "burst.hold"]
        resv = str(hold["reservation"])
        assert hold["pool"] == "od" and resv.startswith("coreburst-backoff-od-")
        shown = slurm.run("scontrol", "-o", "show", "reservation", resv).stdout
        assert "Nodes=od-[1-2]" in shown and "MAINT" in shown
        told = [r for r in outbox if r["key"] == f"burst-pool:{resv}"]
        assert len(told) == 1 and "Burst pool od backed off" in json.dumps(told)
        requests = [e for e in _audit(lab) if e["event"] == "resume.request"]
        # The requeue put BeginTime cred_expire (70 s) ahead: start it now; the hold alone
        # must keep Slurm from asking for the pool again.
        slurm.run("scontrol", "update", f"jobid={job}", "starttime=now")
        time.sleep(5)  # five power-save intervals and two backfill passes
        assert [e for e in _audit(lab) if e["event"] == "resume.request"] == requests
        assert _job(lab, job)["JobState"] == "PENDING"
        assert proxy.refused == 1

        # Capacity is back: the operator lifts the backoff with the documented command
        # instead of waiting it out; the next daemon cycle does not put it back.
        proxy.out_of_capacity.clear()
        out = slurm.burst_cli(
            "release-hold", "od", "--stack", "lab", "--stack-dir", str(slurm.lab),
            "--reason", "capacity back",
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == f"released pool od: deleted {resv}"
        assert resv not in slurm.run("scontrol", "show", "reservation").stdout
        (released,) = [e for e in _audit(lab) if e["event"] == "operator.released"]
        assert released["pool"] == "od" and released["reservations"] == [resv]
        events, _ = _daemon_cycle(_guardrails_yaml(lab))
        assert [e for e in events if e["event"] == "burst.hold"] == []
        assert "coreburst-backoff-od" not in slurm.run("scontrol", "show", "reservation").stdout
        lab.wait("job done on a burst node", lambda: _job(lab, job)["JobState"] == "COMPLETED", 90)
        assert _job(lab, job)["NodeList"] in ("od-1", "od-2")
        assert _job(lab, job)["NodeList"] in [n for n, _ in lab.watcher.boots]
    finally:
        proxy.out_of_capacity.clear()
        slurm.run("scancel", job, check=False)


def test_reconcile_returns_a_node_left_down_by_a_failed_resume_to_the_pool(lab: BurstLab) -> None:
    """A CLOUD node left ``down~`` with slurmctld's "ResumeTimeout reached" (as an earlier
    release of the resume-fail program left it) is back to ``idle~`` after one daemon cycle,
    with the reason kept in its Comment; a node an operator downed for another reason stays."""
    slurm = lab.slurm
    lab.power_down(["od-2", "sp-1"])  # the test before may have used them
    slurm.run("scontrol", "update", "nodename=od-2", "state=down", "reason=ResumeTimeout reached")
    slurm.run("scontrol", "update", "nodename=sp-1", "state=down", "reason=bad EFA, RMA 1234")
    try:
        assert "DOWN" in slurm.node_state("od-2") and "POWERED_DOWN" in slurm.node_state("od-2")
        events, _ = _daemon_cycle(_guardrails_yaml(lab))
        (rep,) = [e for e in events if e["event"] == "burst.repair"]
        assert rep["node"] == "od-2"
        state = slurm.node_state("od-2")
        assert "IDLE" in state.split("+") and "POWERED_DOWN" in state.split("+")
        assert "DOWN" not in state.split("+")
        shown = slurm.run("scontrol", "show", "node", "od-2").stdout
        assert "Comment=coreburst: returned to the pool after: ResumeTimeout reached" in shown
        assert "DOWN" in slurm.node_state("sp-1").split("+")
    finally:
        slurm.run("scontrol", "update", "nodename=sp-1", "state=resume", check=False)
