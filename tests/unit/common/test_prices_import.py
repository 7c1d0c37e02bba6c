"""``coreburst prices import`` (issue 23, item 6) on excerpts of AWS Price List offer files.

The fixtures in tests/fixtures/aws/offers/ are made up (their README and each file's
``disclaimer`` say so) from the documented offer-file format: AWS Billing user guide, "Reading
the service price list file for an AWS service" (``products`` keyed by SKU with
``attributes``; ``terms.OnDemand.<sku>.<offerTermCode>.priceDimensions.<rateCode>
.pricePerUnit.USD``; ``publicationDate``).
"""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from coreburst.cli import app
from coreburst.common.catalog import CATALOG_PATH, load_catalog, parse_catalog

OFFERS = Path(__file__).parents[2] / "fixtures" / "aws" / "offers"
EC2 = OFFERS / "AmazonEC2-excerpt.json"
FSX = OFFERS / "AmazonFSx-excerpt.json"
DX = OFFERS / "AWSDirectConnect-excerpt.json"


@pytest.fixture
def catalog(tmp_path: Path) -> Path:
    path = tmp_path / "catalog.yaml"
    shutil.copyfile(CATALOG_PATH, path)
    return path


def run(*args: str | Path) -> Any:
    return CliRunner().invoke(app, ["prices", "import", *map(str, args)])


def test_the_fixtures_say_they_are_made_up() -> None:
    for f in (EC2, FSX, DX):
        doc = json.loads(f.read_text())
        assert "NOT AWS prices" in doc["disclaimer"]
        assert "Reading the service price list file for an AWS service" in doc["disclaimer"]


def test_dry_run_prints_the_diff_and_writes_nothing(catalog: Path) -> None:
    before = catalog.read_bytes()
    r = run(EC2, "--region", "us-east-1", "--catalog", catalog)
    assert r.exit_code == 0, r.output
    out = r.stdout
    assert out.startswith(
        "AmazonEC2 offer, publicationDate 2026-11-20T19:24:43Z, region us-east-1: "
        "4 catalog price(s) found, 1 changed\n"
    )
    assert (
        "  changed instances.p5e.48xlarge.on_demand_usd_per_hour.us-east-1: "
        "60 (estimate 2025-06, unverified) -> 59.5 (aws-price-list 2026-11-20)" in out
    )
    assert (
        "  same    instances.p5.48xlarge.on_demand_usd_per_hour.us-east-1: "
        "55.04 (ref 2025-06) -> 55.04 (aws-price-list 2026-11-20)" in out
    )
    # filtered out: Windows 99, Dedicated 98, unused reservation 0, SQL 97, other regions
    for price in ("99", "98", "97", "55.5", "60.5"):
        assert f"-> {price} (" not in out
    assert "not in offer instances.p4d.24xlarge.on_demand_usd_per_hour.us-east-1" in out
    assert "dry run: nothing written" in out
    assert catalog.read_bytes() == before


def test_write_replaces_only_the_imported_figures(catalog: Path) -> None:
    before = catalog.read_text().splitlines()
    r = run(EC2, "--region", "us-east-1", "--catalog", catalog, "--write")
    assert r.exit_code == 0, r.output
    assert "wrote 4 price(s)" in r.stdout
    after_text = catalog.read_text()
    cat = parse_catalog(after_text)
    p5e = cat.instance("p5e.48xlarge").on_demand_usd_per_hour
    assert (p5e["us-east-1"].value, p5e["us-east-1"].as_of) == (59.5, "2026-11-20")
    assert p5e["us-east-1"].source == "aws-price-list" and not p5e["us-east-1"].unverified
    assert (
        p5e["us-east-2"]
        == load_catalog().instance("p5e.48xlarge").on_demand_usd_per_hour["us-east-2"]
    )
    assert "aws-price-list" in cat.sources
    # every other line, comments included, is as it was: 4 figures changed, 1 source added
    after = after_text.splitlines()
    assert len(after) == len(before) + 1
    changed = [b for b in before if b not in after]
    assert len(changed) == 4 and all("us-east-1:" in line for line in changed)
    # imported again: nothing changes
    again = run(EC2, "--region", "us-east-1", "--catalog", catalog)
    assert "4 catalog price(s) found, 0 changed" in again.stdout


