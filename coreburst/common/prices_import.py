"""``coreburst prices import``: the catalog's prices from an AWS Price List bulk offer file.

An offer file (AWS Billing user guide, "Reading the service price list file for an AWS
service") is JSON: ``offerCode``, ``publicationDate``, ``products`` keyed by SKU (each with
``productFamily`` and ``attributes``) and ``terms.OnDemand.<sku>.<offerTermCode>.priceDimensions
.<rateCode>.pricePerUnit.USD`` with its ``unit``). This reads the EC2, FSx and Direct Connect
offers, picks the products the catalog prices (its instance types on Linux shared tenancy, its
FSx for Lustre deployment types and throughputs, its Direct Connect port speeds) in one region,
and prints a reviewable diff, price by price (old -> new, with the offer's publication date as
the new figure's date and ``aws-price-list`` as its source).

Only a plain on-demand rate in the catalog figure's own unit is taken: a term under
``terms.OnDemand`` with no reserved-term attribute (``LeaseContractLength``, ``OfferingClass``,
``PurchaseOption``) whose every price dimension is per ``Hrs`` (instance- and port-hours) or
``GB-Mo`` (FSx storage). An upfront fee (unit ``Quantity``), a per-minute price or a reserved
term is never read as an hourly price: the product is listed as not priced, with what the offer
gave instead. A product of those kinds whose attributes or price it cannot read is listed as not
priced (never priced at $0), figures it never takes from an offer (FSx scratch, Direct Connect
data out) are listed as not imported, and an offer none of whose products reads as expected is
refused. A new price more than 3x the catalog's, or under a third of it, refuses the import
(exit 2, nothing written) unless ``--accept-change`` names that figure, as the diff prints its
path. ``--write`` writes the catalog, and only then: each changed figure's line is replaced in
place (comments and layout kept), the result is parsed as a catalog before it replaces the
file, and a bad offer changes nothing.

    $ coreburst prices import AmazonEC2-us-east-1.json
    $ coreburst prices import AmazonEC2-us-east-1.json --region us-east-1 --write
    $ coreburst prices import AmazonEC2-us-east-1.json --region us-east-1 --write \
        --accept-change instances.p4d.24xlarge.on_demand_usd_per_hour.us-east-1

Only figures the catalog already has are updated: an instance type, region, FSx tier or port
speed it lacks is listed as "not in catalog" for a person to add (the catalog prices every type
in every region it prices any type in). Capacity Block products (``marketoption``
``CapacityBlock``, at $0 an hour in the EC2 offer) are not read: the catalog's Capacity Block
figures are left alone.
"""

from __future__ import annotations

import json
import math
import os
import re
import tempfile
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml

from coreburst.common.catalog import CATALOG_PATH, Catalog, CatalogError, Figure, parse_catalog
from coreburst.common.textio import read_text

