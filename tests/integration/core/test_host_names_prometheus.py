"""Exporter host names and the HPC job mapping against a real Prometheus (Debian package)
serving fixtures/dcgm-fqdn-hpc.prom (made up by us in dcgm-exporter's exposition format, with
FQDN ``hostname`` labels and ``hpc_job`` labels; see its header), backfilled with promtool.

What is checked is Prometheus's own evaluation of the node selector (an RE2 regex, fully
anchored: ``core1(\\..+)?`` matches ``core1.lab.example``, not ``core10``) and the rule's decisions
on what it answers: FQDN hosts land on their Slurm node, two exporters of one node make it
blind, ``host_map`` names the rest, and an ``hpc_job`` label naming another job than Slurm's
makes that job blind.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from coreburst.sandbox import prometheus as promlab
from guardrails.adapters.dcgm import GPU_UTIL, Prometheus, node_activity, node_selector
from guardrails.adapters.slurm import SlurmJob
from guardrails.configfile import parse_config
from guardrails.rules.core_idle import assess, read_activity
from tests.helpers.prereq import require

pytestmark = pytest.mark.integration
FIXTURE = Path(__file__).parent / "fixtures" / "dcgm-fqdn-hpc.prom"
NOW = datetime.now(UTC).replace(microsecond=0)
P = parse_config("core_idle: {host_map: {gpu-node-3: core3}}").core_idle


@pytest.fixture(scope="module")
def prom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    require(promlab.missing_prerequisite())
    scrape = FIXTURE.read_text()
    # core10.lab.example: a node whose name starts like core1's must not be read as core1.
    scrape += scrape.splitlines()[-1].replace("core5.lab.example", "core10.lab.example") + "\n"
    history = promlab.openmetrics_history(
        scrape, NOW - timedelta(hours=4), NOW + timedelta(hours=1), 60
    )
    with promlab.PrometheusServer(tmp_path_factory.mktemp("prom-fqdn"), history) as server:
        yield Prometheus(server.url)


def job(job_id: str, node: str, gpus: tuple[int, ...] = (0,)) -> SlurmJob:
    return SlurmJob(
        job_id, "ann", "ml", "core", NOW - timedelta(hours=3), None, {node: gpus}, False
    )


def test_prometheus_selects_each_nodes_exporter_hosts(prom: Prometheus) -> None:
    act = node_activity(
        prom, {"core1", "core2", "core3"}, NOW - timedelta(hours=1), NOW, host_map=P.host_map
    )
    assert sorted(act.series) == [("core1", 0), ("core1", 1), ("core3", 0)]
    assert act.unmapped == {
        "core2": "exporter hosts core2.lab.example and core2.old.example both match Slurm node "
        "core2; set core_idle.host_map"
    }
    assert len(act.series[("core1", 0)]) == 61 and set(act.series[("core1", 0)].values) == {0}
    assert set(act.hpc_jobs[("core1", 0)]) == {"101"}
    # Prometheus's own answer to the selector: core10 is not core1 (RE2 anchors the regex).
    raw = prom.query_range(
        node_selector(GPU_UTIL, {"core1", "core5"}, {}), NOW - timedelta(minutes=5), NOW, 60
    )
    assert {r["metric"]["hostname"] for r in raw} == {"core1.lab.example", "core5.lab.example"}
    # core5's two hpc_job copies are one GPU with both labels.
    act = node_activity(prom, {"core1", "core5"}, NOW - timedelta(hours=1), NOW)
    assert {n for n, _ in act.series} == {"core1", "core5"}
    assert set(act.hpc_jobs[("core5", 0)]) == {"105", "205"}


def test_the_rules_decisions_on_what_prometheus_answers(prom: Prometheus) -> None:
    jobs = [
        job("101", "core1", (0, 1)),
        job("102", "core2"),
        job("103", "core3"),
        job("104", "core4"),
        job("105", "core5"),
    ]
    window, whole = read_activity(prom, jobs, NOW, P)
    got = {
        j.job_id: assess(
            j, window.series, whole.series, NOW, P, unmapped=window.unmapped,
            hpc_jobs=window.hpc_jobs,
        )
        for j in jobs
    }  # fmt: skip
    assert {k: a.state for k, a in got.items()} == {
        "101": "idle",  # FQDN host, hpc_job agrees
        "102": "blind",  # two exporters for core2
        "103": "idle",  # via host_map
        "104": "blind",  # hpc_job 999
        "105": "blind",  # hpc_job 105 and 205
    }
    assert got["104"].reason == (
        "core4 GPU 0: dcgm-exporter's hpc_job label names job 999, Slurm job 104"
    )
    assert "both match Slurm node core2" in got["102"].reason
