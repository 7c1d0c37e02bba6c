"""``coreburst cost report``: one dollar figure for every GPU-hour, core and burst together.

$ coreburst cost report --since 30d --scenario coreburst/tco/examples/team8_85pct.yaml
$ coreburst cost report --since 2026-11-01 --until 2026-12-01 --by user --format csv
$ coreburst cost report --since 7d --teams teams.yaml --plot cost.png --stack burst

**Jobs** come from Slurm's accounting database (``sacct``, :mod:`coreburst.cost.accounting`),
not from what the guardrails daemon saw: jobs that ran while it was down are counted. Each
run's GPU-hours are its allocated ``gres/gpu`` x elapsed, clipped to the window.

**Core** GPU-hours (every node that is not a burst node of ``--stack``) are priced at one
owned $/GPU-hour: ``--gpu-hour-usd``, else the TCO model's amortised price of the owned node
of ``--scenario`` (``coreburst.tco.model.scenario_gpu_hour_price``); with neither they are
shown *unpriced*. **Burst** GPU-hours are priced from the catalog (the node's instance type
and capacity model; instance price only, not its EBS volume), and the instance-hours no job
used are the *idle* row, from the resume program's audit log (``auditLog`` of the stack, or
``--audit-log``). The core's GPUs no job held are the *idle core* row, at the owned rate:
each core node's GPUs (``scontrol show node``) x the time it was in service (slurmdbd's node
events: down, drained, powered down) less the GPU-seconds jobs held there
(:mod:`coreburst.cost.capacity`); a node whose GPUs cannot be read is unknown, never idle.
A burst job's time is clipped to its instance's lifetime (the audit
log's, or EC2's own launch and end times from ``--ec2-instances``, a saved
``aws ec2 describe-instances``): the report never charges more than EC2 billed. The JSON's
``burst_instances`` names every job that ran on each instance and, from the resume program's
``coreburst-job`` tag, the job it was launched for; its ``coreburst-user`` /
``coreburst-account`` tags are for joining AWS Cost Explorer or the CUR with these rows.

Jobs are read in time slices of the window (:class:`coreburst.cost.accounting.JobStream`,
one deadline per slice) and counted as they come: a month of a site running 30,000 jobs a day
stays within a few hundred MB.

**Teams** are Slurm accounts, or what ``--teams FILE`` (YAML ``account: team``) maps them to.

**Provenance**: every dollar says what it was priced from. The owned rate's figures (the TCO
defaults' and the catalog's, each with its source key, date and ``unverified``) or that the
user gave it; each burst pool's catalog price with its source key and date; per row, the
citations its core and burst dollars rest on and which of its dollar columns rest on an
unverified figure (table, CSV and JSON alike); the source keys resolve in the catalog's and
the TCO defaults' ``sources`` tables (docs/sources.md).
"""

from __future__ import annotations

import csv
import io
import json
import re
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from enum import StrEnum
from fractions import Fraction
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml

from coreburst.cost.accounting import (
    AccountingError,
    JobRecord,
    JobStream,
    bad_records_note,
    parse_sacct_json,
    terminal_progress,
)
from coreburst.cost.capacity import CapacityUnavailableError, CoreCapacity, read_core_capacity
from coreburst.cost.ledger import (
    BurstNode,
    Ledger,
    Row,
    build_ledger,
    burst_nodes_of,
    ec2_lifetimes,
    instance_lifetimes,
)

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="GPU cost per team, account, user, job or partition, core and burst, from sacct.",
)


@app.callback()
def _cost() -> None:
    """GPU cost from Slurm's accounting: core at the owned price, burst at the catalog's."""


class Format(StrEnum):
    table = "table"
    csv = "csv"
    json = "json"


class By(StrEnum):
    team = "team"
    account = "account"
    user = "user"
    job = "job"
    partition_ = "partition"  # (``partition`` is a str method)


