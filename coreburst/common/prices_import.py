"""``coreburst prices import``: the catalog's prices from an AWS Price List bulk offer file.

An offer file (AWS Billing user guide, "Reading the service price list file for an AWS
service") is JSON: ``offerCode``, ``publicationDate``, ``products`` keyed by SKU (each with
``productFamily`` and ``attributes``) and ``terms.OnDemand.<sku>.<offerTermCode>.priceDimensions
.<rateCode>.pricePerUnit.USD``. This reads the EC2, FSx and Direct Connect offers, picks the
products the catalog prices (its instance types on Linux shared tenancy, its FSx for Lustre
deployment types and throughputs, its Direct Connect port speeds) in one region, and prints a
reviewable diff, price by price (old -> new, with the offer's publication date as the new
figure's date and ``aws-price-list`` as its source). ``--write`` writes the catalog, and only
then: each changed figure's line is replaced in place (comments and layout kept), the result is
parsed as a catalog before it replaces the file, and a bad offer changes nothing.

    $ coreburst prices import AmazonEC2-us-east-1.json
    $ coreburst prices import AmazonEC2-us-east-1.json --region us-east-1 --write

Only figures the catalog already has are updated: a region or product it lacks is listed as
"not in the catalog" for a person to add (the catalog prices every type in every region it
prices any type in). Capacity Block prices are not in the EC2 offer; they are left alone.
"""

from __future__ import annotations

import json
import math
import os
import re
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml

from coreburst.common.catalog import CATALOG_PATH, Catalog, CatalogError, Figure, parse_catalog
from coreburst.common.textio import read_text

SOURCE_KEY = "aws-price-list"
SOURCE_TEXT = (
    "AWS Price List bulk offer files (AWS Billing user guide, 'Reading the service price list "
    "file for an AWS service'): terms.OnDemand pricePerUnit USD, imported by `coreburst prices "
    "import`; as_of is the offer's publicationDate"
)
SERVICES = {
    "AmazonEC2": "EC2 on-demand instance-hours",
    "AmazonFSx": "FSx for Lustre storage GB-months",
    "AWSDirectConnect": "Direct Connect dedicated port-hours",
}
# EC2 products the catalog's on-demand prices are for: Linux, shared tenancy, no pre-installed
# software, capacity used (not a reservation's unused or allocated capacity).
EC2_MATCH = {
    "operatingSystem": "Linux",
    "tenancy": "Shared",
    "preInstalledSw": "NA",
    "capacitystatus": "Used",
}


class OfferError(ValueError):
    """The offer file cannot be read as an AWS Price List offer: one line, nothing written."""


@dataclass(frozen=True)
class Change:
    """One catalog figure the offer prices: ``path`` is its key path in catalog.yaml."""

    path: tuple[str, ...]
    old: Figure
    new_value: float
    sku: str

    @property
    def changed(self) -> bool:
        return not math.isclose(self.old.value, self.new_value, rel_tol=0, abs_tol=1e-9)


@dataclass
class ImportPlan:
    offer_code: str
    region: str
    publication_date: str  # as the offer gives it
    as_of: str  # its date, YYYY-MM-DD
    changes: list[Change] = field(default_factory=list)
    # catalog figures of this service and region the offer has no product for
    missing: list[str] = field(default_factory=list)
    # offer products of interest the catalog has no figure for (type or region to add by hand)
    not_in_catalog: list[str] = field(default_factory=list)


