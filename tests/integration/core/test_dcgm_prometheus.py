"""``guardrails.adapters.dcgm`` against a real Prometheus (Debian's 2.42) serving recorded
dcgm-exporter
metrics (fixtures/dcgm-core-lab.prom, backfilled with ``promtool tsdb create-blocks-from
openmetrics``). What is checked is Prometheus's own answer to ``/api/v1/query_range``
(Prometheus docs, "HTTP API: Range queries"), including its error bodies.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from coreburst.sandbox.prometheus import PrometheusServer, parse_scrape
from guardrails.adapters.dcgm import GPU_UTIL, Prometheus, PrometheusError, gpu_activity, selector

pytestmark = pytest.mark.integration
FIXTURES = Path(__file__).parent / "fixtures"


def test_the_fixture_is_dcgm_exporters_label_set() -> None:
    """The label set of render_metrics.go's gpuMetricsFormat (dcgm-exporter, commit d5e5f51):
    gpu, UUID, pci_bus_id, device, modelName, then hostname (Hostname before #655)."""
    samples = parse_scrape((FIXTURES / "dcgm-core-lab.prom").read_text())
    order = ["gpu", "UUID", "pci_bus_id", "device", "modelName"]
    for _metric, labels, _ in samples:
        assert list(labels)[:5] == order
        assert list(labels)[5] in ("hostname", "Hostname")


def test_activity_per_host_and_gpu_in_percent(
    prometheus: PrometheusServer, history_now: datetime
) -> None:
    prom = Prometheus(prometheus.url)
    end = history_now
    acts = gpu_activity(prom, {"core1", "core2"}, end - timedelta(hours=1), end, step_s=60)
    # core1 has the profiling field: 0.8 of engine time is 80 %, not DCGM_FI_DEV_GPU_UTIL's 100.
    assert {v for k, s in acts.items() if k[0] == "core1" and k[1] >= 2 for v in s.values} == {80.0}
    assert set(acts[("core1", 0)].values) == {0.0}
    # core2 (label Hostname, no profiling field): DCGM_FI_DEV_GPU_UTIL in percent.
    assert set(acts[("core2", 0)].values) == {65.0}
    # core2 GPU 1 reports nothing: no key, never a zero.
    assert ("core2", 1) not in acts
    assert len(acts) == 15
    # One point a step over the hour: the 120 s samples fill each 60 s step (lookback).
    assert len(acts[("core1", 0)]) == 61
    # Only the hosts asked for.
    assert {h for h, _ in gpu_activity(prom, {"core2"}, end - timedelta(hours=1), end)} == {"core2"}


def test_a_week_of_history_stays_under_the_point_limit(
    prometheus: PrometheusServer, history_now: datetime
) -> None:
    """Seven days at a 60 s step would be 10,081 points; Prometheus refuses more than 11,000
    per series, and the step is widened to stay under 10,000."""
    prom = Prometheus(prometheus.url)
    acts = gpu_activity(prom, {"core1"}, history_now - timedelta(days=7), history_now, step_s=60)
    assert 9000 < len(acts[("core1", 3)]) <= 10_001


def test_prometheus_errors_are_one_line(
    prometheus: PrometheusServer, history_now: datetime
) -> None:
    prom = Prometheus(prometheus.url)
    with pytest.raises(PrometheusError, match=r"HTTP 400 bad_data: .*parse error") as e:
        prom.query_range("sum(", history_now, history_now, 60)
    assert "\n" not in str(e.value)
    # end before start: Prometheus's own refusal
    with pytest.raises(PrometheusError, match="HTTP 400"):
        prom.query_range(GPU_UTIL, history_now, history_now - timedelta(hours=1), 60)
    with pytest.raises(PrometheusError, match=r"unreachable .*core_idle.prometheus_url"):
        Prometheus("http://127.0.0.1:9", timeout_s=2).query_range(
            "up", history_now, history_now, 60
        )


@pytest.fixture
def not_prometheus() -> Iterator[str]:
    """A web server that is not Prometheus (a URL pointing at the wrong service)."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            self.wfile.write(b"<html>Grafana</html>")

        def log_message(self, *args: object) -> None:
            return

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def test_an_answer_that_is_not_json_is_one_line(not_prometheus: str, history_now: datetime) -> None:
    with pytest.raises(PrometheusError, match="not JSON"):
        Prometheus(not_prometheus).query_range("up", history_now, history_now, 60)


def test_host_names_are_matched_exactly(
    prometheus: PrometheusServer, history_now: datetime
) -> None:
    """A regex character in a host name is escaped: ``core.`` does not match core1/core2."""
    prom = Prometheus(prometheus.url)
    assert selector(GPU_UTIL, {"core."}).count("core\\\\.") == 2
    assert gpu_activity(prom, {"core."}, history_now - timedelta(minutes=10), history_now) == {}