def _fail(message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(2)


_DURATION = re.compile(r"(\d+)([smhdw])")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_when(value: str, now: int, option: str) -> int:
    """Epoch seconds for ``30d`` (that long before now), ``2026-11-01`` or
    ``2026-11-01T12:00`` (UTC unless an offset is given).

    >>> parse_when("2d", 200000, "--since"), parse_when("1970-01-02", 0, "--since")
    (27200, 86400)
    """
    text = value.strip()
    m = _DURATION.fullmatch(text)
    if m:
        return now - int(m.group(1)) * _UNIT_S[m.group(2)]
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        raise _fail(
            f"{option} {value!r}: give a duration such as 30d, 12h, 2w or a UTC date such as "
            "2026-11-01 or 2026-11-01T12:00"
        ) from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return int(dt.timestamp())


class _DuplicateKeyError(yaml.YAMLError):
    def __init__(self, key: str, line: int) -> None:
        super().__init__(key)
        self.key, self.line = key, line


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a mapping that names a key twice (YAML 1.2 section 3.2.1.1:
    keys are unique; PyYAML keeps the last one without a word)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, str | int | float | bool) and key in seen:
                raise _DuplicateKeyError(str(key), key_node.start_mark.line + 1)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _teams(path: Path | None) -> dict[str, str]:
    if path is None:
        return {}
    from coreburst.common.textio import TextFileError, read_text

    try:
        # _UniqueKeyLoader is a SafeLoader: no Python objects are built from the file
        doc = yaml.load(read_text(path, "--teams file"), Loader=_UniqueKeyLoader)
    except TextFileError as exc:
        raise _fail(str(exc)) from None
    except _DuplicateKeyError as exc:
        raise _fail(
            f"--teams {path} line {exc.line}: account {exc.key!r} is mapped twice; keep one "
            "team for it"
        ) from None
    except yaml.YAMLError:
        raise _fail(f"--teams {path}: not valid YAML; give a mapping of account: team") from None
    if not isinstance(doc, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and v.strip() for k, v in doc.items()
    ):
        raise _fail(
            f"--teams {path}: give a mapping of Slurm account to team name, e.g. 'ml-a: vision'"
        )
    return {k: v.strip() for k, v in doc.items()}


@dataclass(frozen=True)
class OwnedPrice:
    """The owned $/GPU-hour, where it came from (``source``: the option or the scenario that set
    it), the catalog citations it rests on (``cites``, ``source as_of[ unverified]``; the
    option's name for a rate the user gave) and each figure behind it."""

    rate: Decimal | None
    source: str
    cites: str = ""
    figures: tuple[dict[str, Any], ...] = ()

    @property
    def unverified(self) -> bool:
        from coreburst.common.pricing import cites_unverified

        return self.rate is not None and cites_unverified(self.cites)


def owned_rate(gpu_hour_usd: str | None, scenario: Path | None) -> OwnedPrice:
    """The owned $/GPU-hour and where it came from."""
    if gpu_hour_usd is not None:
        try:
            rate = Decimal(gpu_hour_usd)
        except InvalidOperation:
            raise _fail(f"--gpu-hour-usd {gpu_hour_usd!r}: give a number such as 2.35") from None
        if not rate.is_finite() or not 0 <= rate < 1_000_000:
            raise _fail("--gpu-hour-usd: give a price from 0 to 1,000,000 $ per GPU-hour")
        # the user's own figure: no catalog source to cite, and not ours to call unverified
        return OwnedPrice(rate, "--gpu-hour-usd", "--gpu-hour-usd")
    if scenario is None:
        return OwnedPrice(None, "none (give --scenario or --gpu-hour-usd to price core GPU-hours)")
    from coreburst.common.pricing import merge_sources
    from coreburst.common.textio import read_text
    from coreburst.tco.cli import build_scenario
    from coreburst.tco.model import TcoError, scenario_gpu_hour_quote

    try:
        data = yaml.safe_load(read_text(scenario, "scenario", TcoError)) or {}
        if not isinstance(data, dict):
            raise TcoError(f"{scenario}: a scenario is a mapping of keys (name, gpus, ...)")
        price, used = scenario_gpu_hour_quote(build_scenario(data, {}))
    except yaml.YAMLError:
        raise _fail(f"--scenario {scenario}: not valid YAML") from None
    except TcoError as exc:
        msg = str(exc)
        raise _fail(
            f"--scenario: {msg}" if str(scenario) in msg else f"--scenario {scenario}: {msg}"
        ) from None
    # The model's float, to the precision it carries; the JSON states the rate used.
    return OwnedPrice(
        Decimal(repr(price)),
        f"TCO scenario {scenario}",
        merge_sources(*(f.cited for f in used)),
        tuple(f.model_dump() for f in used),
    )


