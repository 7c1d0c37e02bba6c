"""Burst scenarios on a real slurmctld/slurmd (each release `make test-slurm` runs) and EC2 on
moto server.

Timers are short (SuspendTime 4 s, SuspendTimeout 4 s, power_save_interval 1 s); every wait
is bounded. REFERENCE.md "Slurm power saving" has the timings these bounds allow for
(registered -> job running took 23-25 s there).
"""

from __future__ import annotations

import json
import subprocess

import pytest

from coreburst.burst.hostlist import expand
from coreburst.common.catalog import load_catalog
from coreburst.sandbox.slurmlab import BurstLab, slurm_release

pytestmark = pytest.mark.integration


def _sbatch(lab: BurstLab, *args: str) -> str:
    out = lab.slurm.run("sbatch", "--parsable", "-o", "/dev/null", *args)
    return out.stdout.strip().split(";")[0]


def _job(lab: BurstLab, job: str) -> dict[str, str]:
    out = lab.slurm.run("scontrol", "-o", "show", "job", job).stdout
    return dict(t.partition("=")[::2] for t in out.split() if "=" in t)


def _audit(lab: BurstLab) -> list[dict[str, object]]:
    path = lab.slurm.lab / "log" / "burst-audit.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def _program(
    lab: BurstLab, kind: str, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run a rendered power program the way slurmctld does: its path, one hostlist argument,
    a bare environment (what slurmctld passes, plus a resume file)."""
    path = lab.slurm.lab / "etc" / f"coreburst-burst-{kind}"
    return subprocess.run(
        [str(path), *args],
        env={"SLURM_CONF": str(lab.slurm.conf), **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_rendered_conf_is_accepted_by_slurmctld(burst_lab: BurstLab) -> None:
    """slurmctld loaded the include: every cloud node powered down (idle~), with the catalog's
    CPUs, memory and GPUs; burst partitions capped at a week, below the core partition."""
    facts = load_catalog().instance("p5.48xlarge")
    for node in ("od-1", "od-2", "sp-1", "cb-1"):
        n = burst_lab.slurm.node(node)
        assert "CLOUD" in n["State"] and "POWERED_DOWN" in n["State"], n["State"]
        assert n["CPUTot"] == str(facts.vcpus)
        assert n["RealMemory"] == str(int(facts.memory_gib * 1024 * 0.95))
        features = n["AvailableFeatures"].split(",")
        # typed GPUs on every pool, od (p5 with its fallback p5e) included: typed by its
        # instanceType's H100, so a job asking --gres=gpu:h100:8 fits it
        assert n["Gres"] == f"gpu:{facts.accelerator.model.lower()}:{facts.accelerator.count}"
        if node.startswith("od-"):  # p5 or its fallback p5e: only what both share is a feature
            assert "p5.48xlarge" not in features and "nvidia" in features
        else:
            assert "p5.48xlarge" in features
    parts = burst_lab.slurm.run("sinfo", "-h", "-o", "%P %l %N").stdout.split("\n")
    table = {p.split()[0].rstrip("*"): p.split()[1:] for p in parts if p.strip()}
    assert table["burst"] == ["7-00:00:00", "od-[1-2]"]
    assert table["spot"] == ["7-00:00:00", "sp-1"]
    assert table["block"] == ["7-00:00:00", "cb-1"]
    conf = burst_lab.slurm.run("scontrol", "show", "config").stdout
    assert "SuspendExcNodes         = core[1-2]" in conf
    assert "coreburst-burst-resume" in conf


def test_slurmctld_runs_with_every_setting_the_fragment_renders(burst_lab: BurstLab) -> None:
    """Each ``Key=Value`` line of the rendered burst.conf that is not a node or partition is
    what this release's ``scontrol show config`` says it runs with (it prints seconds as
    ``N sec`` and rates as ``N nodes/min``): none ignored, renamed or overridden. Slurm 22.05
    gets ``PrivateData=cloud``; 23.02 on shows cloud nodes by default, and the fragment
    rendered for it has no such line (24.11 and 26.05 print ``PrivateData = none`` for it)."""
    rendered = (burst_lab.slurm.lab / "etc" / "burst.conf").read_text().splitlines()
    want = dict(
        line.split("=", 1)
        for line in rendered
        if "=" in line and not line.startswith(("#", "NodeName=", "PartitionName="))
    )
    shown = {
        k.strip(): v.strip()
        for k, _, v in (
            line.partition("=")
            for line in burst_lab.slurm.run("scontrol", "show", "config").stdout.splitlines()
        )
    }
    assert set(want) >= {
        "ResumeProgram", "SuspendProgram", "ResumeFailProgram", "SuspendTime", "ResumeTimeout",
        "SuspendTimeout", "ResumeRate", "SuspendRate", "SuspendExcNodes", "SlurmctldParameters",
    }  # fmt: skip
    for key, value in want.items():
        assert shown.get(key) in (value, f"{value} sec", f"{value} nodes/min"), (key, value)
    assert ("PrivateData" in want) == (slurm_release() < (23, 2))


@pytest.mark.parametrize(
    "hostlist", ["od-[1-2]", "a[01-03,7],b-9", "rack[1-2]-n[1-2]", "x-[8-11],x-1"]
)
def test_hostlist_expansion_matches_scontrol(burst_lab: BurstLab, hostlist: str) -> None:
    """coreburst.burst.hostlist.expand gives what `scontrol show hostnames` gives."""
    real = burst_lab.slurm.run("scontrol", "show", "hostnames", hostlist).stdout.split()
    assert expand(hostlist) == real


def test_capacity_block_reservation_holds_block_nodes(burst_lab: BurstLab) -> None:
    """The rendered reservation command is accepted and holds cb-1 in a MAINT reservation."""
    script = burst_lab.slurm.lab / "etc" / "reservations.sh"
    burst_lab.slurm.run("sh", str(script))
    resv = burst_lab.slurm.run("scontrol", "show", "reservation", "coreburst-hold-cb").stdout
    assert "Nodes=cb-1" in resv
    assert "MAINT" in resv and "IGNORE_JOBS" in resv


def test_overflow_runs_on_burst_node_then_suspends(burst_lab: BurstLab) -> None:
    """Jobs fill the core; the next job (-p core,burst) powers up a burst node through the
    resume program, runs there once the node's slurmd registers, and after SuspendTime idle the
    suspend program terminates the instance."""
    slurm = burst_lab.slurm
    long_job = ""
    fillers = [
        _sbatch(burst_lab, "-p", "core", "--exclusive", "-N1", "--wrap", "sleep 300")
        for _ in range(2)
    ]
    try:
        burst_lab.wait(
            "core full", lambda: all(slurm.job_state(j)[0] == "RUNNING" for j in fillers), 20
        )
        # Over a week: the burst partition's MaxTime refuses it; it waits for the core.
        long_job = _sbatch(
            burst_lab,
            "-p",
            "core,burst",
            "--exclusive",
            "-N1",
            "-t",
            "8-00:00:00",
            "--wrap",
            "sleep 2",
        )
        job = _sbatch(
            burst_lab, "-p", "core,burst", "--exclusive", "-N1", "-t", "10", "--wrap", "sleep 2"
        )
        burst_lab.wait(
            "overflow job done", lambda: _job(burst_lab, job)["JobState"] == "COMPLETED", 120
        )
        node = _job(burst_lab, job)["NodeList"]
        assert node in ("od-1", "od-2")
        assert node in [n for n, _ in burst_lab.watcher.boots]
        assert slurm.job_state(long_job)[0] == "PENDING"
        resumed = [e["nodes"] for e in _audit(burst_lab) if e["event"] == "resume.request"]
        assert resumed == [node]  # only the short job powered a node up
        assert (
            len(burst_lab.instances(node, ("pending", "running", "shutting-down", "terminated")))
            == 1
        )
        events = [e["event"] for e in _audit(burst_lab)]
        assert "resume.launched" in events
        burst_lab.wait(
            "instance terminated after idle", lambda: burst_lab.instances(node) == [], 60
        )
        burst_lab.wait(
            "node powered down again",
            lambda: (
                "POWERED_DOWN" in slurm.node_state(node)
                and "POWERING_DOWN" not in slurm.node_state(node)
            ),
            30,
        )
        assert any(
            e["event"] == "suspend" and node in expand(str(e["nodes"])) for e in _audit(burst_lab)
        )
        assert not burst_lab.watcher.errors
    finally:
        slurm.run("scancel", *[j for j in (*fillers, long_job) if j], check=False)


def test_resume_twice_launches_once(burst_lab: BurstLab) -> None:
    """Slurm may run resume again for a node (controller restart): the second run finds the
    tagged instance and launches nothing."""
    slurm = burst_lab.slurm
    slurm.run("scontrol", "update", "nodename=od-2", "state=power_up")
    burst_lab.wait("od-2 instance", lambda: len(burst_lab.instances("od-2")) == 1, 30)
    again = _program(burst_lab, "resume", "od-2")
    assert again.returncode == 0, again.stderr
    assert len(burst_lab.instances("od-2")) == 1
    assert any(e["event"] == "resume.already_running" for e in _audit(burst_lab))
    burst_lab.wait("od-2 registered", lambda: "POWERING_UP" not in slurm.node_state("od-2"), 60)
    slurm.run("scontrol", "update", "nodename=od-2", "state=power_down")
    burst_lab.wait("od-2 instance terminated", lambda: burst_lab.instances("od-2") == [], 30)


@pytest.mark.parametrize(
    ("args", "env", "needle"),
    [
        (["od-[1-"], {}, "hostlist"),
        (["nosuch-1"], {}, "not burst nodes"),
        (["sp-1"], {"SLURM_RESUME_FILE": "/nonexistent/resume.json"}, "SLURM_RESUME_FILE"),
    ],
)
def test_bad_input_exits_2_and_launches_nothing(
    burst_lab: BurstLab, args: list[str], env: dict[str, str], needle: str
) -> None:
    before = burst_lab.ec2.describe_instances()["Reservations"]
    out = _program(burst_lab, "resume", *args, env=env)
    assert out.returncode == 2
    assert len(out.stderr.strip().splitlines()) == 1 and needle in out.stderr
    assert burst_lab.ec2.describe_instances()["Reservations"] == before


def test_spot_node_gets_a_spot_instance(burst_lab: BurstLab) -> None:
    """The spot partition's node is launched as spot (CreateFleet with the spot capacity type
    on moto server) and released again when Slurm powers it down."""
    slurm = burst_lab.slurm
    slurm.run("scontrol", "update", "nodename=sp-1", "state=power_up")
    burst_lab.wait("sp-1 instance", lambda: len(burst_lab.instances("sp-1")) == 1, 30)
    (iid,) = burst_lab.instances("sp-1")
    (res,) = burst_lab.ec2.describe_instances(InstanceIds=[iid])["Reservations"]
    assert res["Instances"][0].get("InstanceLifecycle") == "spot"
    burst_lab.wait("sp-1 registered", lambda: "POWERING_UP" not in slurm.node_state("sp-1"), 60)
    slurm.run("scontrol", "update", "nodename=sp-1", "state=power_down")
    burst_lab.wait("sp-1 instance terminated", lambda: burst_lab.instances("sp-1") == [], 30)
    burst_lab.wait(
        "sp-1 powered down",
        lambda: (
            "POWERED_DOWN" in slurm.node_state("sp-1")
            and "POWERING_DOWN" not in slurm.node_state("sp-1")
        ),
        30,
    )


def test_launch_failure_requeues_at_once(burst_lab: BurstLab) -> None:
    """Any EC2 failure: the resume program sets the node DOWN with the error code and powers
    it down, so Slurm requeues the job now instead of after ResumeTimeout (40 s here). The
    failure is real: the spot cluster's launch template is gone from the emulator."""
    slurm = burst_lab.slurm
    (lt,) = burst_lab.ec2.describe_launch_templates(LaunchTemplateNames=["sp-lt-e4f5a6b"])[
        "LaunchTemplates"
    ]
    burst_lab.ec2.delete_launch_template(LaunchTemplateId=lt["LaunchTemplateId"])
    job = _sbatch(burst_lab, "-p", "spot", "--exclusive", "-N1", "-t", "5", "--wrap", "true")
    try:
        burst_lab.wait(
            "resume failure audited",
            lambda: any(e["event"] == "resume.failed" for e in _audit(burst_lab)),
            20,
        )
        failed = next(e for e in _audit(burst_lab) if e["event"] == "resume.failed")
        assert failed["nodes"] == "sp-1" and failed["code"] == "LaunchTemplateNotFound"
        burst_lab.wait(
            "job requeued",
            lambda: (
                _job(burst_lab, job).get("Restarts", "0") != "0"
                and _job(burst_lab, job)["JobState"] == "PENDING"
            ),
            15,
        )
        burst_lab.wait(
            "sp-1 powered down",
            lambda: (
                "POWERED_DOWN" in slurm.node_state("sp-1")
                and "POWERING_UP" not in slurm.node_state("sp-1")
            ),
            15,
        )
        assert burst_lab.instances("sp-1") == []
    finally:
        slurm.run("scancel", job, check=False)


