"""Every invalid stack configuration is rejected before any resource is declared, with one
message naming the key, the value and what is allowed."""

from __future__ import annotations

from typing import Any

import pulumi
import pytest

from infra.config import StackConfigError
from infra.offline import evaluate_config


def _reject(config: dict[str, Any]) -> str:
    with pytest.raises(StackConfigError) as exc:
        evaluate_config("bad", config)
    message = str(exc.value)
    assert "\n" not in message, "errors are one line"
    return message


def test_example_configs_are_valid(dev_config: dict[str, Any], prod_config: dict[str, Any]) -> None:
    assert evaluate_config("dev", dev_config).config.clusters[0].nodes == 2
    assert evaluate_config("prod", prod_config).config.lustre is not None


def test_fsx_capacity_not_an_increment(dev_config: dict[str, Any]) -> None:
    dev_config["coreburst:lustre"]["storageCapacityGib"] = 3000
    assert _reject(dev_config) == (
        "coreburst:lustre: storageCapacityGib 3000 is not valid for PERSISTENT_2: "
        "use 1200 or a multiple of 2400"
    )


def test_efa_lustre_capacity_follows_its_throughput_tier(prod_config: dict[str, Any]) -> None:
    prod_config["coreburst:lustre"]["storageCapacityGib"] = 9600  # fine at 500, not at 1000
    prod_config["coreburst:lustre"]["perUnitStorageThroughput"] = 250
    assert _reject(prod_config) == (
        "coreburst:lustre: storageCapacityGib 9600 is not valid for an EFA-enabled file "
        "system at 250 MB/s/TiB: use a multiple of 19200"
    )


def test_throughput_outside_allowed_set(dev_config: dict[str, Any]) -> None:
    dev_config["coreburst:lustre"]["perUnitStorageThroughput"] = 200
    assert _reject(dev_config) == (
        "coreburst:lustre: perUnitStorageThroughput 200 is not allowed for PERSISTENT_2: "
        "use one of 125, 250, 500, 1000 MB/s/TiB"
    )


def test_instance_type_missing_from_catalog(dev_config: dict[str, Any]) -> None:
    dev_config["coreburst:clusters"][0]["instanceType"] = "p6.96xlarge"
    message = _reject(dev_config)
    assert message.startswith("clusters[0].instanceType: 'p6.96xlarge' is not in the catalog")
    assert "p5.48xlarge" in message


@pytest.mark.parametrize("model", ["capacity-block", "capacity-reservation"])
def test_reserved_capacity_with_placement_group(prod_config: dict[str, Any], model: str) -> None:
    cluster = prod_config["coreburst:clusters"][0]
    cluster["capacity"]["model"] = model
    cluster["placementGroup"] = True
    assert _reject(prod_config) == (
        f"coreburst:clusters[0]: placementGroup: true cannot be combined with a {model}: "
        "launches into AWS-placed capacity fail with a placement group; remove it"
    )


def test_more_nodes_than_a_capacity_block_holds(prod_config: dict[str, Any]) -> None:
    prod_config["coreburst:clusters"][0]["nodes"] = 65
    assert _reject(prod_config) == (
        "coreburst:clusters[0]: nodes 65 exceeds what a Capacity Block holds (at most 64)"
    )


@pytest.mark.parametrize("asn", [64511, 65535, 4_294_967_295])
def test_amazon_side_asn_out_of_range(prod_config: dict[str, Any], asn: int) -> None:
    prod_config["coreburst:hybridLink"]["amazonSideAsn"] = asn
    assert _reject(prod_config) == (
        f"coreburst:hybridLink.amazonSideAsn: {asn} is out of range: the Amazon-side ASN must "
        "be 64512-65534 or 4200000000-4294967294"
    )


def test_customer_asn_out_of_range(prod_config: dict[str, Any]) -> None:
    prod_config["coreburst:hybridLink"]["customerAsn"] = 0
    assert _reject(prod_config) == (
        "coreburst:hybridLink.customerAsn: 0 is not a valid BGP ASN (1-4294967294)"
    )