@pytest.mark.parametrize(
    ("offer", "path", "value"),
    [
        (FSX, ("PERSISTENT_2", "250"), 0.2),
        (DX, ("400Gbps",), 80.0),
    ],
)
def test_fsx_and_direct_connect(
    catalog: Path, offer: Path, path: tuple[str, ...], value: float
) -> None:
    r = run(offer, "--catalog", catalog, "--write")  # one region in the offer: no --region
    assert r.exit_code == 0, r.output
    assert "note: the catalog keeps one" in r.stdout
    cat = parse_catalog(catalog.read_text())
    if offer is FSX:
        fig = cat.fsx_lustre_usd_per_gb_month[path[0]][path[1]]
        # HDD, PERSISTENT_1 and OpenZFS products are not the catalog's
        assert "PERSISTENT_1" not in r.stdout
        assert (
            "not imported fsx_lustre_usd_per_gb_month.SCRATCH_1.0: the Price List value of "
            "deploymentOption for scratch file systems was not confirmed; kept as it is"
        ) in r.stdout
    else:
        fig = cat.direct_connect_port_usd_per_hour[path[0]]
        assert "not in catalog Direct Connect 25Gbps dedicated port in us-east-1: $9" in r.stdout
        assert "500M" not in r.stdout  # hosted connections are not ports
    assert (fig.value, fig.source, fig.unverified) == (value, "aws-price-list", False)


def _offer(tmp_path: Path, edit: Any) -> Path:
    doc = json.loads(EC2.read_text())
    edit(doc)
    f = tmp_path / "offer.json"
    f.write_text(json.dumps(doc))
    return f


def _bad(tmp_path: Path, kind: str) -> Path:
    f = tmp_path / "offer.json"
    if kind == "not-json":
        f.write_text("SKU,OfferTermCode,RateCode\n")
    elif kind == "not-utf8":
        f.write_bytes(b'{"offerCode": "AmazonEC2", "disclaimer": "\xff\xfe"}')
    elif kind == "no-publication-date":
        return _offer(tmp_path, lambda d: d.pop("publicationDate"))
    elif kind == "unknown-service":
        return _offer(tmp_path, lambda d: d.update(offerCode="AmazonS3"))
    elif kind == "bad-date":
        return _offer(tmp_path, lambda d: d.update(publicationDate="last tuesday"))
    elif kind == "no-terms":
        return _offer(tmp_path, lambda d: d.pop("terms"))
    elif kind == "bad-price":

        def edit(d: dict[str, Any]) -> None:
            for term in d["terms"]["OnDemand"]["AMAZSKU0001XYZ"].values():
                for dim in term["priceDimensions"].values():
                    dim["pricePerUnit"] = {"USD": "a lot"}

        return _offer(tmp_path, edit)
    elif kind == "array":
        f.write_text("[]")
    elif kind == "missing":
        return tmp_path / "nope.json"
    return f


BAD = {
    "not-json": "not JSON",
    "not-utf8": "not UTF-8 at byte",
    "no-publication-date": "no publicationDate",
    "unknown-service": "offerCode 'AmazonS3' is not a service this imports",
    "bad-date": "is not an ISO 8601 date-time",
    "no-terms": "terms is missing",
    "bad-price": "has no priceDimensions.<rateCode>.pricePerUnit.USD number",
    "array": "is a JSON object",
    "missing": "no such file",
}


@pytest.mark.parametrize("kind", list(BAD))
def test_bad_offer_is_one_line_exit_2_nothing_written(
    catalog: Path, tmp_path: Path, kind: str
) -> None:
    before = catalog.read_bytes()
    r = run(_bad(tmp_path, kind), "--region", "us-east-1", "--catalog", catalog, "--write")
    assert r.exit_code == 2, r.output
    err = r.stderr.strip()
    assert err.startswith("error: ") and "\n" not in err, err
    assert BAD[kind] in err
    assert "Traceback" not in r.output
    assert catalog.read_bytes() == before


def test_a_region_the_offer_lacks_is_refused(catalog: Path) -> None:
    r = run(EC2, "--region", "ap-south-1", "--catalog", catalog, "--write")
    assert r.exit_code == 2
    assert r.stderr.strip() == (
        f"error: {EC2}: no product in ap-south-1; the offer has eu-west-1, us-east-1, us-west-2"
    )