@dataclass
class BurstSide:
    nodes: dict[str, BurstNode]
    audit_log: Path
    region: str


def burst_side(stack: str, stack_dir: Path) -> BurstSide:
    from coreburst.burst.config import load_burst_stack
    from coreburst.burst.slurmconf import node_sets
    from coreburst.common import pricing
    from coreburst.common.catalog import CatalogError, load_catalog
    from infra.config import StackConfigError

    try:
        s = load_burst_stack(stack, stack_dir)
        cat = load_catalog()
        sets = node_sets(s, cat)
    except (StackConfigError, CatalogError) as exc:
        raise _fail(f"--stack {stack}: {exc}") from None

    def price(instance_type: str, market: str) -> tuple[Decimal | None, str]:
        try:
            rate, src = pricing.instance_rate(cat, instance_type, s.config.region, market)
        except CatalogError as exc:
            return None, str(exc)
        return Decimal(repr(rate)), src

    audit = s.settings.audit_log
    if not audit.is_absolute():
        audit = stack_dir / audit
    return BurstSide(burst_nodes_of(sets, price), audit, s.config.region)


def _lifetimes(path: Path, since: int, until: int) -> dict[str, list[tuple[int, int]]] | None:
    from coreburst.common.textio import TextFileError, read_text

    if not path.exists():
        return None
    try:
        return instance_lifetimes(read_text(path, "burst audit log"), since, until, str(path))
    except (TextFileError, AccountingError) as exc:
        raise _fail(str(exc)) from None


def _ec2(
    path: Path | None, since: int, until: int
) -> tuple[dict[str, list[tuple[int, int]]], dict[str, list[dict[str, Any]]]]:
    from coreburst.common.textio import TextFileError, read_text

    if path is None:
        return {}, {}
    try:
        return ec2_lifetimes(read_text(path, "--ec2-instances file"), since, until, str(path))
    except (TextFileError, AccountingError) as exc:
        raise _fail(str(exc)) from None


def _core_capacity(side: BurstSide, since: int, until: int) -> CoreCapacity | str:
    """The core's GPUs and events from Slurm, or why they could not be asked (a note);
    output that cannot be read is one line and exit 2."""
    try:
        return read_core_capacity(lambda n: n not in side.nodes, since, until)
    except CapacityUnavailableError as exc:
        return str(exc)
    except AccountingError as exc:
        raise _fail(str(exc)) from None


def _measure(  # noqa: PLR0917
    url: str,
    jobs: list[JobRecord],
    side: BurstSide,
    core: CoreCapacity | str,
    since: int,
    until: int,
    now: int,
) -> tuple[dict[JobRecord, float | None], list[str]]:
    """Each run's DCGM engine-active ratio; Prometheus unreachable or refusing is one line."""
    # DCGM's client only when --prometheus is given: the rest of the report does not need it
    from coreburst.cost.measured import measure_jobs
    from guardrails.adapters.dcgm import Prometheus, PrometheusError

    gpus_of = {n: b.gpus for n, b in side.nodes.items()}
    if isinstance(core, CoreCapacity):
        gpus_of.update({n: g for n, g in core.gpus.items() if g is not None})
    try:
        return measure_jobs(Prometheus(url), jobs, gpus_of, since=since, until=until, now=now)
    except PrometheusError as exc:
        # the client names the daemon's setting; here the URL is --prometheus
        raise _fail(str(exc).replace("core_idle.prometheus_url", "--prometheus")) from None


