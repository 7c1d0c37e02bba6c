"""The catalog loads, carries provenance, and its arithmetic matches hand-computed figures."""

from __future__ import annotations

from pathlib import Path

import pytest

from coreburst.common.catalog import CatalogError, load_catalog, parse_catalog
from infra.efa import efa_layout

CAT = load_catalog()


def test_required_types_with_facts() -> None:
    for t in ("p5.48xlarge", "p5e.48xlarge", "p5en.48xlarge", "trn2.48xlarge", "p4d.24xlarge"):
        facts = CAT.instance(t)
        assert facts.accelerator.count > 0 and facts.vcpus > 0 and facts.power_kw.value > 0
        assert facts.on_demand_usd_per_hour, t
    assert CAT.instance("p5en.48xlarge").efa_interfaces.value == 16
    assert CAT.instance("trn2.48xlarge").accelerator.kind == "neuron"


def test_every_figure_has_a_known_source_and_date() -> None:
    import yaml

    doc = yaml.safe_load(Path("coreburst/common/data/catalog.yaml").read_text())
    figures: list[dict[str, object]] = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            if "value" in node and "source" in node:
                figures.append(node)
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(doc["instances"])
    walk({k: v for k, v in doc.items() if k != "instances"})
    assert len(figures) > 40
    for fig in figures:
        assert fig["source"] in doc["sources"], fig
        assert isinstance(fig["as_of"], str) and fig["as_of"][:2] == "20", fig
    assert "instances.p5e.48xlarge.on_demand_usd_per_hour.us-east-1" in CAT.unverified_figures()
    assert "instances.p5.48xlarge.on_demand_usd_per_hour.us-east-1" not in (
        CAT.unverified_figures()
    )


def test_prices_by_market() -> None:
    assert CAT.hourly_price("p5.48xlarge", "us-east-1", "on-demand") == 55.04
    assert CAT.hourly_price("p5.48xlarge", "us-east-1", "capacity-reservation") == 55.04
    assert CAT.hourly_price("p5.48xlarge", "us-east-1", "spot") == pytest.approx(55.04 * 0.45)
    # a region the catalog has no price for raises, never answers 0
    with pytest.raises(CatalogError, match=r"no on-demand price for trn2\.48xlarge in eu-west-1"):
        CAT.on_demand_price("trn2.48xlarge", "eu-west-1")


def test_internet_egress_tiers() -> None:
    # 100 GB free, then 10,140 GB at $0.09, then 9,760 GB at $0.085.
    assert CAT.internet_egress_cost(20_000) == pytest.approx(10_140 * 0.09 + 9_760 * 0.085)
    # Late in the month the same volume costs the lower tier.
    assert CAT.internet_egress_cost(1_000, already_gb=200_000) == pytest.approx(1_000 * 0.05)
    assert CAT.internet_egress_cost(50) == 0.0


def test_malformed_catalog_is_one_line() -> None:
    with pytest.raises(CatalogError) as exc:
        parse_catalog("schema: 1\ncurrency: EUR\n", "bad.yaml")
    assert str(exc.value).startswith("bad.yaml: ")
    assert "\n" not in str(exc.value)


def test_efa_layout_rejects_negative() -> None:
    with pytest.raises(ValueError):
        efa_layout(-1)
    assert [n.interface_type for n in efa_layout(0)] == ["interface"]