def test_several_regions_need_region(catalog: Path) -> None:
    r = run(EC2, "--catalog", catalog)
    assert r.exit_code == 2
    assert "covers 3 regions; pass --region" in r.stderr


def test_two_products_for_one_figure_are_refused(catalog: Path, tmp_path: Path) -> None:
    def dup(d: dict[str, Any]) -> None:
        d["products"]["DUP"] = {**d["products"]["AMAZSKU0001XYZ"], "sku": "DUP"}
        d["terms"]["OnDemand"]["DUP"] = d["terms"]["OnDemand"]["AMAZSKU0001XYZ"]

    before = catalog.read_bytes()
    r = run(_offer(tmp_path, dup), "--region", "us-east-1", "--catalog", catalog, "--write")
    assert r.exit_code == 2
    assert (
        "instances.p5e.48xlarge.on_demand_usd_per_hour.us-east-1: more than one product "
        "prices it (skus AMAZSKU0001XYZ, DUP)"
    ) in r.stderr
    assert catalog.read_bytes() == before


def _edit(tmp_path: Path, src: Path, edit: Any) -> Path:
    doc = json.loads(src.read_text())
    edit(doc)
    f = tmp_path / src.name
    f.write_text(json.dumps(doc))
    return f


def _attrs(doc: dict[str, Any], sku: str) -> dict[str, Any]:
    attrs: dict[str, Any] = doc["products"][sku]["attributes"]
    return attrs


def test_fsx_reads_persistent_tiers_and_reports_what_it_cannot_read(catalog: Path) -> None:
    """Persistent SSD storage by throughputCapacity tier; the scratch product (a deploymentOption
    value not confirmed) is reported, not priced; HDD, backups, PERSISTENT_1 and OpenZFS are
    not the catalog's and are not mentioned."""
    r = run(FSX, "--catalog", catalog)
    assert r.exit_code == 0, r.output
    out = r.stdout
    assert "4 catalog price(s) found, 1 changed" in out
    for tier in ("125", "250", "500", "1000"):
        assert f"fsx_lustre_usd_per_gb_month.PERSISTENT_2.{tier}: " in out
    assert (
        "  not priced FSx for Lustre storage (sku AMAZSKU0006XYZ): deploymentOption 'Scratch' "
        "(the Price List value of deploymentOption for scratch file systems was not confirmed)"
    ) in out
    for sku in ("AMAZSKU0004XYZ", "AMAZSKU0005XYZ", "AMAZSKU0007XYZ", "AMAZSKU0008XYZ"):
        assert sku not in out
    assert "$0" not in out and "-> 0 " not in out


def test_a_product_that_does_not_match_is_reported_never_priced_at_0(
    catalog: Path, tmp_path: Path
) -> None:
    def edit(d: dict[str, Any]) -> None:
        del _attrs(d, "AMAZSKU0001XYZ")["throughputCapacity"]  # the 250 tier, unreadable
        for term in d["terms"]["OnDemand"]["AMAZSKU0002XYZ"].values():  # the 500 tier at $0
            for dim in term["priceDimensions"].values():
                dim["pricePerUnit"]["USD"] = "0.0000000000"

    before = catalog.read_bytes()
    r = run(_edit(tmp_path, FSX, edit), "--catalog", catalog, "--write")
    assert r.exit_code == 0, r.output
    out = r.stdout
    assert (
        "  not priced FSx for Lustre storage (sku AMAZSKU0001XYZ): throughputCapacity None is "
        "no persistent SSD tier" in out
    )
    assert (
        "  not priced FSx for Lustre PERSISTENT_2 SSD 500 MB/s/TiB in us-east-1 "
        "(sku AMAZSKU0002XYZ): an on-demand price of $0 in the offer" in out
    )
    assert "not in offer fsx_lustre_usd_per_gb_month.PERSISTENT_2.250: kept as it is" in out
    assert "not in offer fsx_lustre_usd_per_gb_month.PERSISTENT_2.500: kept as it is" in out
    assert "wrote 2 price(s)" in out
    cat, old = parse_catalog(catalog.read_text()), parse_catalog(before.decode())
    for tier in ("250", "500"):  # as they were, not $0
        new_fig = cat.fsx_lustre_usd_per_gb_month["PERSISTENT_2"][tier]
        assert new_fig == old.fsx_lustre_usd_per_gb_month["PERSISTENT_2"][tier]
        assert new_fig.value > 0