def _usd(cents: int | None) -> float | None:
    return None if cents is None else cents / 100


def _h(gpu_s: Fraction) -> float:
    return round(float(gpu_s) / 3600, 3)


def _provenance(r: Row, owned: OwnedPrice) -> dict[str, Any]:
    """What a row's dollars were priced from, and which of its dollar columns rest on a
    figure marked unverified (a finance reader's first question)."""
    from coreburst.common.pricing import cites_unverified, merge_sources

    core = owned.cites if owned.rate is not None else ""
    burst = merge_sources(*r.burst_sources)
    flagged = []
    # a $0.00 from no GPU-hours rests on no price: only dollars that came from one are flagged
    if core and cites_unverified(core) and r.core_cents is not None and r.core_gpu_s > 0:
        flagged.append("core_usd")
    if burst and cites_unverified(burst):
        flagged.append("burst_usd")
    if flagged and r.total_cents is not None:
        flagged.append("total_usd")
    return {"core_price_source": core, "burst_price_source": burst, "unverified": flagged}


def row_doc(r: Row, owned: OwnedPrice | None = None) -> dict[str, Any]:
    if owned is not None:
        return {**row_doc(r), **_provenance(r, owned)}
    if r.unknown:  # an idle figure Slurm could not give: null, never 0
        return {
            "group": r.group,
            "jobs": 0,
            **dict.fromkeys(("core_gpu_h", "core_usd", "burst_gpu_h", "burst_usd")),
            "unpriced_gpu_h": 0.0,
            "total_usd": None,
            "unknown": True,
        }
    active = r.gpu_active
    held = r.core_gpu_s + r.burst_gpu_s + r.unpriced_gpu_s
    return {
        "group": r.group,
        "jobs": len(r.jobs),
        "core_gpu_h": _h(r.core_gpu_s),
        "core_usd": _usd(r.core_cents),
        "burst_gpu_h": _h(r.burst_gpu_s),
        "burst_usd": _usd(r.burst_cents),
        "unpriced_gpu_h": _h(r.unpriced_gpu_s),
        "total_usd": _usd(r.total_cents),
        # DCGM engine-active ratio of the measured runs (null: none measured, never 0)
        "gpu_active": None if active is None else round(active, 4),
        "measured_gpu_h": _h(r.measured_gpu_s),
        # the share of the row's GPU-hours that DCGM measured
        "measured_share": round(float(r.measured_gpu_s / held), 4) if held else None,
    }


def _burst_prices(nodes: dict[str, BurstNode]) -> list[dict[str, Any]]:
    """One entry per burst pool: its catalog price and what it cites (or why it has none)."""
    from coreburst.common.pricing import cites_unverified

    pools: dict[str, dict[str, Any]] = {}
    for b in nodes.values():
        if b.cluster in pools:
            pools[b.cluster]["nodes"] += 1
            continue
        priced = b.usd_per_hour is not None
        pools[b.cluster] = {
            "cluster": b.cluster,
            "instance_type": b.instance_type,
            "market": b.market,
            "nodes": 1,
            "usd_per_hour": None if b.usd_per_hour is None else str(b.usd_per_hour),
            # catalog figures with their dates; for an unpriced pool, why it has no price
            "price_source": b.source if priced else None,
            "unpriced_because": None if priced else b.source,
            "unverified": priced and cites_unverified(b.source),
        }
    return list(pools.values())


def _price_sources(cites: str) -> dict[str, Any]:
    """Each source key ``cites`` names: its page (and the date read) or the file recording it,
    from the catalog's or the TCO defaults' ``sources`` table."""
    from coreburst.common.catalog import load_catalog
    from coreburst.common.pricing import source_keys
    from coreburst.tco.model import load_defaults

    tables = {**load_defaults().sources, **load_catalog().sources}
    return {
        k: tables[k].model_dump(exclude_none=True) if k in tables else None
        for k in sorted(source_keys(cites))
        if k != "--gpu-hour-usd"
    }


