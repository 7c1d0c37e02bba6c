"""GPU active from DCGM (coreburst/cost/measured.py, ``coreburst cost report --prometheus``).

The project's real Prometheus (session fixture in tests/integration/core/conftest.py) is not
reachable from these tests, so Prometheus's side is a **recorded** answer of a real Prometheus
(prometheus-query-range-recorded.json says how it was made), replayed over HTTP by a stand-in
that gives it only for the exact recorded request: the report's own Prometheus client
(guardrails.adapters.dcgm.Prometheus) reads it as it reads a server.
"""

from __future__ import annotations

import json
import threading
import urllib.parse
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from coreburst.cost.accounting import JobRecord, parse_sacct_json
from coreburst.cost.measured import job_active, weighted
from coreburst.cost.report import app
from guardrails.adapters.dcgm import Activity
from guardrails.model import Sample, Series
from tests.helpers.cost_report import SACCT, WINDOW, slurm_bin_fixture, stack_dir_fixture

__all__ = ["slurm_bin_fixture", "stack_dir_fixture"]  # the CLI's stack and Slurm stand-ins

HERE = Path(__file__).resolve().parent
RECORDED = json.loads((HERE / "prometheus-query-range-recorded.json").read_text())
AUDIT = HERE / "burst-audit-recorded.jsonl"
NOW = 1796346600


@pytest.fixture(name="prom_url")
def prom_url_fixture() -> Iterator[str]:
    """Prometheus's HTTP API for one request: the recorded one."""
    calls: list[dict[str, str]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            form = urllib.parse.parse_qs(
                self.rfile.read(int(self.headers["Content-Length"])).decode()
            )
            got = {k: v[0] for k, v in form.items()}
            calls.append(got)
            if self.path == "/api/v1/query_range" and got == RECORDED["request"]:
                status, body = 200, RECORDED["response"]
            else:  # as Prometheus answers a query it cannot run
                status = 400
                body = {"status": "error", "errorType": "bad_data", "error": "not recorded"}
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
    assert calls, "the report never asked Prometheus"


def _run(stack_dir: Path, *args: str) -> tuple[int, str, str]:
    res = CliRunner().invoke(
        app,
        ["report", *WINDOW, "--stack", "lab", "--stack-dir", str(stack_dir),
         "--sacct-json", str(SACCT), "--audit-log", str(AUDIT), "--gpu-hour-usd", "2.35", *args],
    )  # fmt: skip
    return res.exit_code, res.stdout, res.stderr


def test_gpu_active_per_job_and_team(stack_dir: Path, prom_url: str) -> None:
    code, out, err = _run(stack_dir, "--prometheus", prom_url, "--by", "job", "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    jobs = {r["group"]: r for r in doc["rows"]}
    # job 1 held all 8 GPUs of core1 (0-1 at 0, 2-7 at 0.8); jobs 2 and 3 by their hpc_job GPUs
    assert {j: r["gpu_active"] for j, r in jobs.items()} == {"1": 0.6, "2": 0.5, "3": 0.25}
    assert doc["gpu_active_source"].startswith(prom_url)
    code, out, _ = _run(stack_dir, "--prometheus", prom_url, "--format", "json")
    teams = {r["group"]: r for r in json.loads(out)["rows"]}
    # weighted by GPU-seconds: ml = (24 x 0.6 + 20 x 0.25) / 44; research job 2 alone
    assert teams["ml"]["gpu_active"] == round(19.4 / 44, 4)
    assert teams["research"]["gpu_active"] == 0.5
    code, table, _ = _run(stack_dir, "--prometheus", prom_url)
    ml = next(line for line in table.splitlines() if line.startswith("│ ml "))
    assert ml.rstrip("│ ").endswith("44%")
    assert "GPU active: DCGM engine-active ratio from" in table


def test_without_prometheus_gpu_active_is_na_never_zero(stack_dir: Path) -> None:
    code, table, _ = _run(stack_dir)
    assert code == 0
    ml = next(line for line in table.splitlines() if line.startswith("│ ml "))
    assert ml.rstrip("│ ").endswith("n/a") and "0%" not in ml
    assert "GPU active: n/a (give --prometheus URL" in table
    _, out, _ = _run(stack_dir, "--format", "json")
    assert all(r["gpu_active"] is None for r in json.loads(out)["rows"])


def test_unreachable_prometheus_is_one_line_exit_2(stack_dir: Path) -> None:
    code, out, err = _run(stack_dir, "--prometheus", "http://127.0.0.1:9")
    assert code == 2 and out == ""
    assert "unreachable" in err and "--prometheus" in err and err.count("\n") == 1
    code, _, err = _run(stack_dir, "--prometheus", "ftp://prom")
    assert code == 2 and "not an http(s) URL" in err


def _series(values: dict[int, float]) -> Series:
    return Series.of(Sample(datetime.fromtimestamp(t, UTC), v) for t, v in sorted(values.items()))


JOB = JobRecord("7", "u", "ml", "core", "c", ("core1",), 8, 1000, 1100, "COMPLETED")


def test_missing_data_and_shared_nodes_are_unmeasured() -> None:
    full = Activity(series={("core1", g): _series({1050: 0.5}) for g in range(8)})
    assert job_active(JOB, full, {"core1": 8}, since=0, until=NOW, now=NOW) == 0.5
    # one GPU without a series, or without a point in the run: n/a, not a lower mean
    holey = Activity(series={("core1", g): _series({1050: 0.5}) for g in range(7)})
    assert job_active(JOB, holey, {"core1": 8}, since=0, until=NOW, now=NOW) is None
    late = Activity(series={**full.series, ("core1", 7): _series({1200: 0.5})})
    assert job_active(JOB, late, {"core1": 8}, since=0, until=NOW, now=NOW) is None
    # 4 of 8 GPUs and no hpc_job label: which 4, sacct does not say
    half = JobRecord("8", "u", "ml", "core", "c", ("core1",), 4, 1000, 1100, "COMPLETED")
    assert job_active(half, full, {"core1": 8}, since=0, until=NOW, now=NOW) is None
    # ... unless the exporter labels its GPUs with the job
    labelled = Activity(
        series=full.series, hpc_jobs={("core1", g): {"8": _series({1050: 0.9})} for g in (0, 1)}
    )
    assert job_active(half, labelled, {"core1": 8}, since=0, until=NOW, now=NOW) == 0.9


def test_weighted_mean_skips_unmeasured() -> None:
    from fractions import Fraction

    assert weighted([(Fraction(10), 0.5), (Fraction(30), None), (Fraction(30), 1.0)]) == (
        (5 + 30) / 40,
        Fraction(40),
    )
    assert weighted([(Fraction(10), None)]) == (None, Fraction(0))


def test_recorded_answer_is_prometheus_api_shaped() -> None:
    resp = RECORDED["response"]
    assert resp["status"] == "success" and resp["data"]["resultType"] == "matrix"
    assert "Recorded, not made up" in RECORDED["_coreburst_fixture"]
    jobs = parse_sacct_json(SACCT.read_bytes(), NOW)
    assert {j.job_id for j in jobs} == {"1", "2", "3"}