def test_node_addresses_reach_slurm(burst_lab: BurstLab, monkeypatch: pytest.MonkeyPatch) -> None:
    """In private-ip mode resume tells Slurm each node's address in one scontrol call
    (comma lists); the real scontrol accepts it and slurmctld shows the instance's IP."""
    from coreburst.burst.config import load_burst_stack
    from coreburst.burst.power import Audit, Power
    from coreburst.sandbox.emulator import AMI
    from guardrails.adapters.slurm import Scontrol

    monkeypatch.setenv("SLURM_CONF", str(burst_lab.slurm.conf))
    stack = load_burst_stack("lab", burst_lab.slurm.lab)
    stack = stack.model_copy(
        update={"settings": stack.settings.model_copy(update={"node_address": "private-ip"})}
    )
    power = Power(stack, burst_lab.ec2, Scontrol(), Audit(burst_lab.slurm.lab / "log" / "t.jsonl"))
    # Untagged instances: the boot watcher leaves them alone.
    run = burst_lab.ec2.run_instances(ImageId=AMI, MinCount=2, MaxCount=2)
    insts = run["Instances"]
    try:
        power.tell_addresses({"cb-1": insts[0]["InstanceId"], "od-2": insts[1]["InstanceId"]})
        for node, inst in zip(("cb-1", "od-2"), insts, strict=True):
            n = burst_lab.slurm.node(node)
            assert n["NodeAddr"] == inst["PrivateIpAddress"]
            assert n["NodeHostName"] == inst["PrivateDnsName"]
    finally:
        for node in ("cb-1", "od-2"):
            burst_lab.slurm.run(
                "scontrol",
                "update",
                f"nodename={node}",
                f"nodeaddr={node}",
                f"nodehostname={node}",
                check=False,
            )
        burst_lab.ec2.terminate_instances(InstanceIds=[i["InstanceId"] for i in insts])