def report_doc(
    ledger: Ledger,
    *,
    by: str,
    since: int,
    until: int,
    source: str,
    price_source: str | OwnedPrice,
    capacity_source: str = "unknown",
    measured_source: str | None = None,
    burst_nodes: dict[str, BurstNode] | None = None,
) -> dict[str, Any]:
    from coreburst.common.pricing import merge_sources

    owned = (
        price_source
        if isinstance(price_source, OwnedPrice)
        else OwnedPrice(ledger.core_rate, price_source)
    )
    pools = _burst_prices(burst_nodes or {})
    cites = merge_sources(owned.cites, *(p["price_source"] or "" for p in pools))
    iso = lambda t: datetime.fromtimestamp(t, UTC).isoformat()  # noqa: E731
    total = Row("total")
    for r in ledger.rows:
        total.jobs |= r.jobs
    for r in ledger.all_rows:
        if r.unknown:
            continue
        total.core_gpu_s += r.core_gpu_s
        total.burst_gpu_s += r.burst_gpu_s
        total.unpriced_gpu_s += r.unpriced_gpu_s
        total.measured_gpu_s += r.measured_gpu_s
        total.active_gpu_s += r.active_gpu_s
    total.core_cents = ledger.total("core_cents")
    total.burst_cents = ledger.total("burst_cents")
    for r in ledger.all_rows:
        for src in r.burst_sources:
            if src not in total.burst_sources:
                total.burst_sources.append(src)
    return {
        "since": iso(since),
        "until": iso(until),
        "by": by,
        "jobs_source": source,
        "owned_usd_per_gpu_hour": None if ledger.core_rate is None else str(ledger.core_rate),
        "owned_price_source": owned.source,
        # the figures the owned rate is computed from, each with its source, date, unverified
        "owned_price_cites": owned.cites,
        "owned_price_figures": list(owned.figures),
        "owned_price_unverified": owned.unverified,
        "burst_price_source": "catalog (coreburst/common/data/catalog.yaml), instance price",
        "burst_prices": pools,
        # every source key cited above: where it can be checked (docs/sources.md)
        "price_sources": _price_sources(cites),
        "core_capacity_source": capacity_source,
        "gpu_active_source": measured_source,
        "rows": [row_doc(r, owned) for r in ledger.rows],
        # the idle core row holds no job: ``nodes`` are the core nodes counted, ``unknown``
        # those whose capacity Slurm could not give (not counted as idle)
        "idle_core": {
            **row_doc(ledger.idle_core, owned),
            "jobs": 0,
            "nodes": ledger.idle_core_by_node,
            "unknown_nodes": ledger.core_unknown,
        },
        # the idle row holds no job: ``nodes`` are the burst nodes whose instances idled
        "idle": {**row_doc(ledger.idle, owned), "jobs": 0, "nodes": ledger.idle_by_node},
        # per burst node: its instance's lifetime (what EC2 bills), the instances EC2 lists
        # with the job each was launched for (--ec2-instances), and every job run on it
        "burst_instances": ledger.instances,
        "total": row_doc(total, owned),
        "notes": ledger.notes,
    }


def _active(r: dict[str, Any]) -> str:
    """``62%``, ``62% of 80%`` (of the row's GPU-hours measured), or ``n/a``."""
    if r["gpu_active"] is None:
        return "n/a"
    share = r["measured_share"] or 0.0
    text = f"{r['gpu_active']:.0%}"
    return text if share >= 0.995 else f"{text} of {share:.0%}"


def _money(v: float | None) -> str:
    return "unpriced" if v is None else f"${v:,.2f}"