def test_prefix_that_is_not_a_cidr(prod_config: dict[str, Any]) -> None:
    prod_config["coreburst:hybridLink"]["onPremPrefixes"] = ["10.0.0.0/14", "10.300.0.0/16"]
    assert _reject(prod_config) == (
        "coreburst:hybridLink.onPremPrefixes[1]: '10.300.0.0/16' is not a CIDR block "
        "(expected e.g. 10.0.0.0/16)"
    )


def test_cluster_az_differs_from_reservation_az(prod_config: dict[str, Any]) -> None:
    prod_config["coreburst:clusters"][0]["capacity"]["availabilityZone"] = "us-east-2a"
    assert _reject(prod_config) == (
        "coreburst: clusters[0].capacity.availabilityZone 'us-east-2a' differs from the "
        "stack's availabilityZone 'us-east-2b': instances must launch in the reservation's AZ"
    )


def test_efa_on_a_type_without_efa(dev_config: dict[str, Any], monkeypatch: Any) -> None:
    from infra.catalog import IntFigure, load_catalog

    cat = load_catalog()
    p4d = cat.instances["p4d.24xlarge"]
    no_efa = p4d.model_copy(
        update={"efa_interfaces": IntFigure(value=0, as_of="2026-11", source="estimate")}
    )
    monkeypatch.setitem(cat.instances, "p4d.24xlarge", no_efa)
    dev_config["coreburst:clusters"][0]["instanceType"] = "p4d.24xlarge"
    assert _reject(dev_config) == (
        "clusters[0].efa: p4d.24xlarge has no EFA support; set efa: false"
    )


def test_unknown_key_is_named(dev_config: dict[str, Any]) -> None:
    dev_config["coreburst:clusters"][0]["instanceTyp"] = "p5.48xlarge"
    assert _reject(dev_config) == (
        "coreburst:clusters[0].instanceTyp: unknown key; check the spelling against the "
        "documented keys"
    )


def test_capacity_model_outside_allowed_values(dev_config: dict[str, Any]) -> None:
    dev_config["coreburst:clusters"][0]["capacity"]["model"] = "reserved"
    message = _reject(dev_config)
    assert message.startswith("coreburst:clusters[0].capacity.model: 'reserved' is not allowed")
    assert "'capacity-block'" in message


def test_capacity_block_needs_reservation_id(prod_config: dict[str, Any]) -> None:
    del prod_config["coreburst:clusters"][0]["capacity"]["reservationId"]
    assert _reject(prod_config) == (
        "coreburst:clusters[0].capacity: capacity model 'capacity-block' needs reservationId "
        "(cr-...)"
    )


def test_overlapping_dra_paths(prod_config: dict[str, Any]) -> None:
    prod_config["coreburst:lustre"]["dataRepositoryAssociations"][1]["fileSystemPath"] = (
        "/datasets/ckpt"
    )
    assert _reject(prod_config) == (
        "coreburst:lustre: fileSystemPath /datasets/ overlaps /datasets/ckpt/; "
        "DRA paths must not nest"
    ).replace("/datasets/ overlaps /datasets/ckpt/", "/datasets overlaps /datasets/ckpt")


def test_bad_config_declares_nothing(dev_config: dict[str, Any]) -> None:
    """Through the real entry point: RunError with the message, and zero resources."""
    from infra.offline import _as_pulumi_config, _Mocks
    from infra.program import main

    dev_config["coreburst:lustre"]["perUnitStorageThroughput"] = 1
    mocks = _Mocks("us-east-1")
    pulumi.runtime.set_mocks(mocks, project="coreburst", stack="bad", preview=True)
    pulumi.runtime.set_all_config(_as_pulumi_config(dev_config))
    with pytest.raises(pulumi.RunError, match="perUnitStorageThroughput 1 is not allowed"):
        main()
    assert mocks.resources == []