SOURCE_KEY = "aws-price-list"
# The catalog's ``sources`` entry for imported figures (coreburst.common.catalog.Source): the
# public index of the offer files, read on the offer's publicationDate (each figure's as_of).
SOURCE = {
    "title": (
        "AWS Price List bulk offer files (AWS Billing user guide, 'Reading the service price "
        "list file for an AWS service'), imported by `coreburst prices import`"
    ),
    "url": "https://pricing.us-east-1.amazonaws.com/offers/v1.0/aws/index.json",
    "took": "terms.OnDemand pricePerUnit USD per Hrs (instances, ports) or GB-Mo (FSx storage) "
    "of each matched product, no reserved term or fee; as_of is the offer's publicationDate",
}
SERVICES = {
    "AmazonEC2": "EC2 on-demand instance-hours",
    "AmazonFSx": "FSx for Lustre storage GB-months",
    "AWSDirectConnect": "Direct Connect dedicated port-hours",
}
# Product attributes matched, with where each name and value was seen in readers of the real
# offer files (tests/fixtures/aws/offers/README.md cites each): infracost's price filters
# (whose cloud-pricing-api keeps an offer's ``attributes`` as they are) and terracost's CSV
# columns.
#
# EC2 (productFamily "Compute Instance"): the catalog's on-demand prices are for Linux, shared
# tenancy, no pre-installed software, capacity used (not a reservation's unused or allocated
# capacity). A product lacking one of these attributes is not taken for one that has it.
EC2_MATCH = {
    "operatingSystem": "Linux",
    "tenancy": "Shared",
    "preInstalledSw": "NA",
    "capacitystatus": "Used",
}
# FSx for Lustre storage: productFamily "Storage", fileSystemType "Lustre", storageType "SSD",
# deploymentOption "Persistent" for both persistent generations, which only the throughput tier
# (throughputCapacity, MB/s/TiB) tells apart: the tiers are disjoint (FSx for Lustre user
# guide, "Managing throughput capacity": Persistent_1 SSD 50/100/200, Persistent_2 SSD
# 125/250/500/1000). Backups are "Storage" products of fileSystemType Lustre too (usagetype
# ...BackupUsage). What the offer calls a scratch deployment was not confirmed: scratch figures
# are not imported and a Lustre SSD product of another deploymentOption is reported.
FSX_TIERS = {
    "PERSISTENT_1": frozenset({50, 100, 200}),
    "PERSISTENT_2": frozenset({125, 250, 500, 1000}),
}
# Direct Connect ports: productFamily "Direct Connect", capacity "1G"/"10G"/"100G"/"400G",
# connectionType naming dedicated (infracost matches it case-blind); one product per Direct
# Connect location (the location code is in usagetype), all in the location's region.
DX_FAMILY = "Direct Connect"
# The unit each catalog figure is priced in, as the offer's priceDimensions.<rateCode>.unit
# names it. "Hrs" (EC2 instance-hours) and "GB-Mo" (storage GB-months) are the values of the
# real EC2 offer excerpts in tests/fixtures/aws/offers/real/ (README there); that FSx storage and
# Direct Connect ports use the same two was not seen in a real FSx or Direct Connect offer: a
# product priced in another unit is listed as not priced, never converted.
UNITS = {"AmazonEC2": "Hrs", "AmazonFSx": "GB-Mo", "AWSDirectConnect": "Hrs"}
# termAttributes of a reserved term (AWS Billing user guide, "Reading the service price list
# file for an AWS service", OnDemand and Reserved definitions); an on-demand term has none. The
# real excerpt's m5.large carries a reserved term (3yr, All Upfront) under terms.OnDemand.
RESERVED_TERM_ATTRIBUTES = ("LeaseContractLength", "OfferingClass", "PurchaseOption")
# EC2 products of another market than on-demand (the real excerpt's p4d.24xlarge Capacity
# Block product, marketoption "CapacityBlock", $0 an hour): not the catalog's on-demand price.
# An offer whose products carry no marketoption (older offers) is read as on-demand.
EC2_MARKET = "OnDemand"
# A new price beyond this factor of the catalog's (either way) refuses the import unless
# --accept-change names the figure: an upfront fee read as an hourly rate was 53x, a per-minute
# rate 1/60.
MAX_CHANGE = 3.0
# More products not in the catalog than this are listed on one line.
LIST_EACH = 10
NOT_CONFIRMED = {
    "AmazonFSx": (
        "the Price List value of deploymentOption for scratch file systems was not confirmed"
    ),
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

    @property
    def name(self) -> str:
        """The figure's path as the diff prints it and ``--accept-change`` takes it."""
        return ".".join(self.path)

    @property
    def factor(self) -> float:
        """How many times larger or smaller the new price is (1.0: the same; inf: from $0)."""
        lo, hi = sorted((self.old.value, self.new_value))
        return hi / lo if lo > 0 else math.inf

    @property
    def large(self) -> bool:
        return self.changed and self.factor > MAX_CHANGE


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
    # offer products of the service's kind whose attributes or price this does not read: each
    # reported, none priced (never at $0)
    unmatched: list[str] = field(default_factory=list)
    # catalog figures this importer never takes from this offer, and why
    not_imported: list[str] = field(default_factory=list)
    # figures (Change.name) --accept-change names: changes over MAX_CHANGE taken all the same
    accepted: frozenset[str] = frozenset()

    def refused(self) -> list[Change]:
        """The changes over MAX_CHANGE that --accept-change does not name."""
        return [c for c in self.changes if c.large and c.name not in self.accepted]


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


def _on_demand_usd(doc: dict[str, Any], sku: str, unit: str, where: str) -> float | str:
    """The one on-demand USD price of ``sku`` per ``unit``, or why the offer gives none (a
    phrase for the diff: no on-demand term, a reserved term, a price in another unit, $0)."""
    terms = doc["terms"]["OnDemand"].get(sku)
    if terms is None:
        return "no on-demand price in the offer"
    prices: set[float] = set()
    try:
        for code, term in terms.items():
            attrs = term.get("termAttributes") or {}
            lease = [f"{k} {attrs[k]}" for k in RESERVED_TERM_ATTRIBUTES if k in attrs]
            if lease:
                return f"its term {code} is a reserved one ({', '.join(lease)}), not on-demand"
            for dim in term["priceDimensions"].values():
                usd = float(dim["pricePerUnit"]["USD"])
                if dim.get("unit") != unit:
                    said = f" {dim['description']!r}" if dim.get("description") else ""
                    return (
                        f"its on-demand price{said} is ${usd:g} per {dim.get('unit')!r}, not "
                        f"per {unit!r}"
                    )
                prices.add(usd)
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
    if price == 0:  # never a $0 figure
        return "an on-demand price of $0 in the offer"
    return price


def _regions(doc: dict[str, Any]) -> set[str]:
    return {
        str(p.get("attributes", {}).get("regionCode"))
        for p in doc["products"].values()
        if isinstance(p, dict) and p.get("attributes", {}).get("regionCode")
    }


def _tier(value: Any) -> int | None:
    """An FSx throughput tier, ``"125"`` -> 125 (None: absent or not a whole number)."""
    text = str(value).strip() if value is not None else ""
    return int(text) if text.isdigit() else None


def _dx_speed(value: Any) -> str:
    """``1G`` / ``400G`` / ``500M`` (the offer's capacity) -> ``1Gbps`` (the catalog's key)."""
    m = re.fullmatch(r"\s*(\d+)\s*(G|M)(?:bps)?\s*", str(value or ""), re.IGNORECASE)
    return f"{m.group(1)}{m.group(2).upper()}bps" if m else ""


@dataclass(frozen=True)
class Found:
    """One offer product of interest: the catalog figure it prices (None: the catalog has
    none), a name for people, its SKU; ``problem`` set: its attributes do not read as one."""

    path: tuple[str, ...] | None
    name: str
    sku: str
    problem: str = ""


def _ec2(family: Any, a: dict[str, Any], cat: Catalog, region: str, sku: str) -> Found | None:
    itype = a.get("instanceType")
    if family != "Compute Instance" or not isinstance(itype, str):
        return None
    if any(a.get(k) != v for k, v in EC2_MATCH.items()):
        return None
    if a.get("marketoption", EC2_MARKET) != EC2_MARKET:
        return None  # Capacity Block: not the on-demand price
    path = ("instances", itype, "on_demand_usd_per_hour", region)
    has = itype in cat.instances and region in cat.instances[itype].on_demand_usd_per_hour
    return Found(path if has else None, f"{itype} on-demand in {region}", sku)


def _fsx(family: Any, a: dict[str, Any], cat: Catalog, region: str, sku: str) -> Found | None:
    if family != "Storage" or str(a.get("fileSystemType", "")).lower() != "lustre":
        return None
    if "BackupUsage" in str(a.get("usagetype", "")):
        return None  # backup storage, not the file system's
    storage, deploy_opt = a.get("storageType"), a.get("deploymentOption")
    what = f"FSx for Lustre storage (sku {sku})"
    if storage is None:
        return Found(None, what, sku, "no storageType")
    if str(storage).upper() != "SSD":
        return None  # HDD, Intelligent-Tiering: the catalog prices SSD storage only
    if str(deploy_opt).lower() != "persistent":
        why = f"deploymentOption {deploy_opt!r} ({NOT_CONFIRMED['AmazonFSx']})"
        return Found(None, what, sku, why)
    tier = _tier(a.get("throughputCapacity"))
    deploy = next((d for d, tiers in FSX_TIERS.items() if tier in tiers), None)
    if deploy is None:
        return Found(
            None, what, sku,
            f"throughputCapacity {a.get('throughputCapacity')!r} is no persistent SSD tier "
            f"({', '.join(f'{d} {sorted(t)}' for d, t in FSX_TIERS.items())})",
        )  # fmt: skip
    name = f"FSx for Lustre {deploy} SSD {tier} MB/s/TiB in {region}"
    tiers = cat.fsx_lustre_usd_per_gb_month.get(deploy)
    if tiers is None:
        return None  # a deployment type the catalog does not use (PERSISTENT_1)
    path = ("fsx_lustre_usd_per_gb_month", deploy, str(tier))
    return Found(path if str(tier) in tiers else None, name, sku)


def _dx(family: Any, a: dict[str, Any], cat: Catalog, region: str, sku: str) -> Found | None:
    if family != DX_FAMILY:
        return None  # data transfer and the rest: not what the catalog's port figures price
    kind = a.get("connectionType")
    what = f"Direct Connect port (sku {sku}, usagetype {a.get('usagetype', '?')})"
    if kind is None:
        return Found(None, what, sku, "no connectionType")
    if "dedicated" not in str(kind).lower():
        return None  # hosted connections are a partner's, not a port the catalog prices
    speed = _dx_speed(a.get("capacity"))
    if not speed:
        return Found(None, what, sku, f"capacity {a.get('capacity')!r} is not a port speed")
    name = f"Direct Connect {speed} dedicated port in {region}"
    has = speed in cat.direct_connect_port_usd_per_hour
    return Found(("direct_connect_port_usd_per_hour", speed) if has else None, name, sku)


def _targets(
    doc: dict[str, Any], cat: Catalog, region: str
) -> tuple[dict[tuple[str, ...], Figure], list[Found]]:
    """The catalog figures this offer's service prices in ``region``, and each product of
    interest there."""
    code = doc["offerCode"]
    found: list[Found] = []
    for sku, product in doc["products"].items():
        if not isinstance(product, dict) or not isinstance(product.get("attributes"), dict):
            continue
        a = product["attributes"]
        if a.get("regionCode") != region:
            continue
        family = product.get("productFamily")
        if code == "AmazonEC2":
            f = _ec2(family, a, cat, region, sku)
        elif code == "AmazonFSx":
            f = _fsx(family, a, cat, region, sku)
        else:
            f = _dx(family, a, cat, region, sku)
        if f is not None:
            found.append(f)
    figures: dict[tuple[str, ...], Figure] = {}
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
    code = doc["offerCode"]
    pub = doc["publicationDate"]
    plan = ImportPlan(code, region, pub, pub[:10])
    figures, found = _targets(doc, cat, region)
    priced: dict[tuple[str, ...], list[tuple[float, str]]] = {}
    for f in found:
        if f.problem:
            plan.unmatched.append(f"{f.name}: {f.problem}")
            continue
        price = _on_demand_usd(doc, f.sku, UNITS[code], origin)
        if f.path is None:
            said = f"${price:g}" if isinstance(price, float) else price
            plan.not_in_catalog.append(f"{f.name}: {said} (sku {f.sku})")
            continue
        if isinstance(price, str):
            # never a $0 figure, a fee or another unit's price: the product is reported
            plan.unmatched.append(f"{f.name} (sku {f.sku}): {price}")
            continue
        priced.setdefault(f.path, []).append((price, f.sku))
    for path, offers in priced.items():
        prices = sorted({p for p, _ in offers})
        if code == "AWSDirectConnect" and len(prices) == 1:
            # one product per Direct Connect location, all at one price: that is the figure
            more = f" and {len(offers) - 1} more location(s)" if len(offers) > 1 else ""
            plan.changes.append(Change(path, figures[path], prices[0], offers[0][1] + more))
            continue
        if len(offers) > 1:
            skus = ", ".join(sku for _, sku in offers)
            why = (
                f"its {len(offers)} Direct Connect locations have {len(prices)} different "
                f"prices (${', $'.join(f'{p:g}' for p in prices)}; skus {skus}); the catalog "
                "keeps one price per port speed, set it by hand"
                if code == "AWSDirectConnect"
                else f"more than one product prices it (skus {skus}); the offer is ambiguous "
                "for this catalog figure"
            )
            raise OfferError(f"{origin}: {'.'.join(path)}: {why}")
        plan.changes.append(Change(path, figures[path], offers[0][0], offers[0][1]))
    if code == "AmazonFSx":
        for path in figures:
            if path[1].startswith("SCRATCH"):
                plan.not_imported.append(f"{'.'.join(path)}: {NOT_CONFIRMED[code]}")
    if code == "AWSDirectConnect":
        plan.not_imported.append(
            "data_transfer.direct_connect_out_usd_per_gb: priced per Direct Connect location "
            "and interface type, not by this import"
        )
    bad = [f for f in found if f.problem]
    if bad and len(bad) == len(found):
        # not one product reads as this importer expects: the offer's attribute vocabulary is
        # not the one confirmed (say AWS renamed throughputCapacity); refuse, don't guess
        raise OfferError(
            f"{origin}: no {SERVICES[code]} product in {region} has the attributes this "
            f"importer reads (first: {bad[0].name}: {bad[0].problem}); nothing imported"
        )
    skipped = {p for p in figures if any(line.startswith(".".join(p) + ":")
                                         for line in plan.not_imported)}  # fmt: skip
    plan.missing = [".".join(p) for p in figures if p not in priced and p not in skipped]
    plan.changes.sort(key=lambda c: c.path)
    return plan


# -- the diff -------------------------------------------------------------------------------
def _fig(value: float, as_of: str, source: str, unverified: bool) -> str:
    return f"{value:g} ({source} {as_of}{', unverified' if unverified else ''})"


def _times(c: Change) -> str:
    return f"{c.factor:.1f}x {'up' if c.new_value > c.old.value else 'down'}"


def render_diff(plan: ImportPlan) -> list[str]:
    changed = [c for c in plan.changes if c.changed]
    out = [
        f"{plan.offer_code} offer, publicationDate {plan.publication_date}, region {plan.region}: "
        f"{len(plan.changes)} catalog price(s) found, {len(changed)} changed",
    ]
    for c in plan.changes:
        mark = "changed" if c.changed else "same   "
        large = ""
        if c.large:
            large = (
                f"  ({_times(c)}: accepted by --accept-change)"
                if c.name in plan.accepted
                else f"  ({_times(c)}: over {MAX_CHANGE:g}x, refused without --accept-change)"
            )
        out.append(
            f"  {mark} {c.name}: "
            f"{_fig(c.old.value, c.old.as_of, c.old.source, c.old.unverified)} -> "
            f"{_fig(c.new_value, plan.as_of, SOURCE_KEY, False)}  [sku {c.sku}]{large}"
        )
    if plan.offer_code != "AmazonEC2" and plan.changes:
        out.append(
            f"  note: the catalog keeps one {SERVICES[plan.offer_code]} price for every region; "
            f"these are {plan.region}'s"
        )
    for m in plan.missing:
        out.append(f"  not in offer {m}: kept as it is")
    if len(plan.not_in_catalog) > LIST_EACH:
        out.append(
            f"  not in catalog {len(plan.not_in_catalog)} products of the offer (add one to "
            f"catalog.yaml by hand to use it): {'; '.join(plan.not_in_catalog)}"
        )
    else:
        for n in plan.not_in_catalog:
            out.append(f"  not in catalog {n}: add it to catalog.yaml by hand to use it")
    for n in plan.not_imported:
        out.append(f"  not imported {n}; kept as it is")
    for n in plan.unmatched:
        out.append(f"  not priced {n}")
    return out


# -- writing --------------------------------------------------------------------------------
def _node_at(root: yaml.Node, path: tuple[str, ...]) -> yaml.Node:
    node = root
    for key in path:
        assert isinstance(node, yaml.MappingNode)
        node = next(v for k, v in node.value if k.value == key)
    return node


def _last_scalar(node: yaml.Node) -> yaml.Node:
    """The last scalar inside ``node``: where its text ends (a block mapping's own end mark
    is the start of whatever follows it)."""
    while isinstance(node, yaml.MappingNode | yaml.SequenceNode) and node.value:
        last = node.value[-1]
        node = last[1] if isinstance(last, tuple) else last
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
        at = _last_scalar(sources).end_mark.index
        entry = ", ".join(
            f"{k}: {json.dumps(v)}" for k, v in {**SOURCE, "read": plan.as_of}.items()
        )
        spans.append((at, at, f"\n{indent}{SOURCE_KEY}: {{{entry}}}"))
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
    accept_change: Annotated[
        list[str] | None,
        typer.Option(
            "--accept-change",
            metavar="FIGURE",
            help=f"take this figure's new price even though it changes more than "
            f"{MAX_CHANGE:g}x (its path as the diff prints it; repeat for more)",
        ),
    ] = None,
) -> None:
    """Diff the catalog's prices against an AWS Price List offer file (EC2, FSx, Direct Connect); --write applies it."""  # noqa: E501
    try:
        doc = read_offer(offer)
        cat = parse_catalog(read_text(catalog, "catalog", CatalogError), str(catalog))
        plan = plan_import(doc, cat, region, str(offer))
        plan.accepted = frozenset(accept_change or ())
        unknown = sorted(plan.accepted - {c.name for c in plan.changes})
        if unknown:
            raise OfferError(
                f"--accept-change {unknown[0]}: the offer prices no such catalog figure in "
                f"{plan.region}; give the figure's path as the diff prints it"
            )
        for line in render_diff(plan):
            typer.echo(line)
        refused = plan.refused()
        if refused:
            raise OfferError(
                f"{offer}: {len(refused)} price(s) change more than {MAX_CHANGE:g}x ("
                + ", ".join(
                    f"{c.name} {c.old.value:g} -> {c.new_value:g}, {_times(c)}" for c in refused
                )
                + "); nothing written. Check the offer; if the new price is right, pass "
                "--accept-change with the figure's path"
            )
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