def test_resume_through_the_burst_agent(burst_lab: BurstLab) -> None:
    """With ``agentSocket``, the resume program slurmctld runs is the thin client: the burst
    agent (coreburst/burst/agent.py) forks a child that launches the node's instance (its own
    pid in the power log, not the agent's); the node registers. With the agent stopped the
    same program runs the full program itself and says why in the log."""
    import signal
    import sys
    from pathlib import Path

    from coreburst.burst.config import load_burst_stack
    from coreburst.burst.slurmconf import render_program

    slurm = burst_lab.slurm
    lab, etc = slurm.lab, slurm.lab / "etc"
    program = etc / "coreburst-burst-resume"
    original = program.read_text()
    sock = lab / "agent.sock"
    stack = load_burst_stack("lab", lab)
    stack = stack.model_copy(
        update={"settings": stack.settings.model_copy(update={"agent_socket": sock})}
    )
    cli = [sys.executable, "-m", "coreburst.burst.cli"]
    agent_log = lab / "log" / "agent.log"
    repo = str(Path(__file__).resolve().parents[3])
    with agent_log.open("wb") as err:
        agent = subprocess.Popen(
            [*cli, "agent", "--stack", "lab", "--stack-dir", str(lab), "--socket", str(sock)],
            env={"PATH": "/usr/bin:/bin", "PYTHONPATH": repo},
            stdout=err,
            stderr=err,
        )
    try:
        burst_lab.wait("agent listening", sock.exists, 60)
        program.write_text(render_program("resume", stack, cli, str(lab), str(etc / "burst.env")))
        slurm.run("scontrol", "update", "nodename=od-1", "state=power_up")
        burst_lab.wait("od-1 instance", lambda: len(burst_lab.instances("od-1")) == 1, 30)
        burst_lab.wait("od-1 registered", lambda: "POWERING_UP" not in slurm.node_state("od-1"), 60)
        (child,) = [
            int(line.split("pid ")[1].split(":")[0])
            for line in agent_log.read_text().splitlines()
            if ": resume od-1 for client pid" in line
        ]
        power_log = (lab / "log" / "burst-power.log").read_text().splitlines()
        assert any(f" {child} INFO launched " in x and "node od-1" in x for x in power_log)
        assert child != agent.pid
        slurm.run("scontrol", "update", "nodename=od-1", "state=power_down")
        burst_lab.wait("od-1 instance terminated", lambda: burst_lab.instances("od-1") == [], 30)
        # The agent stops: the same program now runs the full program itself.
        agent.send_signal(signal.SIGTERM)
        agent.wait(10)
        assert not sock.exists()
        burst_lab.wait(
            "od-1 powered down", lambda: "POWERING_DOWN" not in slurm.node_state("od-1"), 30
        )
        slurm.run("scontrol", "update", "nodename=od-1", "state=power_up")
        burst_lab.wait("od-1 instance", lambda: len(burst_lab.instances("od-1")) == 1, 30)
        log_text = (lab / "log" / "burst-power.log").read_text()
        assert f"agent not used: no agent at {sock}" in log_text
        burst_lab.wait("od-1 registered", lambda: "POWERING_UP" not in slurm.node_state("od-1"), 60)
        slurm.run("scontrol", "update", "nodename=od-1", "state=power_down")
        burst_lab.wait("od-1 instance terminated", lambda: burst_lab.instances("od-1") == [], 30)
    finally:
        program.write_text(original)
        if agent.poll() is None:
            agent.send_signal(signal.SIGTERM)
            try:
                agent.wait(10)
            except subprocess.TimeoutExpired:
                agent.kill()
                agent.wait(10)