# -- reading the offer ----------------------------------------------------------------------
def read_offer(path: Path) -> dict[str, Any]:
    text = read_text(path, "offer file", OfferError)  # one line: missing, not UTF-8, ...
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise OfferError(
            f"{path}: not JSON ({exc.msg} at line {exc.lineno}); give the offer file's "
            "index.json, not the CSV"
        ) from None
    if not isinstance(doc, dict):
        raise OfferError(f"{path}: an offer file is a JSON object with products and terms")
    code = doc.get("offerCode")
    if code not in SERVICES:
        raise OfferError(
            f"{path}: offerCode {code!r} is not a service this imports; give an offer file of "
            f"{', '.join(SERVICES)}"
        )
    pub = doc.get("publicationDate")
    if not isinstance(pub, str) or not pub.strip():
        raise OfferError(
            f"{path}: no publicationDate; the imported prices need the date the offer was "
            "published (give an unmodified offer file)"
        )
    try:
        datetime.fromisoformat(pub.replace("Z", "+00:00"))
    except ValueError:
        raise OfferError(f"{path}: publicationDate {pub!r} is not an ISO 8601 date-time") from None
    for key in ("products", "terms"):
        if not isinstance(doc.get(key), dict):
            raise OfferError(f"{path}: {key} is missing or not an object")
    if not isinstance(doc["terms"].get("OnDemand"), dict):
        raise OfferError(f"{path}: terms.OnDemand is missing or not an object")
    return doc


def _on_demand_usd(doc: dict[str, Any], sku: str, where: str) -> float | None:
    """The one on-demand USD price of ``sku`` (None: the offer has no on-demand term for it)."""
    terms = doc["terms"]["OnDemand"].get(sku)
    if terms is None:
        return None
    prices: set[float] = set()
    try:
        for term in terms.values():
            for dim in term["priceDimensions"].values():
                prices.add(float(dim["pricePerUnit"]["USD"]))
    except (AttributeError, KeyError, TypeError, ValueError):
        raise OfferError(
            f"{where}: terms.OnDemand.{sku} has no priceDimensions.<rateCode>.pricePerUnit.USD "
            "number"
        ) from None
    if len(prices) != 1:
        raise OfferError(
            f"{where}: terms.OnDemand.{sku} has {len(prices)} different USD prices; the catalog "
            "takes one flat on-demand rate"
        )
    (price,) = prices
    if not (math.isfinite(price) and price >= 0):
        raise OfferError(f"{where}: terms.OnDemand.{sku} price {price} is not a finite rate")
    return price


def _regions(doc: dict[str, Any]) -> set[str]:
    return {
        str(p.get("attributes", {}).get("regionCode"))
        for p in doc["products"].values()
        if isinstance(p, dict) and p.get("attributes", {}).get("regionCode")
    }


def _norm_deployment(value: str) -> str:
    """``Persistent 2`` / ``PERSISTENT_2`` / ``persistent-2`` -> ``PERSISTENT_2``."""
    return re.sub(r"[\s-]+", "_", value.strip()).upper()


def _throughput(value: Any) -> str:
    m = re.match(r"\s*(\d+)", str(value or ""))
    return str(int(m.group(1))) if m else "0"


def _dx_speed(value: Any) -> str:
    """``10G`` / ``10 Gbps`` / ``10Gbps`` -> ``10Gbps`` (the catalog's key)."""
    m = re.fullmatch(r"\s*(\d+)\s*(G|M)(?:bps)?\s*", str(value or ""), re.IGNORECASE)
    return f"{m.group(1)}{m.group(2).upper()}bps" if m else ""


