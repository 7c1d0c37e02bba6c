"""The ``core-idle`` rule end to end on real servers: the real Slurm lab (slurmctld + slurmd,
Debian slurm-wlm 22.05, core nodes with eight GRES GPUs each), a real Prometheus serving the
recorded dcgm-exporter history (fixtures/dcgm-core-lab.prom), the guardrails daemon (one cycle
at a time, not dry-run, ``policy: requeue``), EC2 on a moto server for its inventory, and Slack
on a local webhook receiver.

Three jobs: A holds core1's GPUs 0-1 (idle in the history), B core1's 2-4 (busy), C core2's 0-1
(GPU 1 has no series: blind). A is warned (its owner mentioned), held by the kill switch, then
requeued; Slurm itself shows the requeue (``Restarts=1``, back to pending). B and C are left
alone.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from typer.testing import CliRunner

from coreburst.cli import app as root
from coreburst.sandbox.clocks import FakeClock
from coreburst.sandbox.emulator import MotoProcess, WebhookReceiver, fake_session
from coreburst.sandbox.prometheus import PrometheusServer
from coreburst.sandbox.slurmlab import SlurmLab, wait_until
from guardrails.adapters.aws import Aws
from guardrails.adapters.slurm import SlurmJobs
from guardrails.configfile import parse_config
from guardrails.daemon import Daemon
from guardrails.stores.sqlite import State

pytestmark = pytest.mark.integration
MEMBER = "U0LABROOT1"


@pytest.fixture(scope="module")
def moto() -> Iterator[MotoProcess]:
    m = MotoProcess().start()
    try:
        yield m
    finally:
        m.stop()


def _submit(lab: SlurmLab, node: str, gpus: int, account: str) -> str:
    # --account: the lab has no slurmdbd, so Slurm keeps the name unchecked, as given
    out = lab.run(
        "sbatch", "--parsable", "-o", "/dev/null", "-p", "core", "-w", node, "-A", account,
        f"--gres=gpu:{gpus}", "-t", "600", "--wrap", "sleep 3000",
    )  # fmt: skip
    return out.stdout.strip().split(";")[0]


def _job(lab: SlurmLab, job: str) -> dict[str, str]:
    out = lab.run("scontrol", "-o", "show", "job", job).stdout
    return dict(tok.partition("=")[::2] for tok in out.split() if "=" in tok)


def _audit(path: Any) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_an_idle_job_is_warned_then_requeued_and_busy_and_blind_jobs_are_left_alone(
    slurm_lab: SlurmLab,
    prometheus: PrometheusServer,
    history_now: datetime,
    moto: MotoProcess,
    tmp_path: Any,
) -> None:
    lab = slurm_lab
    a, b, c = (
        _submit(lab, "core1", 2, "ml"),
        _submit(lab, "core1", 3, "ml"),
        _submit(lab, "core2", 2, "vision"),
    )
    hook = WebhookReceiver().start()
    try:
        wait_until(
            "three jobs running",
            lambda: all(lab.job_state(j)[0] == "RUNNING" for j in (a, b, c)),
            60,
        )
        # What Slurm says each job holds, read through the adapter the rule uses.
        jobs = {j.job_id: j for j in SlurmJobs(conf=lab.conf).running()}
        assert jobs[a].gpus == {"core1": (0, 1)}
        assert jobs[b].gpus == {"core1": (2, 3, 4)}
        assert jobs[c].gpus == {"core2": (0, 1)}
        assert not jobs[a].interactive and jobs[a].user == "root"
        assert (jobs[a].account, jobs[b].account, jobs[c].account) == ("ml", "ml", "vision")
        started = max(j.start for j in jobs.values())
        assert started - history_now < timedelta(hours=1)  # inside the recorded history

        stop = tmp_path / "stop"
        cfg_file = tmp_path / "g.yaml"
        cfg_file.write_text(
            "rules: [core-idle]\ndry_run: false\n"
            f"aws: {{endpoint_url: {moto.url}}}\n"
            f'state: {{path: "{tmp_path}/g.db", audit_log: "{tmp_path}/audit.jsonl"}}\n'
            "metrics_endpoint: {enabled: false}\n"
            f'safety: {{kill_switch_file: "{stop}"}}\n'
            "core_idle:\n"
            "  enabled: true\n"
            f"  prometheus_url: {prometheus.url}\n"
            "  policy: requeue\n"
            "  batch: {window: 1h, grace: 30m}\n"
            f"  slack_users: {{root: {MEMBER}}}\n"
            f'  slurm_conf: "{lab.conf}"\n'
            "  gpu_hour_usd: 1.9\n"
        )
        cfg = parse_config(cfg_file.read_text(), str(cfg_file))
        clock = FakeClock(started + timedelta(hours=1, minutes=5))
        state = State(cfg.state.path)
        d = Daemon(cfg, Aws(cfg.aws, fake_session()), state, clock=clock, webhook_url=hook.url)
        try:
            # Cycle 1: A idle for the window -> warned; B busy; C blind.
            r1 = d.run_cycle()
            assert r1.errors == []
            assert r1.states["core-idle"] == 1
            assert r1.states["core-busy"] == 1
            assert r1.states["core-blind"] == 1
            assert r1.actions == []
            warn = next(p for p in hook.posts if "holds 2 of 2 GPU(s) idle" in json.dumps(p))
            assert warn["blocks"][1]["text"]["text"] == f"<@{MEMBER}>"  # the owner is pinged
            body = json.dumps(warn)
            assert f"Slurm job {a} holds" in body and "requeued" in body
            assert "$3.80/h of owned GPUs at $1.90/GPU-h" in body
            blind = next(p for p in hook.posts if "without usable GPU data" in json.dumps(p))
            assert "core2 GPU 1: no DCGM data" in json.dumps(blind)
            assert lab.job_state(a)[0] == "RUNNING"

            # Cycle 2, past the grace but with the kill switch engaged: nothing happens.
            stop.write_text("")
            clock.advance(timedelta(minutes=40))
            r2 = d.run_cycle()
            assert r2.actions == []
            skipped = [e for e in _audit(cfg.state.audit_log) if e["event"] == "action.skipped"]
            assert skipped and "kill switch" in skipped[-1]["because"]
            assert lab.job_state(a)[0] == "RUNNING"

            # Cycle 3: the switch released -> A is requeued, through scontrol.
            stop.unlink()
            clock.advance(timedelta(minutes=1))
            r3 = d.run_cycle()
            assert r3.errors == []
            assert r3.actions == [f"requeue slurm-job-{a}"]
        finally:
            d.close()
        # Slurm's own record: A restarted once and is back in the queue; B and C untouched.
        wait_until("job A requeued", lambda: _job(lab, a)["Restarts"] == "1", 30)
        # (through COMPLETING while its batch step is killed; Slurm holds a requeued job's
        # restart back for a while, Reason=BeginTime)
        wait_until("job A pending again", lambda: _job(lab, a)["JobState"] == "PENDING", 30)
        for other in (b, c):
            assert _job(lab, other)["JobState"] == "RUNNING"
            assert _job(lab, other)["Restarts"] == "0"
        audit = _audit(cfg.state.audit_log)
        done = [e for e in audit if e["event"] == "action.executed"]
        assert [(e["instance_id"], e["kind"], e["api"]) for e in done] == [
            (f"slurm-job-{a}", "requeue", f"scontrol requeue {a}")
        ]
        # The intent was stored before scontrol ran, and finished after it.
        row = state.action(f"core-requeue:{a}:{int(jobs[a].start.timestamp())}")
        assert row is not None and row["status"] == "done"
        assert any(f"Idle Slurm job {a} requeued" in json.dumps(p) for p in hook.posts)

        # Usage recorded per job run for the report: B measured at 80 %, C unmeasured.
        usage = {r["job_id"]: r for r in state.core_usage(history_now - timedelta(days=1))}
        assert set(usage) == {a, b, c}
        assert usage[b]["used_gpu_h"] == pytest.approx(0.8 * usage[b]["allocated_gpu_h"], 0.02)
        assert usage[a]["used_gpu_h"] == pytest.approx(0.0)
        assert usage[c]["used_gpu_h"] is None and usage[c]["state"] == "blind"
        state.close()

        # The report reads what the rule recorded, per team (Slurm account).
        png = tmp_path / "core.png"
        r = CliRunner().invoke(
            root, ["core", "report", "--config", str(cfg_file), "--since", "1d", "--format",
                   "json", "--plot", str(png)],
        )  # fmt: skip
        assert r.exit_code == 0, r.output
        doc = json.loads(r.output)
        ml, vision = doc["teams"]
        assert (ml["team"], ml["jobs"], vision["team"], vision["jobs"]) == ("ml", 2, "vision", 1)
        alloc = usage[a]["allocated_gpu_h"] + usage[b]["allocated_gpu_h"]
        used = usage[b]["used_gpu_h"]
        assert ml["allocated_gpu_h"] == pytest.approx(alloc, abs=0.01)
        assert ml["idle_gpu_h"] == pytest.approx(alloc - used, abs=0.01)
        assert ml["idle_pct"] == pytest.approx(100 * (alloc - used) / alloc, abs=0.1)
        assert ml["core_usd"] == pytest.approx(alloc * 1.9, abs=0.05)
        assert vision["unmeasured_gpu_h"] == pytest.approx(usage[c]["allocated_gpu_h"], abs=0.01)
        assert vision["idle_pct"] is None  # blind: never counted idle
        assert doc["jobs"][0]["job_id"] == a and doc["jobs"][0]["efficiency_pct"] == 0.0
        assert png.read_bytes()[:4] == b"\x89PNG"
    finally:
        hook.stop()
        for j in (a, b, c):
            lab.run("scancel", j, check=False)


def test_an_idle_interactive_session_is_cancelled_only_when_allowed(
    slurm_lab: SlurmLab,
    prometheus: PrometheusServer,
    history_now: datetime,
    moto: MotoProcess,
    tmp_path: Any,
) -> None:
    """An salloc session (Slurm's batch_flag false) holding core1's idle GPUs 0-1 is judged on
    the interactive thresholds (30 m) while a batch job would still be young (6 h); dry-run,
    then this rule's own per-cycle cap, keep it; then ``scancel`` ends it in Slurm."""
    lab = slurm_lab
    out = lab.run(
        "salloc", "--no-shell", "-p", "core", "-w", "core1", "--gres=gpu:2", "-t", "600",
        timeout=60,
    )  # fmt: skip
    job = next(w for w in out.stderr.split() if w.isdigit())
    try:
        wait_until("session running", lambda: lab.job_state(job)[0] == "RUNNING", 60)
        (session,) = [j for j in SlurmJobs(conf=lab.conf).running() if j.job_id == job]
        assert session.interactive and session.gpus == {"core1": (0, 1)}

        def config(dry: bool, cap: int) -> Any:
            return parse_config(
                f"rules: [core-idle]\ndry_run: {str(dry).lower()}\n"
                f"aws: {{endpoint_url: {moto.url}}}\n"
                f'state: {{path: "{tmp_path}/g.db", audit_log: "{tmp_path}/audit.jsonl"}}\n'
                "metrics_endpoint: {enabled: false}\n"
                f'safety: {{kill_switch_file: "{tmp_path}/stop"}}\n'
                f"core_idle: {{enabled: true, prometheus_url: {prometheus.url}, policy: cancel,"
                " batch: {window: 6h}, interactive: {window: 30m, grace: 15m},"
                f' max_actions_per_cycle: {cap}, slurm_conf: "{lab.conf}"}}\n',
                "g.yaml",
            )

        cfg = config(dry=True, cap=1)
        clock = FakeClock(session.start + timedelta(minutes=35))
        state = State(cfg.state.path)
        hook = WebhookReceiver().start()
        d = Daemon(cfg, Aws(cfg.aws, fake_session()), state, clock=clock, webhook_url=hook.url)
        try:
            r1 = d.run_cycle()
            assert r1.errors == [] and r1.states["core-idle"] == 1
            (warn,) = [p for p in hook.posts if "holds 2 of 2" in json.dumps(p)]
            assert warn["blocks"][0]["text"]["text"].startswith("[dry-run] ")
            assert "interactive" in json.dumps(warn) and "cancelled" in json.dumps(warn)

            clock.advance(timedelta(minutes=20))
            assert d.run_cycle().actions == []  # dry-run
            d.reload(config(dry=False, cap=0))
            clock.advance(timedelta(minutes=1))
            # Acting now: the dry-run warning promised nothing, so the owner is warned for
            # real and the grace starts over.
            assert d.run_cycle().actions == []
            live = [p for p in hook.posts if "holds 2 of 2" in json.dumps(p)]
            assert len(live) == 2 and not live[1]["blocks"][0]["text"]["text"].startswith("[")
            clock.advance(timedelta(minutes=16))
            assert d.run_cycle().actions == []  # past the grace, but the rule's own cap
            because = [
                e["because"] for e in _audit(cfg.state.audit_log) if e["event"] == "action.skipped"
            ]
            assert because == ["dry-run", "core_idle.max_actions_per_cycle of 0 reached"]
            assert lab.job_state(job)[0] == "RUNNING"

            d.reload(config(dry=False, cap=1))
            clock.advance(timedelta(minutes=1))
            assert d.run_cycle().actions == [f"cancel slurm-job-{job}"]
        finally:
            d.close()
            state.close()
            hook.stop()
        wait_until("session cancelled", lambda: lab.job_state(job)[0] == "GONE", 30)
        assert _job(lab, job)["JobState"] == "CANCELLED"
    finally:
        lab.run("scancel", job, check=False)