def _csv(doc: dict[str, Any], by: str) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    keys = ["jobs", "core_gpu_h", "core_usd", "burst_gpu_h", "burst_usd", "unpriced_gpu_h"]
    prov = ["core_price_source", "burst_price_source", "unverified"]
    w.writerow([by, *keys, "total_usd", "gpu_active", "measured_gpu_h", *prov])
    idle_rows = (doc["idle_core"], doc["idle"])
    for r in [*doc["rows"], *idle_rows, doc["total"]]:
        vals = [r[k] for k in [*keys, "total_usd"]]
        # an unpriced or unknown cell is the word, never an empty cell a spreadsheet sums as 0
        word = "unknown" if r.get("unknown") else "unpriced"
        measured = (
            ["", ""]
            if any(r is x for x in idle_rows)
            else ["n/a" if r["gpu_active"] is None else r["gpu_active"], r["measured_gpu_h"]]
        )
        # which dollar columns rest on an unverified figure, space-separated
        cites = [r["core_price_source"], r["burst_price_source"], " ".join(r["unverified"])]
        w.writerow([r["group"], *(word if v is None else v for v in vals), *measured, *cites])
    return buf.getvalue()


def _table(doc: dict[str, Any], by: str) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(soft_wrap=True)
    if not console.is_terminal:  # a pipe or a file: no wrapping at 80 columns
        console = Console(soft_wrap=True, width=200)
    t = Table(title=f"GPU cost by {by}, {doc['since'][:19]} to {doc['until'][:19]} UTC")
    cols = (
        by, "jobs", "core GPU-h", "core $", "burst GPU-h", "burst $", "total $", "GPU active",
        "unverified $",
    )  # fmt: skip
    for col in cols:
        t.add_column(col, justify="left" if col == by else "right")
    idle_rows = (doc["idle_core"], doc["idle"])
    for r in [*doc["rows"], *idle_rows, doc["total"]]:
        if r.get("unknown"):
            t.add_row(r["group"], "", "unknown", "unknown", "", "", "unknown", "", "")
            continue
        burst_h = f"{r['burst_gpu_h']:,.3f}"
        if r["unpriced_gpu_h"]:
            burst_h += f" (+{r['unpriced_gpu_h']:,.3f} unpriced)"
        t.add_row(
            r["group"],
            str(r["jobs"])
            if all(r is not x for x in idle_rows)
            else f"{len(r['nodes'])} node{'' if len(r['nodes']) == 1 else 's'}",
            f"{r['core_gpu_h']:,.3f}",
            _money(r["core_usd"]),
            burst_h,
            _money(r["burst_usd"]),
            _money(r["total_usd"]),
            "" if any(r is x for x in idle_rows) else _active(r),
            _flagged(r),
            end_section=r is doc["idle"],
        )
    console.print(t)
    for line in price_footer(doc):
        console.print(line, markup=False, highlight=False)
    console.print(f"jobs from {doc['jobs_source']}", markup=False, highlight=False)
    console.print(f"idle core: GPUs and time in service from {doc['core_capacity_source']}")
    console.print(
        f"GPU active: DCGM engine-active ratio from {doc['gpu_active_source']}"
        if doc["gpu_active_source"]
        else "GPU active: n/a (give --prometheus URL to read DCGM)"
    )
    for note in doc["notes"]:
        console.print(f"note: {note}")


def _flagged(r: dict[str, Any]) -> str:
    """``core, burst``: the row's dollar columns that rest on an unverified figure."""
    return ", ".join(c.removesuffix("_usd") for c in r.get("unverified", []) if c != "total_usd")


