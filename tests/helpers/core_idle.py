"""The core-idle rule's test doubles: a fake Prometheus made up by us (a loopback HTTP server
answering ``POST /api/v1/query_range`` in the matrix shape of Prometheus's docs with
dcgm-exporter's labels), stand-in scripts for ``squeue``/``scontrol``/``scancel``, and a daemon
that runs only the rule. The recorded ``squeue`` output is tests/unit/core/fixtures/
squeue-22.05.json; the real Prometheus and Slurm run in tests/integration/core."""

from __future__ import annotations

import json
import re
import stat
import threading
import urllib.parse
from collections.abc import Callable
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import boto3

from coreburst.sandbox.clocks import FakeClock
from guardrails.adapters.aws import Aws
from guardrails.adapters.dcgm import GPU_UTIL
from guardrails.adapters.slurm import parse_jobs
from guardrails.configfile import parse_config
from guardrails.daemon import Daemon
from guardrails.stores.sqlite import State

FIXTURE = Path(__file__).parents[1] / "unit" / "core" / "fixtures" / "squeue-22.05.json"
JOB3 = next(j for j in parse_jobs(FIXTURE.read_text()) if j.job_id == "3")
START = JOB3.start
ValueFn = Callable[[str, int, datetime], float | None]


class FakePrometheus:
    """``hosts``: exporter host -> GPU indexes; ``value(host, gpu, t)``: DCGM_FI_DEV_GPU_UTIL
    in percent (None: no sample). No profiling field, as on GPUs without it."""

    def __init__(self, hosts: dict[str, tuple[int, ...]], value: ValueFn) -> None:
        self.hosts, self.value = hosts, value
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                n = int(self.headers.get("Content-Length", 0))
                form = urllib.parse.parse_qs(self.rfile.read(n).decode())
                body = json.dumps(fake.answer({k: v[0] for k, v in form.items()})).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                return

        self.srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.srv.server_address[1]}"
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def answer(self, form: dict[str, str]) -> dict[str, Any]:
        query = form["query"]
        result: list[dict[str, Any]] = []
        if query.startswith(GPU_UTIL):
            m = re.search(r'hostname=~"((?:[^"\\]|\\.)*)"', query)
            pattern = m.group(1).replace("\\\\", "\\") if m else ".*"
            t0, t1, step = float(form["start"]), float(form["end"]), float(form["step"])
            for host, gpus in self.hosts.items():
                if not re.fullmatch(pattern, host):
                    continue
                for g in gpus:
                    values = []
                    t = t0
                    while t <= t1:
                        v = self.value(host, g, datetime.fromtimestamp(t, START.tzinfo))
                        if v is not None:
                            values.append([t, f"{v:g}"])
                        t += step
                    labels = {"__name__": GPU_UTIL, "gpu": str(g), "hostname": host}
                    result.append({"metric": labels, "values": values})
        return {"status": "success", "data": {"resultType": "matrix", "result": result}}

    def stop(self) -> None:
        self.srv.shutdown()
        self.srv.server_close()


def _script(path: Path, body: str) -> None:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


def daemon(tmp_path: Path, bin_dir: Path, prom: FakePrometheus, clock: FakeClock) -> Daemon:
    cfg = parse_config(
        f'rules: [core-idle]\ndry_run: false\nstate: {{path: "{tmp_path}/s.db", '
        f'audit_log: "{tmp_path}/a.jsonl"}}\n'
        f'safety: {{kill_switch_file: "{tmp_path}/stop"}}\nmetrics_endpoint: {{enabled: false}}\n'
        f"core_idle: {{enabled: true, prometheus_url: '{prom.url}', policy: cancel,"
        f' slurm_bin_dir: "{bin_dir}", slack_users: {{root: U0ROOT01}}}}\n',
        "g.yaml",
    )
    return Daemon(
        cfg,
        Aws(cfg.aws, boto3.session.Session(region_name="us-east-1")),
        State(cfg.state.path),
        clock=clock,
    )