def _targets(
    doc: dict[str, Any], cat: Catalog, region: str
) -> tuple[dict[tuple[str, ...], Figure], list[tuple[tuple[str, ...] | None, str, str]]]:
    """The catalog figures this offer's service prices in ``region``, and each matching product
    as (catalog path or None, human name, sku)."""
    code = doc["offerCode"]
    figures: dict[tuple[str, ...], Figure] = {}
    found: list[tuple[tuple[str, ...] | None, str, str]] = []
    for sku, product in doc["products"].items():
        if not isinstance(product, dict) or not isinstance(product.get("attributes"), dict):
            continue
        a = product["attributes"]
        if a.get("regionCode", a.get("fromRegionCode")) != region:
            continue
        path: tuple[str, ...] | None = None
        if code == "AmazonEC2":
            itype = a.get("instanceType")
            if itype not in cat.instances or any(a.get(k, v) != v for k, v in EC2_MATCH.items()):
                continue
            name = f"{itype} on-demand in {region}"
            if region in cat.instances[itype].on_demand_usd_per_hour:
                path = ("instances", itype, "on_demand_usd_per_hour", region)
        elif code == "AmazonFSx":
            if str(a.get("fileSystemType", "")).lower() != "lustre":
                continue
            if str(a.get("storageType", "SSD")).upper() != "SSD":
                continue
            deploy = _norm_deployment(str(a.get("deploymentOption", "")))
            tput = _throughput(a.get("throughputCapacity"))
            name = f"FSx for Lustre {deploy} {tput} MB/s/TiB in {region}"
            if tput in cat.fsx_lustre_usd_per_gb_month.get(deploy, {}):
                path = ("fsx_lustre_usd_per_gb_month", deploy, tput)
            elif deploy not in cat.fsx_lustre_usd_per_gb_month:
                continue  # a deployment type the catalog does not use (e.g. PERSISTENT_1)
        else:  # AWSDirectConnect
            if str(a.get("connectionType", "Dedicated")).lower() != "dedicated":
                continue
            speed = _dx_speed(a.get("capacity", a.get("portSpeed")))
            if not speed:
                continue
            name = f"Direct Connect {speed} dedicated port in {region}"
            if speed in cat.direct_connect_port_usd_per_hour:
                path = ("direct_connect_port_usd_per_hour", speed)
        found.append((path, name, sku))
    if code == "AmazonEC2":
        for itype, inst in cat.instances.items():
            if region in inst.on_demand_usd_per_hour:
                figures[("instances", itype, "on_demand_usd_per_hour", region)] = (
                    inst.on_demand_usd_per_hour[region]
                )
    elif code == "AmazonFSx":
        for deploy, tiers in cat.fsx_lustre_usd_per_gb_month.items():
            for tput, fig in tiers.items():
                figures[("fsx_lustre_usd_per_gb_month", deploy, tput)] = fig
    else:
        for speed, fig in cat.direct_connect_port_usd_per_hour.items():
            figures[("direct_connect_port_usd_per_hour", speed)] = fig
    return figures, found


def plan_import(doc: dict[str, Any], cat: Catalog, region: str | None, origin: str) -> ImportPlan:
    regions = _regions(doc)
    if region is None:
        if len(regions) != 1:
            raise OfferError(
                f"{origin}: the offer covers {len(regions)} regions; pass --region "
                "(e.g. --region us-east-1)"
            )
        (region,) = regions
    elif region not in regions:
        raise OfferError(
            f"{origin}: no product in {region}; the offer has "
            f"{', '.join(sorted(regions)) or 'no regionCode on any product'}"
        )
    pub = doc["publicationDate"]
    plan = ImportPlan(doc["offerCode"], region, pub, pub[:10])
    figures, found = _targets(doc, cat, region)
    seen: Counter[tuple[str, ...]] = Counter()
    for path, name, sku in found:
        price = _on_demand_usd(doc, sku, origin)
        if price is None:
            continue
        if path is None:
            plan.not_in_catalog.append(f"{name}: ${price:g} (sku {sku})")
            continue
        seen[path] += 1
        if seen[path] > 1:
            raise OfferError(
                f"{origin}: more than one product prices {'.'.join(path)} (sku {sku}); "
                "the offer is ambiguous for this catalog figure"
            )
        plan.changes.append(Change(path, figures[path], price, sku))
    plan.missing = [".".join(p) for p in figures if p not in seen]
    plan.changes.sort(key=lambda c: c.path)
    return plan


# -- the diff -------------------------------------------------------------------------------
def _fig(value: float, as_of: str, source: str, unverified: bool) -> str:
    return f"{value:g} ({source} {as_of}{', unverified' if unverified else ''})"


def render_diff(plan: ImportPlan) -> list[str]:
    changed = [c for c in plan.changes if c.changed]
    out = [
        f"{plan.offer_code} offer, publicationDate {plan.publication_date}, region {plan.region}: "
        f"{len(plan.changes)} catalog price(s) found, {len(changed)} changed",
    ]
    for c in plan.changes:
        mark = "changed" if c.changed else "same   "
        out.append(
            f"  {mark} {'.'.join(c.path)}: "
            f"{_fig(c.old.value, c.old.as_of, c.old.source, c.old.unverified)} -> "
            f"{_fig(c.new_value, plan.as_of, SOURCE_KEY, False)}  [sku {c.sku}]"
        )
    if plan.offer_code != "AmazonEC2" and plan.changes:
        out.append(
            f"  note: the catalog keeps one {SERVICES[plan.offer_code]} price for every region; "
            f"these are {plan.region}'s"
        )
    for m in plan.missing:
        out.append(f"  not in offer {m}: kept as it is")
    for n in plan.not_in_catalog:
        out.append(f"  not in catalog {n}: add it to catalog.yaml by hand to use it")
    return out