def test_an_offer_whose_attributes_are_not_the_confirmed_ones_is_refused(
    catalog: Path, tmp_path: Path
) -> None:
    """No Lustre SSD product reads as expected (here: the tier under another name): one line,
    exit 2, nothing written, rather than a guess."""

    def edit(d: dict[str, Any]) -> None:
        for p in d["products"].values():
            if "throughputCapacity" in p["attributes"]:
                p["attributes"]["perUnitStorageThroughput"] = p["attributes"].pop(
                    "throughputCapacity"
                )

    before = catalog.read_bytes()
    r = run(_edit(tmp_path, FSX, edit), "--catalog", catalog, "--write")
    assert r.exit_code == 2, r.output
    err = r.stderr.strip()
    assert "\n" not in err and err.endswith("nothing imported"), err
    assert "no FSx for Lustre storage GB-months product in us-east-1 has the attributes" in err
    assert catalog.read_bytes() == before


def test_direct_connect_locations_at_one_price_or_refused(catalog: Path, tmp_path: Path) -> None:
    r = run(DX, "--catalog", catalog)
    assert r.exit_code == 0, r.output
    assert (
        "direct_connect_port_usd_per_hour.10Gbps: 2.25 (ref 2025-06) -> 2.25 (aws-price-list "
        "2026-11-02)  [sku AWSDSKU0001XYZ and 1 more location(s)]" in r.stdout
    )
    assert "not imported data_transfer.direct_connect_out_usd_per_gb" in r.stdout
    assert "AWSDSKU0007XYZ" not in r.stdout  # data transfer out is not a port

    def dearer(d: dict[str, Any]) -> None:  # the second location's 10G port costs more
        for term in d["terms"]["OnDemand"]["AWSDSKU0002XYZ"].values():
            for dim in term["priceDimensions"].values():
                dim["pricePerUnit"]["USD"] = "2.5000000000"

    before = catalog.read_bytes()
    r = run(_edit(tmp_path, DX, dearer), "--catalog", catalog, "--write")
    assert r.exit_code == 2, r.output
    assert r.stderr.strip().endswith(
        "direct_connect_port_usd_per_hour.10Gbps: its 2 Direct Connect locations have 2 "
        "different prices ($2.25, $2.5; skus AWSDSKU0001XYZ, AWSDSKU0002XYZ); the catalog keeps "
        "one price per port speed, set it by hand"
    )
    assert catalog.read_bytes() == before

    def no_kind(d: dict[str, Any]) -> None:
        del _attrs(d, "AWSDSKU0000XYZ")["connectionType"]

    r = run(_edit(tmp_path, DX, no_kind), "--catalog", catalog)
    assert r.exit_code == 0, r.output
    assert (
        "  not priced Direct Connect port (sku AWSDSKU0000XYZ, usagetype USE1-EqDC2-DCP:1G): "
        "no connectionType" in r.stdout
    )
    assert "not in offer direct_connect_port_usd_per_hour.1Gbps" in r.stdout


def test_an_ec2_product_missing_an_attribute_is_not_taken_for_the_catalogs(
    catalog: Path, tmp_path: Path
) -> None:
    """The Dedicated p5.48xlarge ($98) without its tenancy is not read as Shared tenancy."""

    def edit(d: dict[str, Any]) -> None:
        del _attrs(d, "AMAZSKU0005XYZ")["tenancy"]

    r = run(_edit(tmp_path, EC2, edit), "--region", "us-east-1", "--catalog", catalog)
    assert r.exit_code == 0, r.output
    assert "-> 98 (" not in r.stdout
    assert "instances.p5.48xlarge.on_demand_usd_per_hour.us-east-1: 55.04" in r.stdout


# -- the real offer excerpts (tests/fixtures/aws/offers/real/README.md: published by opencost) --
REAL = OFFERS / "real"
REAL_USE1 = REAL / "opencost-AmazonEC2-us-east-1.json"  # p4d.24xlarge $32.7726/Hrs, Capacity Block
REAL_USE2 = REAL / "opencost-AmazonEC2-us-east-2.json"  # m5.large: only a 3yr upfront fee
P4D = "instances.p4d.24xlarge.on_demand_usd_per_hour"


def _p4d(catalog: Path, region: str) -> float:
    return (
        parse_catalog(catalog.read_text())
        .instance("p4d.24xlarge")
        .on_demand_usd_per_hour[region]
        .value
    )


