"""Zero false reclaims by construction (issue 14, item 1): a node is idle only when every
accelerator the catalog says it has is covered, and a partial ``idle.metrics`` override keeps
the other families' defaults.

The NeuronCore counts are the catalog's (coreburst/common/data/catalog.yaml, source ``neuron-lnc``):
AWS
Neuron docs, "Logical NeuronCore configuration"
(https://awsdocs-neuron.readthedocs-hosted.com/en/latest/general/arch/neuron-features/logical-neuroncore-config.html):
"Every Trainium2 device contains eight physical NeuronCore-v3", grouped by
NEURON_LOGICAL_NC_CONFIG; "Using Logical NeuronCores (LNC) with NKI": an LNC degree "of either
1 or 2"; shared/REFERENCE.md: trn2.48xlarge has 16 chips, 128 physical cores, 64 at the
default LNC=2. The series are published to moto (in-process) in the dimension sets of
``coreburst.common.telemetry`` and read back through the daemon's own ListMetrics/GetMetricData
path.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from moto import mock_aws
from typer.testing import CliRunner

from coreburst.common.catalog import load_catalog
from coreburst.common.telemetry import NEURON_LNC_TAG, UTILIZATION_METRICS
from coreburst.sandbox.emulator import FleetNode, fake_session, launch, publish
from guardrails.adapters.aws import Aws, inventory
from guardrails.cli import app
from guardrails.config import ConfigError
from guardrails.configfile import parse_config
from guardrails.idle import decide
from guardrails.rules.idle_reclaim import expected_series, idle_params, utilization

DEFS = {k: (m.namespace, m.metric_name, m.device_dimension) for k, m in UTILIZATION_METRICS.items()}
# A short window keeps stock moto's per-query datapoint scan quick; the rules are the same.
IDLE = "idle: {window: 10m, max_gap: 2m, period: 1m}\n"


def test_catalog_counts_every_neuroncore_at_the_nodes_lnc() -> None:
    trn2 = load_catalog().instance("trn2.48xlarge").accelerator
    assert trn2.count == 16 and trn2.neuron_cores is not None
    assert trn2.neuron_cores.physical_per_chip == 8  # "eight physical NeuronCore-v3"
    assert trn2.utilization_series() == 64  # default LNC=2
    assert trn2.utilization_series(1) == 128
    assert trn2.max_utilization_series() == 128
    assert load_catalog().instance("p5.48xlarge").accelerator.utilization_series() == 8


@pytest.fixture
def fleet() -> Any:
    with mock_aws():
        aws = Aws(parse_config("").aws, session=fake_session())
        yield aws, aws.client("ec2", "us-east-1"), aws.client("cloudwatch", "us-east-1")


def _run(
    aws: Any, ec2: Any, cw: Any, cfg_text: str, plan: dict[str, tuple[str, int, dict[str, str]]]
) -> dict[str, Any]:
    """Launch one node per ``plan`` entry (type, published series, tags), publish idle data for
    each published series, and classify every node as the idle-reclaim rule does."""
    ids: dict[str, str] = {}
    fleet_nodes = []
    for name, (itype, devices, tags) in plan.items():
        iid = launch(ec2, itype, tags)[0]
        ids[name] = iid
        kind = load_catalog().instance(itype).accelerator.kind
        fleet_nodes.append(FleetNode(iid, "us-east-1", kind, devices, "idle"))
    cfg = parse_config(IDLE + cfg_text, "g.yaml")
    nodes = inventory(ec2, "us-east-1", sorted({p[0] for p in plan.values()}), load_catalog())
    now = max(n.launch_time for n in nodes).replace(microsecond=0) + timedelta(hours=1)
    publish(
        {"us-east-1": cw},
        fleet_nodes,
        now - timedelta(minutes=12),
        now + timedelta(minutes=1),
        metric_defs=DEFS,
    )
    utils = utilization(aws, cfg, nodes, now)
    params = idle_params(cfg)
    by_id = {n.instance_id: n for n in nodes}
    return {name: decide(by_id[iid], utils[iid], None, now, params) for name, iid in ids.items()}


def test_trn2_with_63_of_64_neuroncore_series_is_blind_not_idle(fleet: Any) -> None:
    d = _run(
        *fleet,
        "",
        {
            "trn-63": ("trn2.48xlarge", 63, {}),
            "trn-64": ("trn2.48xlarge", 64, {}),
            "p5-7": ("p5.48xlarge", 7, {}),
            "p5-8": ("p5.48xlarge", 8, {}),
        },
    )
    assert d["trn-63"].state == "unknown" and d["trn-63"].step == "none"
    assert "only 63 of 64 accelerator series present" in d["trn-63"].reason
    assert d["trn-64"].state == "idle" and d["trn-64"].step == "mark"
    # regression: a p5 missing one GPU series stays blind
    assert d["p5-7"].state == "unknown" and "7 of 8" in d["p5-7"].reason
    assert d["p5-8"].state == "idle"


def test_the_lnc_comes_from_the_node_tag_or_the_config_never_a_default_of_one(fleet: Any) -> None:
    d = _run(
        *fleet,
        "",
        {
            # LNC=1: 128 logical cores; 64 published is half of them
            "lnc1-64": ("trn2.48xlarge", 64, {NEURON_LNC_TAG: "1"}),
            "lnc1-128": ("trn2.48xlarge", 128, {NEURON_LNC_TAG: "1"}),
            "bad-tag": ("trn2.48xlarge", 64, {NEURON_LNC_TAG: "two"}),
            "odd-tag": ("trn2.48xlarge", 64, {NEURON_LNC_TAG: "3"}),
        },
    )
    assert d["lnc1-64"].state == "unknown" and "64 of 128" in d["lnc1-64"].reason
    assert d["lnc1-128"].state == "idle"
    assert d["bad-tag"].state == "unknown" and NEURON_LNC_TAG in d["bad-tag"].reason
    assert d["odd-tag"].state == "unknown" and "(1, 2)" in d["odd-tag"].reason


def test_fleet_wide_lnc_from_config(fleet: Any) -> None:
    d = _run(
        *fleet,
        "idle: {window: 10m, max_gap: 2m, neuron_lnc: 1}\n",
        {
            "lnc1-64": ("trn2.48xlarge", 64, {}),
            "tag-wins": ("trn2.48xlarge", 64, {NEURON_LNC_TAG: "2"}),
        },
    )
    assert d["lnc1-64"].state == "unknown" and "64 of 128" in d["lnc1-64"].reason
    assert d["tag-wins"].state == "idle"


def test_a_neuron_override_alone_keeps_nvidia_detection(fleet: Any) -> None:
    """The issue's incident: overriding ``idle.metrics.neuron`` replaced the whole map and
    turned every p5 blind. It now merges; the p5 is still found idle."""
    cfg_text = (
        "idle: {window: 10m, max_gap: 2m, metrics: {neuron: {namespace: CoreBurst/Neuron, "
        "metric_name: neuroncore_utilization, device_dimension: neuroncore}}}\n"
    )
    cfg = parse_config(IDLE + cfg_text)
    assert cfg.idle.metrics["nvidia"].metric_name == "nvidia_smi_utilization_gpu"
    d = _run(*fleet, cfg_text, {"p5": ("p5.48xlarge", 8, {}), "trn": ("trn2.48xlarge", 64, {})})
    assert d["p5"].state == "idle" and d["trn"].state == "idle"


def test_a_partial_family_override_keeps_the_other_keys() -> None:
    cfg = parse_config("idle: {metrics: {neuron: {metric_name: nc_util}}}")
    neuron, default = cfg.idle.metrics["neuron"], UTILIZATION_METRICS["neuron"]
    assert neuron.metric_name == "nc_util"
    assert (neuron.namespace, neuron.device_dimension) == (
        default.namespace,
        default.device_dimension,
    )
    assert cfg.idle.metrics["nvidia"].metric_name == UTILIZATION_METRICS["nvidia"].metric_name


def test_env_override_of_one_family_merges_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COREBURST_IDLE__METRICS__NEURON__METRIC_NAME", "nc_util")
    cfg = parse_config("")
    assert cfg.idle.metrics["neuron"].metric_name == "nc_util"
    assert cfg.idle.metrics["nvidia"].metric_name == UTILIZATION_METRICS["nvidia"].metric_name


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("idle: {metrics: {neuron: null}}\n", "idle.metrics: no metric for neuron accelerators"),
        ("idle: {metrics: {nvidia: null}}\n", "idle.metrics: no metric for nvidia accelerators"),
        ("idle: {metrics: {nvidia: {expect_series: 1}}}\n", "expect_series is no longer"),
        ("idle: {neuron_lnc: 4}\n", "idle.neuron_lnc: 4 is not a logical NeuronCore size"),
    ],
)
def test_check_config_refuses_a_family_without_a_metric(
    tmp_path: Path, text: str, needle: str
) -> None:
    path = tmp_path / "g.yaml"
    path.write_text(text)
    r = CliRunner().invoke(app, ["check-config", str(path)])
    assert r.exit_code == 2, r.output
    assert needle in r.output and "Traceback" not in r.output
    assert len(r.output.strip().splitlines()) == 1, r.output


def test_a_family_no_watched_type_has_may_go_without_a_metric(tmp_path: Path) -> None:
    path = tmp_path / "g.yaml"
    path.write_text("instance_types: [p5.48xlarge]\nidle: {metrics: {neuron: null}}\n")
    r = CliRunner().invoke(app, ["check-config", str(path)])
    assert r.exit_code == 0, r.output
    with pytest.raises(ConfigError, match="no metric for nvidia"):
        parse_config("instance_types: [p5.48xlarge]\nidle: {metrics: {nvidia: null}}\n")


def test_an_instance_type_the_catalog_lacks_is_never_idle() -> None:
    from datetime import UTC, datetime

    from guardrails.model import Node

    n = Node(
        "i-1",
        "us-east-1",
        "us-east-1a",
        "x9.big",
        "nvidia",
        8,
        "on-demand",
        datetime(2026, 1, 1, tzinfo=UTC),
    )
    got = expected_series(n, parse_config(""))
    assert isinstance(got, str) and "not in the catalog" in got