# -- writing --------------------------------------------------------------------------------
def _node_at(root: yaml.Node, path: tuple[str, ...]) -> yaml.Node:
    node = root
    for key in path:
        assert isinstance(node, yaml.MappingNode)
        node = next(v for k, v in node.value if k.value == key)
    return node


def apply_changes(text: str, plan: ImportPlan) -> str:
    """catalog.yaml's text with each imported figure replaced in place (flow mapping on its
    own span), and the ``aws-price-list`` source named once under ``sources``."""
    root = yaml.compose(text)
    assert root is not None
    spans: list[tuple[int, int, str]] = []
    for c in plan.changes:
        node = _node_at(root, c.path)
        new = f'{{value: {c.new_value!r}, as_of: "{plan.as_of}", source: {SOURCE_KEY}}}'
        spans.append((node.start_mark.index, node.end_mark.index, new))
    sources = _node_at(root, ("sources",))
    assert isinstance(sources, yaml.MappingNode)
    if SOURCE_KEY not in {k.value for k, _ in sources.value}:
        first_key = sources.value[0][0]
        indent = " " * first_key.start_mark.column
        at = sources.value[-1][1].end_mark.index
        spans.append((at, at, f"\n{indent}{SOURCE_KEY}: {json.dumps(SOURCE_TEXT)}"))
    for start, end, new in sorted(spans, reverse=True):
        text = text[:start] + new + text[end:]
    return text


def write_catalog(path: Path, plan: ImportPlan) -> Catalog:
    """Write the updated catalog atomically; refuses (nothing written) unless the result parses
    as a catalog holding exactly the imported values."""
    new = apply_changes(read_text(path, "catalog", CatalogError), plan)
    cat = parse_catalog(new, str(path))
    for c in plan.changes:
        node: Any = cat
        for key in c.path:
            node = node[key] if isinstance(node, dict) else getattr(node, key)
        if not (isinstance(node, Figure) and node.value == c.new_value):
            raise OfferError(f"{path}: {'.'.join(c.path)} did not take the imported value")
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".catalog-", suffix=".yaml")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(new)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return cat


# -- command --------------------------------------------------------------------------------
app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


@app.callback()
def _prices() -> None:
    """The catalog's prices (coreburst/common/data/catalog.yaml)."""


@app.command("import")
def import_offer(
    offer: Annotated[Path, typer.Argument(help="AWS Price List offer file (JSON)")],
    region: Annotated[
        str | None, typer.Option(help="region to import (default: the offer's only region)")
    ] = None,
    write: Annotated[
        bool, typer.Option("--write", help="write the catalog (default: print the diff only)")
    ] = False,
    catalog: Annotated[
        Path, typer.Option(help="catalog file to compare with and write")
    ] = CATALOG_PATH,
) -> None:
    """Diff the catalog's prices against an AWS Price List offer file (EC2, FSx, Direct Connect); --write applies it."""  # noqa: E501
    try:
        doc = read_offer(offer)
        cat = parse_catalog(read_text(catalog, "catalog", CatalogError), str(catalog))
        plan = plan_import(doc, cat, region, str(offer))
        for line in render_diff(plan):
            typer.echo(line)
        if not write:
            typer.echo("dry run: nothing written (--write writes the catalog)")
            return
        if not plan.changes:
            typer.echo("nothing to write: the offer prices no catalog figure")
            return
        write_catalog(catalog, plan)
    except (OfferError, CatalogError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    except OSError as exc:
        typer.echo(f"error: cannot write the catalog {catalog}: {exc.strerror or exc}", err=True)
        raise typer.Exit(2) from None
    typer.echo(f"wrote {len(plan.changes)} price(s) to {catalog}")