def price_footer(doc: dict[str, Any]) -> list[str]:
    """The lines under the table that say what every dollar was priced from: the owned rate
    (where it came from and each figure behind it), each burst pool's catalog price, and where
    each cited source key can be checked."""
    from coreburst.common.pricing import sources_legend
    from coreburst.tco.model import UsedFigure

    rate = doc["owned_usd_per_gpu_hour"]
    src = doc["owned_price_source"]
    if rate is None:
        out = [f"core: unpriced, {src}"]
    elif not doc["owned_price_figures"]:
        out = [f"core: ${Decimal(rate):,.4f}/GPU-h from {src} (your figure; no catalog source)"]
    else:
        flag = " (unverified)" if doc["owned_price_unverified"] else ""
        figures = [UsedFigure.model_validate(f).text for f in doc["owned_price_figures"]]
        out = [
            f"core: ${Decimal(rate):,.4f}/GPU-h{flag} from {src}: one owned node's amortised "
            "price plus its maintenance, colocation, staff and power, over its GPU-hours; "
            f"priced from {doc['owned_price_cites']}",
            f"  core figures: {'; '.join(figures)}",
        ]
    pools = doc["burst_prices"]
    if pools:
        parts = [
            f"{p['cluster']} {p['instance_type']} {p['market']} "
            + (
                f"${Decimal(p['usd_per_hour']):,.3f}/h ({p['price_source']})"
                if p["usd_per_hour"] is not None
                else f"unpriced ({p['unpriced_because']})"
            )
            for p in pools
        ]
        out.append(f"burst: {doc['burst_price_source']}: " + "; ".join(parts))
    else:
        out.append(f"burst: {doc['burst_price_source']}: the stack has no burst pool")
    tables = {}
    for key, entry in doc["price_sources"].items():
        if entry is not None:
            from coreburst.common.catalog import Source

            tables[key] = Source.model_validate(entry)
    if tables:
        out.append(sources_legend(tables, "; ".join(tables)))
    return out


def _check_plot(path: Path) -> None:
    if path.is_dir():
        raise _fail(f"--plot {path}: is a directory; give a file name such as {path / 'cost.png'}")
    if path.suffix.lower() != ".png":
        raise _fail(f"--plot {path}: give a file name ending in .png (the chart is a PNG)")
    if not path.parent.is_dir():
        raise _fail(f"--plot {path}: no directory {path.parent}; create it first")


