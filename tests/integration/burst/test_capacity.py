"""Insufficient capacity on a real slurmctld (Debian slurm-wlm 22.05): EC2 is moto server behind
coreburst/sandbox/slurmlab.py's CapacityProxy, which answers CreateFleet on the on-demand pool's
launch
template the way EC2 answers an ``instant`` fleet it cannot fill (HTTP 200, no instance, an
``InsufficientInstanceCapacity`` item in ``errorSet``; EC2 API reference, CreateFleet; moto has
no notion of capacity, so this response is made up in that documented shape).

The proxy also answers CreateFleet Overrides as EC2 documents them: an (instance type, zone)
in ``no_capacity`` is skipped and the next Override in priority order is used; none left is
the documented error answer (UnfulfillableCapacity, then one InsufficientInstanceCapacity per
Override). moto itself launches only the first Override.

The job's resume fails fast (the node is DOWN with the error code and powered down, and the job
requeues well inside ResumeTimeout); the resume program holds the pool at once in a MAINT
reservation, so Slurm stops asking for it, and the guardrails daemon tells Slack; once capacity
is back and the hold is lifted the job runs on a burst node.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from coreburst.sandbox.emulator import fake_session
from coreburst.sandbox.slurmlab import BurstLab, burst_lab, missing_prerequisite
from guardrails.adapters.aws import Aws
from guardrails.configfile import load_config
from guardrails.daemon import Daemon
from guardrails.stores.sqlite import State
from tests.helpers.prereq import require

pytestmark = pytest.mark.integration

ICE = "InsufficientInstanceCapacity"


@pytest.fixture(scope="module", name="lab")
def lab_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BurstLab]:
    require(missing_prerequisite())
    with burst_lab(tmp_path_factory.mktemp("icelab"), capacity_proxy=True) as lab:
        yield lab


def _audit(lab: BurstLab) -> list[dict[str, object]]:
    path = lab.slurm.lab / "log" / "burst-audit.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def _job(lab: BurstLab, job: str) -> dict[str, str]:
    out = lab.slurm.run("scontrol", "-o", "show", "job", job).stdout
    return dict(t.partition("=")[::2] for t in out.split() if "=" in t)


def _guardrails_yaml(lab: BurstLab, extra: str = "") -> Path:
    d = lab.slurm.lab
    path = d / "guardrails.yaml"
    path.write_text(
        "rules: [burst-reconcile]\ndry_run: false\n"
        f"aws: {{endpoint_url: {lab.moto.url}}}\n"
        f'state: {{path: "{d}/g.sqlite", audit_log: "{d}/log/g-audit.jsonl"}}\n'
        "metrics_endpoint: {enabled: false}\n"
        f'safety: {{kill_switch_file: "{d}/stop"}}\n'
        "burst_reconcile: {enabled: true, stack: lab, spend_scope: null, "
        f"{extra}"
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


def _instance(lab: BurstLab, node: str) -> dict[str, object]:
    resp = lab.ec2.describe_instances(
        Filters=[
            {"Name": "tag:coreburst-slurm-node", "Values": [node]},
            {"Name": "instance-state-name", "Values": ["pending", "running"]},
        ]
    )
    (inst,) = [i for r in resp["Reservations"] for i in r["Instances"]]
    return dict(inst)


def _sbatch(lab: BurstLab, *args: str) -> str:
    out = lab.slurm.run("sbatch", "--parsable", "-o", "/dev/null", *args)
    return out.stdout.strip().split(";")[0]


def test_no_capacity_for_the_type_or_the_zone_falls_back_within_the_same_request(
    lab: BurstLab,
) -> None:
    """Pool od is p5 with p5e as fallback, in us-east-1a then us-east-1b (the lab stack).
    No p5 in us-east-1a: the job runs on a p5e there; then no p5e there either: the next job
    runs on a p5 in us-east-1b. One CreateFleet each, Overrides in that order (EC2 API
    reference, CreateFleet: ``prioritized`` takes the Overrides by Priority). The first job
    asks for typed GPUs, --gres=gpu:h100:8, as it would on an H100 core: the pool's nodes are
    typed by instanceType (Gres=gpu:h100:8), so Slurm gives it one."""
    slurm, proxy = lab.slurm, lab.proxy
    assert proxy is not None
    proxy.no_capacity = {("p5.48xlarge", "us-east-1a")}
    seen = len(proxy.choices_seen)
    jobs = []
    try:
        jobs.append(
            _sbatch(
                lab,
                "-p",
                "burst",
                "--exclusive",
                "-N1",
                "-t",
                "10",
                "--gres=gpu:h100:8",
                "--wrap",
                "sleep 30",
            )
        )
        lab.wait("first job running", lambda: _job(lab, jobs[0])["JobState"] == "RUNNING", 60)
        first = _job(lab, jobs[0])["NodeList"]
        inst = _instance(lab, first)
        assert inst["InstanceType"] == "p5e.48xlarge"
        assert inst["Placement"]["AvailabilityZone"] == "us-east-1a"  # type: ignore[index]
        assert proxy.choices_seen[seen] == [
            ("p5.48xlarge", "us-east-1a"),
            ("p5e.48xlarge", "us-east-1a"),
            ("p5.48xlarge", "us-east-1b"),
            ("p5e.48xlarge", "us-east-1b"),
        ]
        proxy.no_capacity.add(("p5e.48xlarge", "us-east-1a"))
        jobs.append(
            _sbatch(lab, "-p", "burst", "--exclusive", "-N1", "-t", "10", "--wrap", "sleep 1")
        )
        lab.wait(
            "second job running",
            lambda: _job(lab, jobs[1])["JobState"] in ("RUNNING", "COMPLETED"),
            60,
        )
        second = _job(lab, jobs[1])["NodeList"]
        assert second != first
        inst = _instance(lab, second)
        assert inst["InstanceType"] == "p5.48xlarge"
        assert inst["Placement"]["AvailabilityZone"] == "us-east-1b"  # type: ignore[index]
        assert len(proxy.choices_seen) == seen + 2  # one CreateFleet per job
        assert not [e for e in _audit(lab) if e["event"] in ("resume.failed", "resume.backoff")]
    finally:
        proxy.no_capacity = set()
        for j in jobs:
            slurm.run("scancel", j, check=False)
        lab.power_down(["od-1", "od-2"])


def test_capacity_error_requeues_at_once_and_the_pool_backs_off_at_once(lab: BurstLab) -> None:
    """No capacity in any type or zone of pool od: the resume program fails the node (the
    job requeues at once), backs every choice off and holds the pool in a MAINT reservation
    itself, so Slurm asks for no od node again while it lasts; the daemon tells Slack."""
    slurm, proxy = lab.slurm, lab.proxy
    assert proxy is not None
    proxy.no_capacity = {
        (t, z) for t in ("p5.48xlarge", "p5e.48xlarge") for z in ("us-east-1a", "us-east-1b")
    }
    refused = proxy.refused
    n_audit = len(_audit(lab))
    job = _sbatch(lab, "-p", "burst", "--exclusive", "-N1", "-t", "10", "--wrap", "sleep 1")
    try:
        lab.wait(
            "resume failure and pool hold audited",
            lambda: any(e["event"] == "resume.pool_held" for e in _audit(lab)[n_audit:]),
            30,
        )
        new = _audit(lab)[n_audit:]
        (failed,) = [e for e in new if e["event"] == "resume.failed"]
        node = str(failed["nodes"])
        assert node in ("od-1", "od-2") and failed["code"] == ICE
        assert failed["error_class"] == "capacity"
        # the one capacity back-off (coreburst:burst.capacityBackoffS, its default in the lab's
        # stack): the daemon holds a pool as long as the failure says
        assert failed["backoff_s"] == 600
        assert proxy.refused == refused + 1
        (backoff,) = [e for e in new if e["event"] == "resume.backoff"]
        assert len(backoff["choices"]) == 4  # type: ignore[arg-type]
        (held,) = [e for e in new if e["event"] == "resume.pool_held"]
        resv = str(held["reservation"])
        assert held["pool"] == "od" and resv.startswith("coreburst-backoff-od-")
        shown = slurm.run("scontrol", "-o", "show", "reservation", resv).stdout
        assert "Nodes=od-[1-2]" in shown and "MAINT" in shown
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
        shown = slurm.run("scontrol", "show", "job", job).stdout
        assert f"AdminComment=coreburst: burst launch for {node} failed ({ICE}: capacity)" in shown
        # Slurm pushed the requeued job's BeginTime a credential lifetime ahead (70 s here,
        # 121 s by default): start it now; the hold alone must keep Slurm off the pool.
        requests = [e for e in _audit(lab) if e["event"] == "resume.request"]
        slurm.run("scontrol", "update", f"jobid={job}", "starttime=now")
        time.sleep(5)  # five power-save intervals and two backfill passes
        assert [e for e in _audit(lab) if e["event"] == "resume.request"] == requests
        assert _job(lab, job)["JobState"] == "PENDING"
        assert proxy.refused == refused + 1

        # The daemon's cycle places nothing more and tells Slack of the hold, once.
        events, outbox = _daemon_cycle(_guardrails_yaml(lab))
        assert [e for e in events if e["event"] == "burst.hold"] == []
        told = [r for r in outbox if r["key"] == f"burst-pool:{resv}"]
        assert len(told) == 1 and "Burst pool od backed off" in json.dumps(told)
        _, outbox = _daemon_cycle(_guardrails_yaml(lab))
        assert len([r for r in outbox if r["key"] == f"burst-pool:{resv}"]) == 1

        # Capacity is back: the operator lifts the backoff with the documented command.
        proxy.no_capacity = set()
        out = slurm.burst_cli(
            "release-hold", "od", "--stack", "lab", "--stack-dir", str(slurm.lab),
            "--reason", "capacity back",
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == f"released pool od: deleted {resv}"
        assert resv not in slurm.run("scontrol", "show", "reservation").stdout
        (released,) = [e for e in _audit(lab) if e["event"] == "operator.released"]
        assert released["pool"] == "od" and released["reservations"] == [resv]
        assert released["choices_lifted"] == 4
        events, _ = _daemon_cycle(_guardrails_yaml(lab))
        assert [e for e in events if e["event"] == "burst.hold"] == []
        assert "coreburst-backoff-od" not in slurm.run("scontrol", "show", "reservation").stdout
        again = _sbatch(lab, "-p", "burst", "--exclusive", "-N1", "-t", "10", "--wrap", "sleep 1")
        lab.wait(
            "job done on a burst node", lambda: _job(lab, again)["JobState"] == "COMPLETED", 90
        )
        assert _job(lab, again)["NodeList"] in ("od-1", "od-2")
    finally:
        proxy.no_capacity = set()
        slurm.run("scancel", job, check=False)


def test_reconcile_returns_a_node_left_down_by_a_failed_resume_to_the_pool(lab: BurstLab) -> None:
    """A CLOUD node left ``down~`` with slurmctld's "ResumeTimeout reached" (as an earlier
    release of the resume-fail program left it) is back to ``idle~`` after one daemon cycle,
    with the reason kept in its Comment; a node an operator downed for another reason stays."""
    slurm = lab.slurm
    lab.power_down(["od-2", "sp-1"])  # the test before may have used them
    # Slurm counts a node powered down after SuspendTimeout, whether or not its suspend program
    # has ended the instance yet (under load it had not, seen on 26.05): a node whose instance
    # still runs is not one a failed resume left behind.
    lab.wait("no instance for od-2", lambda: lab.instances("od-2") == [], 30)
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


def test_a_job_waiting_too_long_for_spot_falls_back_to_on_demand(lab: BurstLab) -> None:
    """The spot pool is held (as after a spot capacity failure): a job submitted to the spot
    partition only waits; once it has waited spot_fallback_after, a daemon cycle adds the
    on-demand partition, and the job runs on an on-demand node (the resume program's spend
    gate, when configured, still decides the launch)."""
    slurm = lab.slurm
    resv = f"coreburst-backoff-sp-{int(time.time() * 1000)}"
    slurm.run(
        "scontrol", "create", "reservation", f"ReservationName={resv}", "Nodes=sp-1",
        "Users=root", "Flags=MAINT,IGNORE_JOBS", "StartTime=now", "Duration=10",
    )  # fmt: skip
    job = _sbatch(lab, "-p", "spot", "--exclusive", "-N1", "-t", "10", "--wrap", "sleep 1")
    try:
        path = _guardrails_yaml(lab, "spot_fallback: true, spot_fallback_after: 10s, ")
        events, _ = _daemon_cycle(path)  # too early: nothing changes
        assert [e for e in events if e["event"] == "burst.spot_fallback"] == []
        assert _job(lab, job)["Partition"] == "spot"
        time.sleep(10)
        # Cycles as the daemon runs them until the job has moved: 24.11 and 26.05 refuse a
        # partition change for some seconds after a job's submission ("Resource temporarily
        # unavailable"); each refusal is audited as such and decided again the next cycle.
        events: list[dict[str, object]] = []
        for _ in range(15):
            events += _daemon_cycle(path)[0]
            if any(e["event"] == "burst.spot_fallback" for e in events):
                break
            time.sleep(2)
        (fell,) = [e for e in events if e["event"] == "burst.spot_fallback"]
        for failed in [e for e in events if e["event"] == "action.failed"]:
            assert failed["key"] == f"burst-spot-fallback:{job}"
            assert "Resource temporarily unavailable" in str(failed["error"]), failed
        assert fell["job"] == job and fell["partitions"] == "spot"
        lab.wait("job done on demand", lambda: _job(lab, job)["JobState"] == "COMPLETED", 90)
        assert _job(lab, job)["NodeList"] in ("od-1", "od-2")
        # Why it left spot is on the job until the on-demand launch says what that costs.
        assert re.fullmatch(
            r"pending 0:00:\d\d for spot \(more than 0:00:10\): burst added", str(fell["why"])
        ), fell
        shown = slurm.run("scontrol", "show", "job", job).stdout
        assert re.search(
            r"AdminComment=coreburst: bursting on od-\d \(1 x p5e?\.48xlarge on-demand\): "
            r"\$[\d,.]+/h, projected \$[\d,.]+ over its [\d.]+ h limit",
            shown,
        ), shown
        # Once done, the next cycle leaves it alone (one action per job).
        events, _ = _daemon_cycle(path)
        assert [e for e in events if e["event"] == "burst.spot_fallback"] == []
    finally:
        slurm.run("scancel", job, check=False)
        slurm.run("scontrol", "delete", f"ReservationName={resv}", check=False)
