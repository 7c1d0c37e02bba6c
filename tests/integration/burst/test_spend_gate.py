"""The spend gate on a real slurmctld (Debian slurm-wlm 22.05), EC2 on moto server, and the
guardrails daemon's own SQLite state (guardrails.stores.sqlite.State) as the spend source.

A job whose projected cost (1 node x p5.48xlarge on-demand $/h from the catalog x its 60 min
time limit) exceeds what the scope has left today is not launched: the resume program sets its
node into a MAINT reservation (so slurmctld stops asking for it), sets it DOWN (the job
requeues) and powers it down. The limit and scope come from the guardrails daemon's config
(guardrails.yaml, the gate's one source). A daemon cycle (``Daemon.run_cycle``, what its
schedule runs every ``interval``; the burst-reconcile rule under its lease, kill switch and
audit) keeps the hold while the scope has no room, and says in Slack which job waits; once the
limit rises it deletes the reservation, slurmctld runs the resume program again, and the job
runs on a burst node.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from coreburst.burst.gate import SPEND_HOLD_RESERVATION
from coreburst.common.catalog import load_catalog
from coreburst.common.pricing import instance_rate
from coreburst.sandbox.emulator import fake_session
from coreburst.sandbox.slurmlab import BurstLab
from guardrails.adapters.aws import Aws
from guardrails.configfile import load_config
from guardrails.daemon import Daemon
from guardrails.stores.sqlite import State

pytestmark = pytest.mark.integration


def _audit(lab: BurstLab) -> list[dict[str, object]]:
    path = lab.slurm.lab / "log" / "burst-audit.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def _job(lab: BurstLab, job: str) -> dict[str, str]:
    out = lab.slurm.run("scontrol", "-o", "show", "job", job).stdout
    return dict(t.partition("=")[::2] for t in out.split() if "=" in t)


def _set_gate(lab: BurstLab, original: str, state: Path, daily_limit: float) -> Path:
    """guardrails.yaml (the daemon's config; the gate reads its scope, limit and state from it)
    and the stack's spendGate pointing at it."""
    slurm = lab.slurm
    gcfg = slurm.lab / "guardrails.yaml"
    gcfg.write_text(
        "rules: [burst-reconcile]\ndry_run: false\n"
        f"aws: {{endpoint_url: {lab.moto.url}}}\n"
        f'state: {{path: "{state}", audit_log: "{slurm.lab}/log/g-audit.jsonl"}}\n'
        "metrics_endpoint: {enabled: false}\n"
        f'safety: {{kill_switch_file: "{slurm.lab}/stop"}}\n'
        f"spend: {{scopes: [{{name: account, daily_limit_usd: {daily_limit}}}]}}\n"
        "burst_reconcile: {enabled: true, stack: lab, spend_scope: account, "
        f'slurm_conf: "{slurm.conf}", burst_audit_log: "{slurm.lab}/log/burst-audit.jsonl"}}\n'
    )
    (slurm.lab / "Pulumi.lab.yaml").write_text(
        original + f"    spendGate: {{guardrailsConfig: {gcfg}}}\n"
    )
    return gcfg


def _daemon_cycle(gcfg: Path) -> list[dict[str, object]]:
    """One cycle of the guardrails daemon with that config; its audit events of the cycle."""
    cfg = load_config(gcfg)
    before = cfg.state.audit_log.read_text().count("\n") if cfg.state.audit_log.exists() else 0
    state = State(cfg.state.path)
    d = Daemon(cfg, Aws(cfg.aws, fake_session()), state)
    try:
        report = d.run_cycle()
        outbox = [json.loads(r["payload"]) | {"key": r["dedupe_key"]} for r in state.outbox_rows()]
    finally:
        d.close()
        state.close()
    assert report.errors == []
    lines = cfg.state.audit_log.read_text().splitlines()[before:]
    return [json.loads(x) for x in lines] + [{"event": "outbox", "rows": outbox}]


def test_gate_holds_then_releases_when_the_limit_rises(
    burst_lab: BurstLab,
) -> None:
    lab, slurm = burst_lab, burst_lab.slurm
    # Pool od may launch p5 or its fallback p5e: the gate counts the dearer.
    rate = max(
        instance_rate(load_catalog(), t, "us-east-1", "on-demand")[0]
        for t in ("p5.48xlarge", "p5e.48xlarge")
    )
    spent = 900.0
    state_path = slurm.lab / "guardrails-state.sqlite"
    store = State(state_path)  # what the daemon writes each cycle (rules/spend_limit.py)
    store.add_spend(datetime.now(UTC), "account", burn=0.0, today=spent, mtd=spent, proj=spent * 30)
    store.db.close()
    stack_file = slurm.lab / "Pulumi.lab.yaml"
    original = stack_file.read_text()
    # One hour of one node does not fit what is left today (half an hour's worth).
    gcfg = _set_gate(lab, original, state_path, spent + rate / 2)
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

        # The daemon's scheduled cycle: no room yet, so the holds stay; Slack says who waits.
        events = _daemon_cycle(gcfg)
        kept = [e for e in events if e["event"] == "burst.spend-kept"]
        assert len(kept) == 2 and all("projected >" in str(e["why"]) for e in kept)
        assert resv in slurm.run("scontrol", "show", "reservation").stdout
        rows = events[-1]["rows"]
        assert isinstance(rows, list)
        told = [r for r in rows if str(r["key"]).startswith("burst-held:")]
        assert len(told) == 2 and f"Jobs waiting: {job}" in json.dumps(told)

        # The limit rises in guardrails.yaml: the next cycle lifts both holds itself.
        _set_gate(lab, original, state_path, spent + rate * 3)
        store = State(state_path)  # the spend rule's next snapshot (same spend, fresh time)
        store.add_spend(datetime.now(UTC), "account", burn=0.0, today=spent, mtd=spent, proj=0)
        store.db.close()
        events = _daemon_cycle(gcfg)
        released = [e for e in events if e["event"] == "action.executed"]
        assert {e["kind"] for e in released} == {"release"} and len(released) == 2
        assert resv in {e["instance_id"] for e in released}
        assert resv not in slurm.run("scontrol", "show", "reservation").stdout
        assert SPEND_HOLD_RESERVATION not in slurm.run("scontrol", "show", "reservation").stdout
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


def test_two_jobs_that_fit_only_together_over_the_limit_one_runs_one_waits_with_its_reason(
    burst_lab: BurstLab,
) -> None:
    """Two 1-hour p5 jobs 3 s apart against a daily limit that fits one hour of one node (and
    a half): the first launches and commits its hour; the second is held, because what the
    first may still cost counts (today's code approved both: $110.08 against $82.56). The
    held job says why in ``scontrol show job`` (AdminComment), with its projected cost."""
    lab, slurm = burst_lab, burst_lab.slurm
    # Pool od may launch p5 or its fallback p5e: the gate counts the dearer.
    rate = max(
        instance_rate(load_catalog(), t, "us-east-1", "on-demand")[0]
        for t in ("p5.48xlarge", "p5e.48xlarge")
    )
    state_path = slurm.lab / "guardrails-state-2.sqlite"
    store = State(state_path)
    store.add_spend(datetime.now(UTC), "account", burn=0.0, today=0.0, mtd=0.0, proj=0.0)
    store.db.close()
    # Both burst nodes powered down first: a job that lands on a node still up from an
    # earlier test needs no resume (and no gate).
    lab.power_down(["od-1", "od-2"])
    stack_file = slurm.lab / "Pulumi.lab.yaml"
    original = stack_file.read_text()
    _set_gate(lab, original, state_path, rate * 1.5)
    before = len(_audit(lab))
    jobs: list[str] = []
    try:
        argv = ["sbatch", "--parsable", "-o", "/dev/null", "-p", "burst", "--exclusive", "-N1"]
        for _ in range(2):
            out = slurm.run(*argv, "-t", "60", "--wrap", "sleep 300").stdout
            jobs.append(out.strip().split(";")[0])
            time.sleep(3)
        lab.wait(
            "one launched, one held",
            lambda: (
                {e["event"] for e in _audit(lab)[before:]} >= {"resume.launched", "resume.held"}
            ),
            30,
        )
        new = _audit(lab)[before:]
        assert len([e for e in new if e["event"] == "resume.launched"]) == 1
        (held,) = [e for e in new if e["event"] == "resume.held"]
        assert "committed >" in str(held["reason"])
        (waiting,) = [str(j) for j in held["jobs"]]  # type: ignore[union-attr]
        note = _job(lab, waiting)
        full = slurm.run("scontrol", "show", "job", waiting).stdout
        assert "AdminComment=coreburst: held by the burst spend gate" in full
        assert f"projected ${rate:,.2f}" in full and "left today (account)" in full
        assert note["JobState"] == "PENDING"
        (running,) = set(jobs) - {waiting}
        lab.wait("the first job runs", lambda: _job(lab, running)["JobState"] == "RUNNING", 90)
        live = lab.instances("od-1") + lab.instances("od-2")
        assert len(live) == 1
    finally:
        stack_file.write_text(original)
        for j in jobs:
            slurm.run("scancel", j, check=False)
        for line in slurm.run("scontrol", "-o", "show", "reservation").stdout.splitlines():
            name = line.split()[0].partition("=")[2]
            if name.startswith(SPEND_HOLD_RESERVATION):
                slurm.run("scontrol", "delete", f"ReservationName={name}", check=False)
        slurm.run("scontrol", "update", "nodename=od-[1-2]", "state=power_down_force")
        lab.wait("od instances gone", lambda: not lab.instances("od-1") + lab.instances("od-2"), 60)
