"""``coreburst burst status`` on a real slurmctld (the lab in coreburst/sandbox/slurmlab.py; EC2
on moto server behind its CapacityProxy, whose "no capacity" answer is made up in the shape the
EC2 API reference documents for CreateFleet's ``errorSet``), and the guardrails daemon's
metrics endpoint exporting the same figures.

One scene, set up the way it happens: the spot pool's only (type, zone) has no capacity, so
its job's resume fails with InsufficientInstanceCapacity and the pool is held; od-1's first
instance fails its boot check (DCGM, a recorded output in tests/fixtures/health/); an instance
of the stack carries no node tag (resume died before tagging). Then status (text and JSON) says
so, and one daemon cycle's ``/metrics`` (parsed by prometheus_client's own parser) carries the
same figures as the JSON.
"""

from __future__ import annotations

import json
import logging
import time
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import start_http_server
from prometheus_client.parser import text_string_to_metric_families

from coreburst.burst.commitments import SpendLedger
from coreburst.sandbox.emulator import AMI, fake_session, free_ports
from coreburst.sandbox.slurmlab import BurstLab, burst_lab, missing_prerequisite
from guardrails.adapters.aws import Aws
from guardrails.configfile import load_config
from guardrails.daemon import Daemon
from guardrails.stores.sqlite import State
from tests.helpers.prereq import require

pytestmark = pytest.mark.integration
FIX = Path(__file__).resolve().parents[2] / "fixtures" / "health"
ICE = "InsufficientInstanceCapacity"


@pytest.fixture(scope="module", name="lab")
def lab_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BurstLab]:
    require(missing_prerequisite())
    with burst_lab(tmp_path_factory.mktemp("statuslab"), capacity_proxy=True) as lab:
        yield lab


def _audit(lab: BurstLab) -> list[dict[str, Any]]:
    path = lab.slurm.lab / "log" / "burst-audit.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def _sbatch(lab: BurstLab, *args: str) -> str:
    out = lab.slurm.run("sbatch", "--parsable", "-o", "/dev/null", *args)
    return out.stdout.strip().split(";")[0]


def _status(lab: BurstLab, *args: str) -> str:
    """The command, on the lab's stack with a spend gate on the daemon's config (a copy: the
    power programs keep running without a gate)."""
    d = lab.slurm.lab / "status-stack"
    d.mkdir(exist_ok=True)
    gate = f"    spendGate: {{guardrailsConfig: {lab.slurm.lab / 'guardrails-status.yaml'}}}\n"
    (d / "Pulumi.lab.yaml").write_text((lab.slurm.lab / "Pulumi.lab.yaml").read_text() + gate)
    out = lab.slurm.burst_cli(
        "status", "--stack", "lab", "--stack-dir", str(d), *args,
        env={"AWS_ENDPOINT_URL": lab.moto.url, "AWS_ACCESS_KEY_ID": "testing",
             "AWS_SECRET_ACCESS_KEY": "testing"},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    return out.stdout


def _scrape(lab: BurstLab) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """One guardrails daemon cycle (burst-reconcile), then its registry as an HTTP scrape of
    the endpoint ``coreburst guardrails run`` serves (prometheus_client's start_http_server):
    (metric, labels) -> value."""
    d = lab.slurm.lab
    path = d / "guardrails-status.yaml"
    path.write_text(
        "rules: [burst-reconcile]\ndry_run: true\n"
        f"aws: {{endpoint_url: {lab.moto.url}}}\n"
        f'state: {{path: "{d}/gs.sqlite", audit_log: "{d}/log/gs-audit.jsonl"}}\n'
        # enabled: the rule exports status only then (the test serves the registry itself)
        "metrics_endpoint: {enabled: true}\n"
        f'safety: {{kill_switch_file: "{d}/stop"}}\n'
        "spend: {scopes: [{name: account, daily_limit_usd: 1000, monthly_limit_usd: 20000}]}\n"
        "burst_reconcile: {enabled: true, stack: lab, spend_scope: account, "
        f'slurm_conf: "{lab.slurm.conf}", burst_audit_log: "{d}/log/burst-audit.jsonl"}}\n'
    )
    cfg = load_config(path)
    state = State(cfg.state.path)
    if state.last_spend("account") is None:
        # What the daemon's spend rule and the resume program's gate write (made up here: no
        # Cost Explorer on the lab): a spend snapshot, and one approved node's commitment.
        now = datetime.now(UTC)
        state.add_spend(now, "account", burn=55.04, today=400.0, mtd=9000.0, proj=12000.0)
        assert SpendLedger(state, "account").reserve({"od-2": (55.04, 2.0)}, {"x": 1e9}, now).ok
    daemon = Daemon(cfg, Aws(cfg.aws, fake_session()), state)
    (port,) = free_ports(1)
    server, thread = start_http_server(port, addr="127.0.0.1", registry=daemon.metrics.registry)
    try:
        report = daemon.run_cycle()
        assert report.errors == []
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
            text = resp.read().decode()
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
        daemon.close()
        state.close()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
        if s.name.startswith("coreburst_burst_")
    }


