"""The burst health gate and EC2 scheduled events on a real slurmctld (Debian slurm-wlm
22.05), EC2 on moto server (coreburst/sandbox/slurmlab.py).

* **Health gate**: the lab's emulated boot (``BootWatcher.health``) runs ``coreburst burst
  node-check --gate`` on recorded outputs before starting a node's slurmd
  (tests/fixtures/health/, synthesized from the tools' documented formats, not recorded on
  hardware). The first instance of od-1 fails DCGM: its slurmd never starts, the node goes
  DOWN with the reason, the job requeues at once, the instance is terminated, and the job
  completes on od-1's next (healthy) instance.
* **Scheduled event**: moto answers DescribeInstanceStatus without ``Events``, so a loopback
  proxy in front of it adds an ``eventsSet`` item to the answer for one instance, in the shape
  the EC2 API reference documents (DescribeInstanceStatus response elements; InstanceStatusEvent:
  code, description, instanceEventId, notBefore, notAfter). One guardrails daemon cycle
  (burst-health) drains the node under its running job; once the event is inside the margin
  the next cycle requeues the job and the instance is replaced.
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import pytest

from coreburst.sandbox.emulator import fake_session
from coreburst.sandbox.slurmlab import BurstLab, burst_lab, missing_prerequisite
from guardrails.adapters.aws import Aws
from guardrails.configfile import load_config
from guardrails.daemon import Daemon
from guardrails.stores.sqlite import State
from tests.helpers.prereq import require

pytestmark = pytest.mark.integration
FIX = Path(__file__).resolve().parents[2] / "fixtures" / "health"

# EC2 API reference, DescribeInstanceStatus ("Example 2": an instance with a scheduled event)
# and InstanceStatusEvent: made up in that shape, as moto has no scheduled events.
EVENT_XML = (
    "<eventsSet><item><instanceEventId>instance-event-0a1b2c3d4e5f60718</instanceEventId>"
    "<code>instance-retirement</code><description>The instance is running on degraded hardware"
    "</description><notBefore>{nb}</notBefore><notAfter>{na}</notAfter></item></eventsSet>"
)


class EventsProxy:
    """Loopback HTTP proxy to moto server that adds a scheduled event to one instance's
    DescribeInstanceStatus item (``events``: instance id -> NotBefore); everything else
    passes unchanged."""

    def __init__(self, upstream: str) -> None:
        self.events: dict[str, datetime] = {}
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                req = urllib.request.Request(upstream + self.path, data=body, method="POST")
                for k, v in self.headers.items():
                    if k.lower() not in ("host", "content-length", "connection"):
                        req.add_header(k, v)
                try:
                    with urllib.request.urlopen(req, timeout=60) as resp:
                        status, headers, answer = resp.status, dict(resp.headers), resp.read()
                except urllib.error.HTTPError as err:
                    status, headers, answer = err.code, dict(err.headers), err.read()
                if parse_qs(body.decode()).get("Action") == ["DescribeInstanceStatus"]:
                    text = answer.decode()
                    for iid, nb in proxy.events.items():
                        tag = f"<instanceId>{iid}</instanceId>"
                        fmt = "%Y-%m-%dT%H:%M:%S.000Z"
                        ev = EVENT_XML.format(
                            nb=nb.strftime(fmt), na=(nb + timedelta(days=1)).strftime(fmt)
                        )
                        text = text.replace(tag, tag + ev)
                    answer = text.encode()
                self.send_response(status)
                for k, v in headers.items():
                    if k.lower() not in ("content-length", "transfer-encoding", "connection"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module", name="lab")
def lab_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BurstLab]:
    require(missing_prerequisite())
    with burst_lab(tmp_path_factory.mktemp("healthlab")) as lab:
        yield lab


def _job(lab: BurstLab, job: str) -> dict[str, str]:
    out = lab.slurm.run("scontrol", "-o", "show", "job", job).stdout
    return dict(t.partition("=")[::2] for t in out.split() if "=" in t)


def _audit(lab: BurstLab) -> list[dict[str, Any]]:
    path = lab.slurm.lab / "log" / "burst-audit.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def _submit(lab: BurstLab, node: str, seconds: int) -> str:
    return lab.slurm.run(
        "sbatch", "--parsable", "-o", "/dev/null", "-p", "burst", "--exclusive", "-N1",
        "-w", node, "-t", "10", "--wrap", f"sleep {seconds}",
    ).stdout.strip().split(";")[0]  # fmt: skip


def test_a_node_failing_its_health_check_never_runs_a_job_and_is_replaced(lab: BurstLab) -> None:
    slurm, watcher = lab.slurm, lab.watcher
    watcher.health["od-1"] = [FIX / "p5-dcgm-fail", FIX / "p5-healthy"]
    job = _submit(lab, "od-1", 1)
    try:
        lab.wait("od-1's first check", lambda: len(watcher.checks) >= 1, 40)
        node, bad, code, out = watcher.checks[0]
        assert (node, code) == ("od-1", 1), out
        assert "FAILED: dcgm: dcgmi diag -r 1: Page Retirement/Row Remap FAIL" in out
        # DOWN with the reason, the job requeued at once (not at ResumeTimeout), the
        # instance terminated by the SuspendProgram.
        lab.wait(
            "bad instance terminated",
            lambda: bad not in lab.instances("od-1", ("pending", "running", "shutting-down")),
            30,
        )
        shown = slurm.run("scontrol", "show", "job", job).stdout
        assert "AdminComment=coreburst: burst node od-1 failed its health check (dcgm:" in shown
        (failed,) = [e for e in _audit(lab) if e["event"] == "health.failed"]
        assert failed["node"] == "od-1" and failed["instance"] == bad and failed["jobs"] == [job]
        assert "slurm_errors" not in failed
        lab.wait("job done", lambda: _job(lab, job)["JobState"] == "COMPLETED", 90)
        assert int(_job(lab, job)["Restarts"]) == 1
        # The job ran on od-1's replacement; the failed instance's slurmd never started.
        assert bad not in [iid for _, iid in watcher.boots]
        (good,) = [iid for n, iid in watcher.boots if n == "od-1"]
        assert good != bad and [c[2] for c in watcher.checks] == [1, 0]
        shown = slurm.run("scontrol", "show", "node", "od-1").stdout
        assert "Comment=coreburst: health check failed " in shown and f"on {bad}: dcgm:" in shown
    finally:
        watcher.health.pop("od-1", None)
        slurm.run("scancel", job, check=False)


def _daemon_cycle(lab: BurstLab, endpoint: str) -> list[dict[str, Any]]:
    d = lab.slurm.lab
    path = d / "guardrails-health.yaml"
    path.write_text(
        "rules: [burst-health]\ndry_run: false\n"
        f"aws: {{endpoint_url: {endpoint}}}\n"
        f'state: {{path: "{d}/gh.sqlite", audit_log: "{d}/log/gh-audit.jsonl"}}\n'
        "metrics_endpoint: {enabled: false}\n"
        f'safety: {{kill_switch_file: "{d}/stop"}}\n'
        f'burst_reconcile: {{stack: lab, spend_scope: null, slurm_conf: "{lab.slurm.conf}"}}\n'
        "burst_health: {enabled: true, event_margin: 30m}\n"
    )
    cfg = load_config(path)
    log = cfg.state.audit_log
    before = log.read_text().count("\n") if log.exists() else 0
    state = State(cfg.state.path)
    daemon = Daemon(cfg, Aws(cfg.aws, fake_session()), state)
    try:
        report = daemon.run_cycle()
    finally:
        daemon.close()
        state.close()
    assert report.errors == []
    return [json.loads(x) for x in log.read_text().splitlines()[before:]]


def test_a_scheduled_event_drains_the_node_then_requeues_before_the_event(lab: BurstLab) -> None:
    """od-1's job ends by itself on the drained node, which is then powered down (instance
    replaced); od-2's job is still there when the event comes inside the margin: requeued."""
    slurm = lab.slurm
    lab.power_down(["od-1", "od-2"])  # the test before used od-1
    proxy = EventsProxy(lab.moto.url)
    short, long = _submit(lab, "od-1", 20), _submit(lab, "od-2", 600)
    try:
        lab.wait(
            "both jobs running",
            lambda: {_job(lab, j)["JobState"] for j in (short, long)} == {"RUNNING"},
            90,
        )
        (iid1,), (iid2,) = lab.instances("od-1"), lab.instances("od-2")
        far = datetime.now(UTC) + timedelta(hours=2)
        proxy.events.update({iid1: far, iid2: far})
        events = _daemon_cycle(lab, proxy.url)
        done = [(e["instance_id"], e["kind"]) for e in events if e["event"] == "action.executed"]
        assert sorted(done) == [("od-1", "health-drain"), ("od-2", "health-drain")]
        for node, iid in (("od-1", iid1), ("od-2", iid2)):
            assert {"DRAIN", "POWER_DOWN"} <= set(slurm.node_state(node).split("+"))
            shown = slurm.run("scontrol", "show", "node", node).stdout
            assert "Reason=coreburst: EC2 instance-retirement not before " in shown
            assert f"on {iid} (The instance is running on degraded hardware)" in shown
        assert _job(lab, long)["JobState"] == "RUNNING"  # jobs may finish before the event

        # od-1's job finishes: the drained node powers down and its instance goes.
        lab.wait("short job done", lambda: _job(lab, short)["JobState"] == "COMPLETED", 40)
        assert _job(lab, short)["Restarts"] == "0"
        lab.wait("od-1's instance replaced", lambda: iid1 not in lab.instances("od-1"), 30)
        idle_again = ["IDLE", "CLOUD", "POWERED_DOWN"]  # idle~: the drain is gone with it
        lab.wait(
            "od-1 back in the pool", lambda: slurm.node_state("od-1").split("+") == idle_again, 30
        )

        # od-2's event moves inside the 30 min margin: its job is requeued, the instance goes.
        proxy.events[iid2] = datetime.now(UTC) + timedelta(minutes=10)
        events = _daemon_cycle(lab, proxy.url)
        done = [(e["instance_id"], e["kind"]) for e in events if e["event"] == "action.executed"]
        assert done == [("od-2", "health-force")]
        lab.wait("od-2's instance replaced", lambda: iid2 not in lab.instances("od-2"), 30)
        lab.wait("job requeued", lambda: int(_job(lab, long).get("Restarts", "0")) >= 1, 30)
        lab.wait(
            "od-2 back in the pool", lambda: slurm.node_state("od-2").split("+") == idle_again, 30
        )
    finally:
        proxy.stop()
        slurm.run("scancel", short, long, check=False)