@app.command()
def report(  # noqa: PLR0917 (one parameter per CLI option)
    since: Annotated[str, typer.Option(help="start: 30d, 12h, 2w ago, or a UTC date")] = "30d",
    until: Annotated[
        str | None, typer.Option(help="end: a UTC date or 1d (ago); default now")
    ] = None,
    by: Annotated[By, typer.Option(help="one row per team, account, user, job or partition")] = (
        By.team
    ),
    fmt: Annotated[Format, typer.Option("--format", help="table, csv or json")] = Format.table,
    plot: Annotated[Path | None, typer.Option(help="write a PNG chart here")] = None,
    stack: Annotated[
        str, typer.Option("--stack", "-s", help="burst stack: its nodes, prices, audit log")
    ] = "burst",
    stack_dir: Annotated[Path, typer.Option(help="directory holding Pulumi.<stack>.yaml")] = Path(
        "."
    ),
    audit_log: Annotated[
        Path | None, typer.Option(help="burst audit log (default: the stack's auditLog)")
    ] = None,
    teams: Annotated[
        Path | None, typer.Option(help="YAML mapping of Slurm account to team")
    ] = None,
    gpu_hour_usd: Annotated[
        str | None, typer.Option(help="$ per owned GPU-hour (overrides --scenario)")
    ] = None,
    scenario: Annotated[
        Path | None, typer.Option(help="TCO scenario whose owned node sets the core price")
    ] = None,
    sacct_json: Annotated[
        Path | None,
        typer.Option(help="read this saved `sacct --json` output instead of running sacct"),
    ] = None,
    prometheus: Annotated[
        str | None,
        typer.Option(help="Prometheus with dcgm-exporter series: each job's GPU active ratio"),
    ] = None,
    ec2_instances: Annotated[
        Path | None,
        typer.Option(
            help="saved `aws ec2 describe-instances` JSON: EC2's own launch and end times "
            "bound each burst instance's lifetime (default: the audit log's)"
        ),
    ] = None,
) -> None:
    """Core and burst GPU-hours and dollars per team (or account, user, job, partition).

    Jobs come from Slurm's accounting (sacct): those run while the daemon was down count too.

    Burst idle comes from the resume program's audit log. Rows add up to the totals to the cent.
    """
    now = int(time.time())
    start = parse_when(since, now, "--since")
    end = now if until is None else parse_when(until, now, "--until")
    if end <= start:
        raise _fail(f"--since {since} is not before --until {until or 'now'}")
    # nothing ran, idled or was billed after now: a window into the future ends now
    end = min(end, now)
    if end <= start:
        raise _fail(f"--since {since} is in the future")
    if plot is not None:
        _check_plot(plot)
    team_map = _teams(teams)
    owned = owned_rate(gpu_hour_usd, scenario)
    side = burst_side(stack, stack_dir)
    log = audit_log or side.audit_log
    lifetimes = _lifetimes(log, start, end)
    life_source = f"the burst audit log {log}"
    ec2_spans, ec2_instances_of = _ec2(ec2_instances, start, end)
    if ec2_instances is not None:
        # EC2's times are what it bills: they replace the audit log's for the nodes it lists
        lifetimes = {**(lifetimes or {}), **ec2_spans}
        life_source = f"EC2's launch and end times ({ec2_instances}) or the audit log {log}"
    core = _core_capacity(side, start, end)
    bad: dict[str, list[str]] = {}
    jobs: list[JobRecord] | JobStream
    try:
        if sacct_json is not None:
            from coreburst.common.textio import TextFileError, read_text

            try:
                text = read_text(sacct_json, "--sacct-json file")
            except TextFileError as exc:
                raise AccountingError(str(exc)) from None
            jobs, source = parse_sacct_json(text, now, bad), f"{sacct_json} (sacct --json)"
        else:
            # read in time slices and counted as they come: memory is one slice's, not the
            # window's (a month of a busy site is millions of runs)
            jobs = JobStream(start, end, now, progress=terminal_progress)
            source = "sacct --json"
        active: dict[JobRecord, float | None] = {}
        measured_notes: list[str] = []
        if prometheus is not None:
            jobs = list(jobs)  # each run is asked of Prometheus: the runs are kept
            active, measured_notes = _measure(prometheus, jobs, side, core, start, end, now)
        ledger = build_ledger(
            jobs,
            since=start,
            until=end,
            now=now,
            by=by.value,
            core_rate=owned.rate,
            burst_nodes=side.nodes,
            lifetimes=lifetimes,
            teams=team_map,
            core=core if isinstance(core, CoreCapacity) else None,
            active=active if prometheus is not None else None,
            lifetime_source=life_source,
        )
    except AccountingError as exc:
        raise _fail(str(exc)) from None
    if isinstance(jobs, JobStream):
        source, bad = jobs.source, jobs.bad
    for node, insts in ec2_instances_of.items():
        if node in ledger.instances:
            ledger.instances[node]["instances"] = insts
    note = bad_records_note(bad)
    if note:
        ledger.notes.append(note)
    ledger.notes.extend(measured_notes)
    if isinstance(core, str):
        ledger.notes.append(f"idle core GPU-hours unknown: {core}")
    if lifetimes is None:
        ledger.notes.append(f"no burst audit log at {log}")
    doc = report_doc(
        ledger,
        by=by.value,
        since=start,
        until=end,
        source=source,
        price_source=owned,
        burst_nodes=side.nodes,
        capacity_source=core.source if isinstance(core, CoreCapacity) else "unknown",
        measured_source=None
        if prometheus is None
        else f"{prometheus} (DCGM_FI_PROF_GR_ENGINE_ACTIVE, dcgm-exporter)",
    )
    if plot is not None:
        from coreburst.cost.plot import render_cost

        try:
            render_cost(doc, plot)
        except OSError as exc:
            raise _fail(f"--plot {plot}: cannot write ({exc.strerror or exc})") from None
    if fmt == Format.json:
        typer.echo(json.dumps(doc, indent=2))
    elif fmt == Format.csv:
        typer.echo(_csv(doc, by.value), nl=False)
    else:
        _table(doc, by.value)
        if plot is not None:
            typer.echo(f"plot: {plot}")