def _epoch(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def test_status_shows_backoff_held_job_failed_boot_and_orphan_as_metrics_do(
    lab: BurstLab,
) -> None:
    slurm, proxy, watcher = lab.slurm, lab.proxy, lab.watcher
    assert proxy is not None
    logging.getLogger("coreburst").setLevel(logging.WARNING)
    # sp's only choice (p5 in us-east-1a) and od's first are out; od falls back to p5e.
    proxy.no_capacity = {("p5.48xlarge", "us-east-1a")}
    watcher.health["od-1"] = [FIX / "p5-dcgm-fail", FIX / "p5-healthy"]
    spot_job = _sbatch(lab, "-p", "spot", "--exclusive", "-N1", "-t", "10", "--wrap", "sleep 1")
    od_job = _sbatch(lab, "-p", "burst", "-w", "od-1", "-N1", "-t", "10", "--wrap", "sleep 1")
    try:
        lab.wait(
            "sp held and od-1's boot check failed",
            lambda: (
                any(e["event"] == "resume.pool_held" for e in _audit(lab))
                and any(e["event"] == "health.failed" for e in _audit(lab))
            ),
            40,
        )
        slurm.run("scancel", od_job, check=False)
        lab.power_down(["od-1"], timeout_s=30)
        (held,) = [e for e in _audit(lab) if e["event"] == "resume.pool_held"]
        resv = str(held["reservation"])
        (failed,) = [e for e in _audit(lab) if e["event"] == "health.failed"]
        orphan = lab.ec2.run_instances(
            ImageId=AMI, InstanceType="p5.48xlarge", MinCount=1, MaxCount=1,
            TagSpecifications=[{"ResourceType": "instance",
                                "Tags": [{"Key": "coreburst-stack", "Value": "lab"}]}],
        )["Instances"][0]["InstanceId"]  # fmt: skip
        lab.wait(
            "sp-1 powered down",
            lambda: (
                "POWERED_DOWN" in slurm.node_state("sp-1")
                and "POWERING" not in slurm.node_state("sp-1")
            ),
            30,
        )

        metrics = _scrape(lab)
        doc = json.loads(_status(lab, "--format", "json"))
        text = _status(lab)

        # -- what the operator reads --------------------------------------------------------
        sp = doc["pools"]["sp"]
        (hold,) = sp["holds"]
        assert (hold["reservation"], hold["kind"], hold["code"]) == (resv, "backoff", ICE)
        until = _epoch(hold["until"])
        assert 0 < until - time.time() <= 600 + 60  # capacityBackoffS: 600 s by default
        assert [(b["instance_type"], b["zone"], b["code"]) for b in sp["backoffs"]] == [
            ("p5.48xlarge", "us-east-1a", ICE)
        ]
        assert (
            f"HELD (backoff {ICE}) by {resv} on sp-1: {ICE} (capacity), until {hold['until']}"
            in text
        )
        (job,) = [j for j in doc["jobs"] if j["job"] == spot_job]
        assert job["partition"] == "spot" and job["reason"]
        assert f"burst launch for sp-1 failed ({ICE}: capacity)" in job["note"]
        assert f"job {spot_job} (root, spot): {job['reason']}; coreburst: burst launch" in text
        (boot,) = [e for e in doc["events"] if e["event"] == "health.failed"]
        assert boot["nodes"] == "od-1" and boot["instances"] == [failed["instance"]]
        assert boot["why"].startswith("dcgm: dcgmi diag -r 1: Page Retirement/Row Remap FAIL")
        assert f"health.failed od-1 {failed['instance']}: dcgm: dcgmi diag" in text
        (od1,) = [n for n in doc["nodes"] if n["node"] == "od-1"]
        assert "health check failed" in (od1["note"] or od1["reason"] or "")
        (launch_failed,) = [e for e in doc["events"] if e["event"] == "resume.failed"]
        assert (launch_failed["nodes"], launch_failed["code"]) == ("sp-1", ICE)
        (lost,) = doc["orphan_instances"]
        assert (lost["instance"], lost["node"], lost["why"]) == (orphan, None, "no Slurm node tag")
        assert f"instance with no node: {orphan} (running, 0 min old): no Slurm node tag" in text
        assert doc["unknown"] == {}
        (spend,) = doc["spend"]
        assert spend["scope"] == "account" and spend["spent_usd"]["today"] == 400.0
        assert 109 < spend["committed_usd"] <= 110.08  # 2 h of $55.04/h, a little of it gone
        assert spend["left_usd"]["today"] == round(1000 - 400 - spend["committed_usd"], 2)
        assert "spend account: today $400.00 spent + $1" in text

        # -- the same figures on the daemon's metrics endpoint --------------------------------
        def m(name: str, **labels: str) -> float | None:
            return metrics.get((name, tuple(sorted(labels.items()))))

        for pool, p in doc["pools"].items():
            for state, n in p["nodes"].items():
                assert m("coreburst_burst_nodes", pool=pool, state=state) == n, (pool, state)
            for h in p["holds"]:
                labels = dict(pool=pool, reservation=h["reservation"], kind=h["kind"],
                              code=h["code"] or "")  # fmt: skip
                assert m("coreburst_burst_pool_hold", **labels) == 1
                if h["until"]:
                    got = m("coreburst_burst_pool_hold_until_timestamp_seconds", **labels)
                    assert got == _epoch(h["until"])
            for b in p["backoffs"]:
                got = m(
                    "coreburst_burst_backoff_until_timestamp_seconds",
                    pool=pool,
                    instance_type=b["instance_type"],
                    zone=b["zone"],
                    code=b["code"],
                )
                assert got == _epoch(b["until"])
        for c in doc["event_counts"]:
            labels = dict(event=c["event"], pool=c["pool"], code=c["code"])
            assert m("coreburst_burst_events_last_24h", **labels) == c["last_24h"]
            assert m("coreburst_burst_event_last_timestamp_seconds", **labels) == _epoch(c["last"])
        reasons: dict[tuple[str, str], int] = {}
        for j in doc["jobs"]:
            reasons[(j["partition"], j["reason"])] = (
                reasons.get((j["partition"], j["reason"]), 0) + 1
            )
        for (part, reason), n in reasons.items():
            assert m("coreburst_burst_pending_jobs", partition=part, reason=reason) == n
        assert m("coreburst_burst_orphan_instances") == len(doc["orphan_instances"]) == 1
        age = m("coreburst_burst_orphan_instance_age_seconds", instance=orphan, node="",
                why="no Slurm node tag")  # fmt: skip
        assert age is not None and abs(age - lost["age_s"]) <= 30
        for n in doc["nodes"]:
            if n["state"] not in ("idle~", "up"):
                assert m("coreburst_burst_node_not_ready", pool=n["pool"], node=n["node"],
                         state=n["state"], reason=n["reason"] or "") == 1  # fmt: skip
        for period, limit in spend["limits_usd"].items():
            scope = dict(scope="account", period=period)
            assert m("coreburst_burst_spend_limit_usd", **scope) == limit
            assert m("coreburst_burst_spend_spent_usd", **scope) == spend["spent_usd"][period]
            got = m("coreburst_burst_spend_left_usd", **scope)
            assert got is not None and abs(got - spend["left_usd"][period]) < 0.5
        got = m("coreburst_burst_spend_committed_usd", scope="account")
        assert got is not None and abs(got - spend["committed_usd"]) < 0.5  # seconds apart
        assert not [k for k in metrics if k[0] == "coreburst_burst_status_unknown"]
    finally:
        proxy.no_capacity = set()
        watcher.health.pop("od-1", None)
        for j in (spot_job, od_job):
            slurm.run("scancel", j, check=False)
