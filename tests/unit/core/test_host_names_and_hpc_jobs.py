"""Matching dcgm-exporter's hosts to Slurm nodes, and its HPC job mapping as a cross-check.

The exporter's ``hostname`` label is often the FQDN, or another name than Slurm's node name:
the exact name, else the short name, else ``core_idle.host_map`` matches it; two exporter hosts
on one node make that node blind, never a guess. A GPU whose series carry an ``hpc_job`` label
(dcgm-exporter ``--hpc-job-mapping-dir``, internal/pkg/transformation/hpc.go) naming another job
than Slurm's is blind for that job.

The series come from ../../integration/core/fixtures/dcgm-fqdn-hpc.prom (made up by us in the
exporter's exposition format; see its header), turned into the matrix shape of Prometheus's
``/api/v1/query_range`` answer (Prometheus docs, "HTTP API: Range vectors") as a real
Prometheus returns it in tests/integration/core/test_host_names_prometheus.py.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from coreburst.sandbox.prometheus import parse_scrape
from guardrails.adapters.dcgm import match_hosts, parse_series, to_nodes
from guardrails.adapters.slurm import SlurmJob
from guardrails.cli import app
from guardrails.config import ConfigError
from guardrails.configfile import parse_config
from guardrails.rules.core_idle import CoreIdleConfig, assess

FIXTURE = Path(__file__).parents[2] / "integration" / "core" / "fixtures" / "dcgm-fqdn-hpc.prom"
NOW = datetime(2026, 12, 3, 12, tzinfo=UTC)
NODES = {"core1", "core2", "core3", "core4", "core5"}
P = parse_config("core_idle: {host_map: {gpu-node-3: core3}}").core_idle


def matrix(text: str, *, since: timedelta = timedelta(hours=3)) -> list[dict[str, Any]]:
    """Each fixture sample every 60 s over ``since`` up to NOW, as a matrix result."""
    t0 = (NOW - since).timestamp()
    return [
        {
            "metric": {"__name__": name, **labels},
            "values": [
                [t0 + 60 * i, f"{v:g}"] for i in range(int(since.total_seconds()) // 60 + 1)
            ],
        }
        for name, labels, v in parse_scrape(text)
    ]


def job(job_id: str, node: str, gpus: tuple[int, ...] = (0,)) -> SlurmJob:
    return SlurmJob(
        job_id, "ann", "ml", "core", NOW - timedelta(hours=3), None, {node: gpus}, False
    )


def decide(j: SlurmJob, cfg: CoreIdleConfig = P, text: str | None = None) -> Any:
    series, jobs = parse_series(matrix(text or FIXTURE.read_text()), 1)
    act = to_nodes(series, jobs, set(j.gpus), cfg.host_map)
    return assess(j, act.series, act.series, NOW, cfg, unmapped=act.unmapped, hpc_jobs=act.hpc_jobs)


def test_fqdn_and_short_names_match_the_slurm_node() -> None:
    mapping, unmapped = match_hosts(
        ["core1.lab.example", "core7", "gpu-node-3"], {"core1", "core7.lab.example", "core3"}, {}
    )
    # an FQDN exporter on a short Slurm name, and a short exporter on an FQDN Slurm name
    assert mapping == {"core1.lab.example": "core1", "core7": "core7.lab.example"}
    assert unmapped == {}  # gpu-node-3 matches nothing without host_map: core3 has no data
    assert decide(job("101", "core1", (0, 1))).state == "idle"


def test_two_exporter_hosts_on_one_node_are_never_guessed() -> None:
    a = decide(job("102", "core2"))
    assert a.state == "blind"
    assert a.reason == (
        "core2 GPU 0: exporter hosts core2.lab.example and core2.old.example both match Slurm "
        "node core2; set core_idle.host_map"
    )
    # The exact name does not win over an FQDN either: two exporters, two readings.
    _, unmapped = match_hosts(["core2", "core2.lab.example"], {"core2"}, {})
    assert "core2 and core2.lab.example both match" in unmapped["core2"]
    # One exporter host matching two Slurm nodes by short name is not guessed either.
    mapping, unmapped = match_hosts(["core9"], {"core9.a", "core9.b"}, {})
    assert mapping == {} and set(unmapped) == {"core9.a", "core9.b"}
    # host_map names the one to use: the other is ignored.
    pick = parse_config("core_idle: {host_map: {core2.lab.example: core2}}").core_idle
    assert decide(job("102", "core2"), pick).state == "idle"


def test_host_map_matches_a_host_named_unlike_its_node() -> None:
    assert decide(job("103", "core3")).state == "idle"
    assert decide(job("103", "core3"), CoreIdleConfig()).reason == "core3 GPU 0: no DCGM data"
    # A node named in host_map takes only the hosts mapped to it, not its own name's.
    mapping, _ = match_hosts(["core3", "gpu-node-3"], {"core3"}, {"gpu-node-3": "core3"})
    assert mapping == {"gpu-node-3": "core3"}


def test_every_fixture_host_lands_on_its_node_or_is_reported() -> None:
    series, jobs = parse_series(matrix(FIXTURE.read_text()), 1)
    act = to_nodes(series, jobs, NODES, P.host_map)
    assert set(act.unmapped) == {"core2"}
    assert {n for n, _ in act.series} == {"core1", "core3", "core4", "core5"}
    assert set(act.hpc_jobs) == {("core1", 0), ("core1", 1), ("core4", 0), ("core5", 0)}


@pytest.mark.parametrize(
    ("yaml_text", "says"),
    [
        (
            "core_idle: {host_map: {core2.lab.example: core2, core2.old.example: core2}}",
            "core_idle: host_map maps core2.lab.example and core2.old.example to the one Slurm "
            "node core2; map exactly one exporter host to each node",
        ),
        ("core_idle: {host_map: {'core 1': core1}}", "core_idle.host_map.core 1.[key]"),
        ("core_idle: {host_map: {core1.lab: ''}}", "core_idle.host_map.core1.lab"),
    ],
)
def test_check_config_refuses_a_bad_host_map_in_one_line(
    tmp_path: Path, yaml_text: str, says: str
) -> None:
    with pytest.raises(ConfigError) as e:
        parse_config(yaml_text, "g.yaml")
    assert says in str(e.value) and "\n" not in str(e.value)
    bad = tmp_path / "g.yaml"
    bad.write_text(yaml_text + "\n")
    r = CliRunner().invoke(app, ["check-config", str(bad)])
    assert r.exit_code == 2 and "Traceback" not in r.output and says in r.output
    assert len(r.output.strip().splitlines()) == 1


def test_an_hpc_job_label_naming_another_job_makes_the_gpu_blind() -> None:
    a = decide(job("104", "core4"))
    assert a.state == "blind" and a.efficiency_pct is None and a.used_gpu_h is None
    assert a.reason == "core4 GPU 0: dcgm-exporter's hpc_job label names job 999, Slurm job 104"
    # Shared by the exporter's account with another job: conflicting too.
    b = decide(job("105", "core5"))
    assert b.state == "blind" and "names job 205, Slurm job 105" in b.reason
    # The label agreeing with Slurm, or no label at all, is no conflict.
    assert decide(job("101", "core1", (0, 1))).state == "idle"
    assert decide(job("103", "core3")).state == "idle"


def test_the_previous_jobs_label_just_after_the_start_is_no_conflict() -> None:
    """The prolog writes the mapping file as the job starts; the exporter reads it at its next
    collection, so the previous job's label may show for up to ``max_gap`` after the start."""
    # Started exactly one batch window (2h) ago: the window begins at the job's start.
    j = SlurmJob("104", "ann", "ml", "core", NOW - timedelta(hours=2), None, {"core4": (0,)}, False)
    line = next(x for x in FIXTURE.read_text().splitlines() if 'hpc_job="999"' in x)
    old = matrix(line, since=timedelta(hours=3))[0]
    start = j.start.timestamp()
    old["values"] = [v for v in old["values"] if v[0] <= start + 120]  # 2 min into the job
    new = matrix(line.replace('hpc_job="999"', 'hpc_job="104"'))[0]
    series, jobs = parse_series([old, new], 1)
    assert set(jobs[("core4.lab.example", 0)]) == {"999", "104"}
    act = to_nodes(series, jobs, {"core4"}, {})
    a = assess(j, act.series, act.series, NOW, P, unmapped=act.unmapped, hpc_jobs=act.hpc_jobs)
    assert a.state == "idle"
    old["values"] = [v for v in matrix(line)[0]["values"] if v[0] <= start + 600]  # 10 min
    series, jobs = parse_series([old, new], 1)
    act = to_nodes(series, jobs, {"core4"}, {})
    a = assess(j, act.series, act.series, NOW, P, unmapped=act.unmapped, hpc_jobs=act.hpc_jobs)
    assert a.state == "blind" and "names job 999" in a.reason


def test_copies_of_one_gpu_per_hpc_job_are_one_series() -> None:
    """hpc.go copies a GPU's reading once per job sharing it: one GPU, one merged series."""
    series, jobs = parse_series(matrix(FIXTURE.read_text()), 100)
    assert len(series[("core5.lab.example", 0)]) == 181
    assert set(jobs[("core5.lab.example", 0)]) == {"105", "205"}
    assert ("core2.lab.example", 0) in series and ("core2.old.example", 0) in series