def _dims(d: dict[str, Any], sku: str) -> list[dict[str, Any]]:
    return [
        dim for t in d["terms"]["OnDemand"][sku].values() for dim in t["priceDimensions"].values()
    ]


def test_the_real_excerpt_takes_the_on_demand_hour_and_not_the_capacity_block(
    catalog: Path,
) -> None:
    r = run(REAL_USE1, "--catalog", catalog, "--write")
    assert r.exit_code == 0, r.output
    assert (
        f"  changed {P4D}.us-east-1: 21.96 (ref 2025-06) -> 32.7726 (aws-price-list 2024-05-28)"
        "  [sku H7NGEAC6UEHNTKSJ]\n" in r.stdout
    )
    assert "YSXJGN78QTXNVGDQ" not in r.stdout  # the Capacity Block product, $0 an hour
    assert "wrote 1 price(s)" in r.stdout
    assert _p4d(catalog, "us-east-1") == 32.7726


def test_the_real_excerpts_upfront_fee_is_never_an_hourly_price(catalog: Path) -> None:
    """m5.large's only term in the excerpt is a 3-year All Upfront one ($1161 per Quantity):
    the type is not in the catalog, and it is listed so, with why it has no hourly price."""
    before = catalog.read_bytes()
    r = run(REAL_USE2, "--catalog", catalog, "--write")
    assert r.exit_code == 0, r.output
    assert (
        "  not in catalog m5.large on-demand in us-east-2: its term 8D49XP354UEYTHGM.MZU6U2429S "
        "is a reserved one (LeaseContractLength 3yr, OfferingClass convertible, PurchaseOption "
        "All Upfront), not on-demand (sku 8D49XP354UEYTHGM): add it to catalog.yaml by hand to "
        "use it\n" in r.stdout
    )
    assert "p3.8xlarge" not in r.stdout and "M6UGCCQ3CDJQAA37" not in r.stdout  # Windows, EBS
    assert f"not in offer {P4D}.us-east-2: kept as it is" in r.stdout
    assert "nothing to write" in r.stdout
    assert catalog.read_bytes() == before


@pytest.mark.parametrize(
    ("variant", "said"),
    [
        (
            "reserved",  # the case: the excerpt's entry as p4d.24xlarge
            "its term 8D49XP354UEYTHGM.MZU6U2429S is a reserved one (LeaseContractLength 3yr, "
            "OfferingClass convertible, PurchaseOption All Upfront), not on-demand",
        ),
        (
            "fee-only",  # ... and without the reserved term's attributes: the unit tells
            "its on-demand price 'Upfront Fee' is $1161 per 'Quantity', not per 'Hrs'",
        ),
    ],
    ids=["reserved", "fee-only"],
)
def test_a_fee_is_not_imported_as_p4ds_hourly_price(
    catalog: Path, tmp_path: Path, variant: str, said: str
) -> None:
    def edit(d: dict[str, Any]) -> None:
        _attrs(d, "8D49XP354UEYTHGM")["instanceType"] = "p4d.24xlarge"
        if variant == "fee-only":
            for term in d["terms"]["OnDemand"]["8D49XP354UEYTHGM"].values():
                term["termAttributes"] = {}

    before = catalog.read_bytes()
    r = run(_edit(tmp_path, REAL_USE2, edit), "--catalog", catalog, "--write")
    assert r.exit_code == 0, r.output
    assert (
        f"  not priced p4d.24xlarge on-demand in us-east-2 (sku 8D49XP354UEYTHGM): {said}\n"
        in r.stdout
    )
    assert "-> 1161" not in r.stdout and "nothing to write" in r.stdout
    assert catalog.read_bytes() == before


def test_a_price_per_minute_is_not_an_hourly_price(catalog: Path, tmp_path: Path) -> None:
    def edit(d: dict[str, Any]) -> None:
        for dim in _dims(d, "H7NGEAC6UEHNTKSJ"):
            dim.update(unit="Mins", pricePerUnit={"USD": "0.5462100000"})

    before = catalog.read_bytes()
    r = run(_edit(tmp_path, REAL_USE1, edit), "--catalog", catalog, "--write")
    assert r.exit_code == 0, r.output
    assert (
        "  not priced p4d.24xlarge on-demand in us-east-1 (sku H7NGEAC6UEHNTKSJ): its on-demand "
        "price '$32.7726 per On Demand Linux p4d.24xlarge Instance Hour' is $0.54621 per 'Mins', "
        "not per 'Hrs'\n" in r.stdout
    )
    assert catalog.read_bytes() == before


def test_a_reserved_term_under_reserved_is_not_read(catalog: Path, tmp_path: Path) -> None:
    """terms.Reserved (here a copy of the on-demand term at $9 with a lease) is never read."""

    def edit(d: dict[str, Any]) -> None:
        term = copy.deepcopy(d["terms"]["OnDemand"]["H7NGEAC6UEHNTKSJ"])
        for t in term.values():
            t["termAttributes"] = {"LeaseContractLength": "1yr", "PurchaseOption": "No Upfront"}
            for dim in t["priceDimensions"].values():
                dim["pricePerUnit"]["USD"] = "9.0000000000"
        d["terms"]["Reserved"] = {"H7NGEAC6UEHNTKSJ": term}

    r = run(_edit(tmp_path, REAL_USE1, edit), "--catalog", catalog, "--write")
    assert r.exit_code == 0, r.output
    assert _p4d(catalog, "us-east-1") == 32.7726


@pytest.mark.parametrize(("usd", "times"), [("2196.0000000000", "100.0x up"), ("4.0", "5.5x down")])
def test_a_change_over_3x_is_refused_unless_accepted(
    catalog: Path, tmp_path: Path, usd: str, times: str
) -> None:
    def edit(d: dict[str, Any]) -> None:
        for dim in _dims(d, "H7NGEAC6UEHNTKSJ"):
            dim["pricePerUnit"]["USD"] = usd

    offer = _edit(tmp_path, REAL_USE1, edit)
    before = catalog.read_bytes()
    for write in ((), ("--write",)):  # the dry run says so too
        r = run(offer, "--catalog", catalog, *write)
        assert r.exit_code == 2, r.output
        assert f"({times}: over 3x, refused without --accept-change)" in r.stdout
        err = r.stderr.strip()
        assert err == (
            f"error: {offer}: 1 price(s) change more than 3x ({P4D}.us-east-1 21.96 -> "
            f"{float(usd):g}, {times}); nothing written. Check the offer; if the new price is "
            "right, pass --accept-change with the figure's path"
        )
        assert catalog.read_bytes() == before

    r = run(offer, "--catalog", catalog, "--write", "--accept-change", f"{P4D}.us-east-1")
    assert r.exit_code == 0, r.output
    assert f"({times}: accepted by --accept-change)" in r.stdout
    assert _p4d(catalog, "us-east-1") == float(usd)


def test_accept_change_naming_no_figure_is_one_line(catalog: Path) -> None:
    r = run(REAL_USE1, "--catalog", catalog, "--accept-change", f"{P4D}.us-west-2")
    assert r.exit_code == 2, r.output
    assert r.stderr == (
        f"error: --accept-change {P4D}.us-west-2: the offer prices no such catalog figure in "
        "us-east-1; give the figure's path as the diff prints it\n"
    )


def test_many_products_not_in_the_catalog_are_listed_on_one_line(
    catalog: Path, tmp_path: Path
) -> None:
    """A whole region's offer prices hundreds of types the catalog lacks: each is named, on one
    line (the products here are the excerpt's p4d renamed to types the catalog lacks)."""

    def edit(d: dict[str, Any]) -> None:
        for i in range(12):
            sku = f"MADEUP{i:02d}"
            d["products"][sku] = copy.deepcopy(d["products"]["H7NGEAC6UEHNTKSJ"])
            d["products"][sku]["attributes"]["instanceType"] = f"m7i.{i}xlarge"
            d["terms"]["OnDemand"][sku] = d["terms"]["OnDemand"]["H7NGEAC6UEHNTKSJ"]

    r = run(_edit(tmp_path, REAL_USE1, edit), "--catalog", catalog)
    assert r.exit_code == 0, r.output
    (line,) = [x for x in r.stdout.splitlines() if "not in catalog" in x]
    assert line.startswith(
        "  not in catalog 12 products of the offer (add one to catalog.yaml by hand to use it): "
        "m7i.0xlarge on-demand in us-east-1: $32.7726 (sku MADEUP00); "
    )
    assert all(f"m7i.{i}xlarge on-demand" in line for i in range(12))
