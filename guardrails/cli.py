"""``coreburst guardrails ...`` / ``python -m guardrails ...``.

$ python -m guardrails check-config guardrails/examples/guardrails.yaml
$ python -m guardrails once --config guardrails/examples/guardrails.yaml
$ python -m guardrails explain i-0123456789abcdef0 --config guardrails.yaml
$ python -m guardrails check --config guardrails.yaml   (preflight against the account)
$ coreburst guardrails demo   (the sandbox demo; dev setup)
"""

from __future__ import annotations

import os
import sqlite3
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from guardrails.clock import Clock, SystemClock

# Only what `--help` needs is imported above: boto3, botocore, pydantic (the config), structlog,
# prometheus_client, rich and the daemon are imported by the commands that use them
# (tests/unit/guardrails/test_cli_import_time.py holds `--help` to 0.3 s of imports).
if TYPE_CHECKING:
    from rich.console import Console

    from guardrails.config import GuardrailsConfig
    from guardrails.stores.base import StateStore
    from guardrails.stores.sqlite import State


@dataclass
class Runtime:
    """What the commands run on: the clock and the pause hook a cycle calls at its pause
    points (after-intent, after-action, after-enqueue). Production uses the system clock and
    no pause; a test harness (``python -m coreburst.sandbox.guardrails``) injects its own through
    ``main(clock=..., pause=...)``."""

    clock: Clock | None = None
    pause: Callable[[str], None] | None = None

    def now_clock(self) -> Clock:
        return self.clock or SystemClock()


runtime = Runtime()

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    # Plain (click) help and usage errors: typer's rich renderer would be a third of the
    # import time of `--help` (tests/unit/guardrails/test_cli_import_time.py).
    rich_markup_mode=None,
    help="Idle-GPU reclaim, spend limits and egress alerts for the AWS burst fleet.",
)

ConfigOpt = Annotated[
    Path | None,
    typer.Option("--config", "-c", help="YAML config (see guardrails/examples/guardrails.yaml)"),
]


def _stderr_logger(*_: Any) -> Any:
    import structlog

    # sys.stderr as it is when a line is logged, not when logging was configured: a stream
    # swapped in and closed since (a test runner's capture) must not break later logging.
    return structlog.PrintLogger(sys.stderr)


LOG_LEVELS = ("debug", "info", "warning", "error")


def configure_logging(level: str) -> None:
    """JSON log lines on stderr at ``level`` (one of LOG_LEVELS; anything else is refused in
    one line, exit 2, rather than silently logging at info)."""
    import logging

    import structlog

    if level.strip().lower() not in LOG_LEVELS:
        raise fail(f"--log-level {level!r} is not a log level; use one of {', '.join(LOG_LEVELS)}")
    lvl = getattr(logging, level.strip().upper())
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.JSONRenderer(sort_keys=True),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(lvl),
        logger_factory=_stderr_logger,
        cache_logger_on_first_use=False,
    )


def fail(msg: str, code: int = 2) -> typer.Exit:
    typer.echo(f"error: {msg}", err=True)
    return typer.Exit(code)


def load_checked(config: Path | None) -> GuardrailsConfig:
    """The daemon config for a command line (``coreburst core report`` uses it too): a bad
    file ends the command with its one-line error, never a traceback.

        >>> load_checked(Path("guardrails.yaml")).dry_run  # doctest: +SKIP
        True
    """
    from guardrails.config import ConfigError
    from guardrails.configfile import load_config

    try:
        return load_config(config)
    except ConfigError as exc:
        raise fail(str(exc)) from None


def _mode(cfg: GuardrailsConfig) -> str:
    if not cfg.dry_run:
        return "acting (dry_run: false)"
    if "dry_run" in cfg.model_fields_set:
        return "dry-run (dry_run: true)"
    return (
        "dry-run (dry_run not set; to act, write dry_run: false in the file or set "
        "COREBURST_DRY_RUN=false)"
    )


def _blocker(path: Path) -> Path | None:
    """A directory above ``path`` that is in fact a file (so nothing can be created there)."""
    return next((a for a in path.parents if a.exists() and not a.is_dir()), None)


def _path_problem(key: str, path: Path, exc: BaseException) -> str:
    """One line for a state or audit path the daemon cannot use: which path, why, the fix."""
    parent = path.parent
    if path.is_dir():
        return (
            f"{key} {path} is a directory; set {key} to a file path "
            f"(e.g. {path / path.name if path.suffix else path / 'guardrails.sqlite'})"
        )
    blocker = _blocker(path)
    if blocker is not None:
        return f"{key} {path}: {blocker} is a file, not a directory; set {key} elsewhere"
    if isinstance(exc, PermissionError) or (
        isinstance(exc, sqlite3.OperationalError)
        and ("readonly" in str(exc) or "unable to open" in str(exc))
    ):
        where = parent if parent.exists() and not os.access(parent, os.W_OK) else path
        return (
            f"{key} {path}: {where} is not writable by this user; make it writable "
            f"(chown/chmod) or set {key} to a writable path"
        )
    if isinstance(exc, sqlite3.DatabaseError):
        return (
            f"{key} {path} is not a usable SQLite database ({exc}); move it aside to start "
            "a new one, or restore it from a backup"
        )
    why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    return f"{key} {path}: cannot open ({why}); fix the path or set {key} elsewhere"


def open_state(cfg: GuardrailsConfig) -> State:
    """The SQLite state, checked before anything acts: a directory, a read-only or missing
    parent, or a corrupt file is one line (exit 2), not a traceback (and not a restart loop
    under systemd, which restarts on anything but exit 2)."""
    from guardrails.stores.sqlite import State

    path = cfg.state.path
    st: State | None = None
    try:
        st = State(path)
        check = st.db.execute("PRAGMA quick_check").fetchone()[0]
        if check != "ok":
            raise sqlite3.DatabaseError(f"quick_check: {check}")
        return st
    except (sqlite3.Error, OSError) as exc:
        if st is not None:
            st.close()
        raise fail(_path_problem("state.path", path, exc)) from None


def open_store(cfg: GuardrailsConfig, table: str | None = None) -> StateStore:
    """The daemon's state for a reader (``coreburst core report``): the SQLite file at
    ``state.path`` (:func:`open_state`), or with ``table`` the DynamoDB state table of the
    scheduled Lambda (the ``Guardrails`` component's ``state_table``; the Lambda's
    ``COREBURST_STATE_TABLE``), in the SDK's region (``AWS_REGION``, the profile) else the
    config's first region, through ``aws.endpoint_url`` when set. A missing table, no
    credentials or an unreachable endpoint is one line (exit 2)."""
    if table is None:
        return open_state(cfg)
    import boto3
    from botocore.config import Config
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

    from guardrails.stores.dynamodb import DynamoState

    session = boto3.session.Session()
    region = session.region_name or cfg.regions[0]
    ddb = session.resource(
        "dynamodb",
        region_name=region,
        endpoint_url=cfg.aws.endpoint_url,
        config=Config(
            connect_timeout=cfg.aws.connect_timeout_s,
            read_timeout=cfg.aws.read_timeout_s,
            retries={"max_attempts": cfg.aws.max_attempts, "mode": "standard"},
        ),
    )
    where = f"state table {table!r} ({region})"
    try:
        t = ddb.Table(table)
        t.load()  # DescribeTable: the table is there before anything is read from it
    except ClientError as exc:
        err = exc.response.get("Error", {})
        if err.get("Code") == "ResourceNotFoundException":
            raise fail(
                f"{where} does not exist; give the table the guardrails stack created (its "
                "state_table output) and its region (AWS_REGION)"
            ) from None
        raise fail(
            f"{where}: AWS refused DescribeTable: {err.get('Code')}: {err.get('Message')}"
        ) from None
    except NoCredentialsError:
        raise fail(f"{where}: no AWS credentials; set AWS_PROFILE or AWS keys") from None
    except BotoCoreError as exc:
        raise fail(f"{where}: {' '.join(str(exc).split())}") from None
    return DynamoState(t, snapshot_retention=cfg.state.snapshot_retention)


def check_audit_log(cfg: GuardrailsConfig) -> None:
    """The audit log can be created and appended to (the daemon opens it the same way)."""
    path = cfg.state.audit_log
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a"):
            pass
    except OSError as exc:
        raise fail(_path_problem("state.audit_log", path, exc)) from None


def make_console() -> Any:
    """coreburst.common.console.console, imported when output is printed (not for --help)."""
    from coreburst.common.console import console

    return console()


@contextmanager
def _daemon(cfg: GuardrailsConfig, clock: Clock | None = None) -> Iterator[Any]:
    from guardrails.adapters.aws import Aws
    from guardrails.adapters.slack import webhook_url
    from guardrails.config import ConfigError
    from guardrails.daemon import Daemon

    try:
        url = webhook_url(cfg.slack)
    except ConfigError as exc:
        raise fail(str(exc)) from None
    aws = Aws(cfg.aws)
    # Nothing is written (state directory, audit log, database) before the credentials are
    # known: a first run without them must leave the machine as it found it.
    if aws.session.get_credentials() is None:
        raise fail(
            "no AWS credentials found: set AWS_PROFILE, or AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY, or run where an instance or Lambda role provides them "
            "(nothing was written)"
        )
    check_audit_log(cfg)
    state = open_state(cfg)
    try:
        d = Daemon(
            cfg,
            aws,
            state,
            clock=clock or runtime.now_clock(),
            webhook_url=url,
            pause=runtime.pause,
        )
    except BaseException:
        state.close()
        raise
    try:
        yield d
    finally:
        d.close()
        state.close()


def _cycle(d: Any) -> Any:
    from botocore.exceptions import BotoCoreError, ClientError

    from guardrails.adapters.aws import AwsUnreachableError

    try:
        return d.run_cycle()
    except AwsUnreachableError as exc:
        raise fail(str(exc)) from None
    except ClientError as exc:
        err = exc.response.get("Error", {})
        raise fail(
            f"AWS refused {exc.operation_name}: {err.get('Code')}: {err.get('Message')}"
        ) from None
    except BotoCoreError as exc:
        raise fail(f"AWS error: {exc}") from None


def print_report(r: Any, console: Console) -> None:
    console.print(
        f"[bold]cycle {r.at.astimezone(UTC):%Y-%m-%d %H:%M:%S}Z[/]: {r.nodes} nodes "
        + ", ".join(f"{k} {v}" for k, v in sorted(r.states.items()))
    )
    for d in r.decisions:
        if d.step != "none" or d.state == "unknown":
            console.print(f"  {d.instance_id}: {d.state} → {d.step} ({d.action}): {d.reason}")
    for a in r.actions:
        console.print(f"  [red]action[/] {a}")
    for scope, s in r.spend.items():
        console.print(
            f"  spend {scope}: ${s['burn_usd_per_hour']:,.2f}/h, today ${s['today_usd']:,.2f}, "
            f"MTD ${s['month_to_date_usd']:,.2f}, projected month ${s['projected_month_usd']:,.2f}"
            + "".join(f"; {line}" for line in _spend_notes(s))
        )
    if r.egress:
        console.print(
            f"  egress: projected ${r.egress['projected_day_usd']:,.2f}/day"
            + (f" [yellow]ALERT[/] {r.egress['alert']}" if r.egress.get("alert") else "")
        )
    for e in r.errors:
        console.print(f"  [yellow]error[/] {e}")


def _when(stamp: Any) -> str:
    """An ISO time from the state as a person reads it: UTC to the second (``never``: none)."""
    if not stamp:
        return "never"
    try:
        t = datetime.fromisoformat(str(stamp))
    except ValueError:
        return str(stamp)
    return f"{t.astimezone(UTC):%Y-%m-%d %H:%M:%S}Z" if t.tzinfo else f"{t:%Y-%m-%d %H:%M:%S}"


def _spend_notes(s: dict[str, Any]) -> list[str]:
    """What a scope's totals leave out and when its limits are reached at the current burn
    (from a cycle report's or ``last_cycle``'s spend entry; older entries lack both)."""
    notes = []
    unpriced = s.get("unpriced_items", s.get("unpriced_instances"))  # older entries: instances
    if unpriced:
        kinds = ", ".join(f"{c} {k}" for k, c in sorted((s.get("unpriced") or {}).items()))
        notes.append(f"excludes {unpriced} unpriced item(s): {kinds}")
    for kind in ("daily", "monthly"):
        if s.get(f"{kind}_limit_at"):
            notes.append(f"{kind} limit reached at {s[f'{kind}_limit_at']} at the current burn")
    if s.get("core_month_to_date"):  # a scope with slurm_accounts: the owned core beside it
        from guardrails.messages import core_spend_text

        notes.append(core_spend_text(s["core_month_to_date"]))
    return notes


@app.command("check-config")
def check_config(
    path: Annotated[Path | None, typer.Argument(help="YAML config to validate")] = None,
    config: ConfigOpt = None,
) -> None:
    """Validate a config file and exit (0 = valid, 2 = invalid)."""
    path = path or config
    if path is None:
        raise fail("give the config file: check-config PATH (or --config PATH)")
    cfg = load_checked(path)
    typer.echo(
        f"ok: {path}: regions {', '.join(cfg.regions)}; {len(cfg.spend.scopes)} spend scope(s); "
        f"rules {', '.join(cfg.rules) if cfg.rules is not None else 'all'}; {_mode(cfg)}"
    )


@app.command()
def check(
    config: ConfigOpt = None,
    fmt: Annotated[str, typer.Option("--format", help="text (one line a check) or json.")] = "text",
    strict: Annotated[
        bool, typer.Option(help="Exit 1 on ? (a question the credentials may not ask) too.")
    ] = False,
) -> None:
    """Preflight with the daemon's config and credentials, read-only: the idle rule's
    CloudWatch metric is published, the spot-interruption queue and its EventBridge rules
    exist; one line a check (✔ ✘ ?) with the fix; exit 1 on ✘ (and on ? with --strict).

    $ coreburst guardrails check --config guardrails.yaml"""
    if fmt not in ("text", "json"):
        raise fail(f"--format {fmt!r}: use text or json")
    cfg = load_checked(config)
    from guardrails.check import run_checks
    from guardrails.preflight import exit_code, render_json, render_text

    results = run_checks(cfg)
    if fmt == "json":
        typer.echo(render_json(results, strict=strict), nl=False)
    else:
        typer.echo(render_text(results), nl=False)
    raise typer.Exit(exit_code(results, strict))


@app.command()
def once(
    config: ConfigOpt = None,
    log_level: Annotated[str, typer.Option(help="debug, info, warning")] = "warning",
) -> None:
    """Run one cycle and print what it saw and did.

    Exit status: 0 when every rule ran, 1 when one failed (its error is printed; the others
    still ran), 2 for bad input (config, credentials)."""

    configure_logging(log_level)
    cfg = load_checked(config)
    with _daemon(cfg) as d:
        report = _cycle(d)
        # soft_wrap: a line longer than the terminal (or any line when stdout is a pipe or
        # a log) is not broken mid-sentence.
        print_report(report, make_console())
    if report.errors:
        raise typer.Exit(1)


@app.command()
def run(
    config: ConfigOpt = None,
    max_cycles: Annotated[int, typer.Option(help="stop after N cycles (0 = forever)")] = 0,
    log_level: Annotated[str, typer.Option(help="debug, info, warning")] = "info",
) -> None:
    """Run the daemon loop: a cycle every `interval`, reloading the config file as it changes."""
    import signal
    import threading

    import structlog

    from guardrails.loop import LoopStopError, run_loop, serve_metrics, stop_handler

    configure_logging(log_level)
    log = structlog.get_logger("guardrails")
    cfg = load_checked(config)
    stop = threading.Event()
    handler = stop_handler(stop, log)
    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
    with _daemon(cfg) as d:
        try:
            serve_metrics(d, log)
            run_loop(d, config, stop, max_cycles, log)
        except LoopStopError as exc:
            raise fail(str(exc)) from None


@app.command()
def status(config: ConfigOpt = None) -> None:
    """Marks, spend per scope, egress, blind nodes and the outbox, from the state file."""
    from rich.markup import escape
    from rich.table import Table

    cfg = load_checked(config)
    if not cfg.state.path.exists():
        if _blocker(cfg.state.path) is not None:
            raise fail(_path_problem("state.path", cfg.state.path, NotADirectoryError()))
        raise fail(f"no state at {cfg.state.path}: run `once` or `run` first", 1)
    st = open_state(cfg)
    console = make_console()
    last = st.get("last_cycle", {})
    states = ", ".join(f"{n} {k}" for k, n in sorted(last.get("states", {}).items()))
    console.print(
        f"[bold]last cycle[/] {_when(last.get('at'))}: {last.get('nodes', 0)} nodes"
        + (f" ({states})" if states else "")
    )
    t = Table("instance", "marked at", "action", "reason", title="Idle marks")
    for r in st.marks().values():
        t.add_row(
            r["instance_id"],
            _when(r["marked_at"]),
            r["action"] + (" (dry-run)" if r["dry_run"] else ""),
            r["reason"],
        )
    console.print(t)
    t = Table("scope", "$/h", "today", "month to date", "projected month", "notes", title="Spend")
    for scope, s in last.get("spend", {}).items():
        t.add_row(
            scope,
            f"{s['burn_usd_per_hour']:,.2f}",
            f"{s['today_usd']:,.2f}",
            f"{s['month_to_date_usd']:,.2f}",
            f"{s['projected_month_usd']:,.2f}",
            escape("; ".join(_spend_notes(s))),
        )
    console.print(t)
    eg = last.get("egress") or {}
    if eg:
        console.print(
            f"[bold]egress[/] projected ${eg['projected_day_usd']:,.2f}/day; top: "
            + ", ".join(f"{k} {gb:,.1f} GB" for k, gb in eg.get("top_talkers", []))
        )
    blind = last.get("blind", [])
    console.print(f"[bold]blind nodes[/] {len(blind)}")
    for b in blind:
        console.print(f"  {b['instance_id']}: {b['reason']}")
    rows = st.outbox_rows()
    by_status = Counter(r["status"] for r in rows)
    console.print(
        f"[bold]outbox[/] {by_status['pending']} pending, {by_status['sent']} sent, "
        f"{by_status['failed']} failed (dead letters: kept, not retried)"
    )
    for r in [r for r in rows if r["status"] == "failed"][-10:]:
        console.print(
            f"  [red]failed[/] {escape(r['dedupe_key'])}: {escape(r['last_error'] or '')}"
        )
    for a in st.actions()[-10:]:
        console.print(
            f"  action {a['kind']} {a['instance_id']} {a['status']} {_when(a['updated_at'])}"
        )
    st.close()


@app.command()
def explain(
    instance_id: Annotated[str, typer.Argument(help="e.g. i-0123456789abcdef0")],
    config: ConfigOpt = None,
) -> None:
    """Why a node is (or is not) idle, with the numbers behind the decision. Changes nothing."""
    from rich.table import Table

    from guardrails.adapters.aws import AwsUnreachableError
    from guardrails.idle import ROLLUP_DEVICE, decide
    from guardrails.messages import owner
    from guardrails.rules.idle_reclaim import idle_params, per_device_stats, utilization
    from guardrails.timefmt import parse_iso

    configure_logging("warning")
    if not instance_id.startswith("i-"):
        raise fail(f"{instance_id!r} is not an instance id (i-...)")
    cfg = load_checked(config)
    with _daemon(cfg) as d:
        try:
            nodes = [n for n in d.observe() if n.instance_id == instance_id]
        except AwsUnreachableError as exc:
            raise fail(str(exc)) from None
        if not nodes:
            raise fail(
                f"{instance_id} is not a running instance of a watched type in "
                f"{', '.join(cfg.regions)}",
                1,
            )
        n = nodes[0]
        util = utilization(d.aws, cfg, [n], d.clock.now(), heartbeats="all", partial_idle=True)[
            n.instance_id
        ]
        row = d.state.marks().get(n.instance_id)
        dec = decide(
            n, util, parse_iso(row["marked_at"]) if row else None, d.clock.now(), idle_params(cfg)
        )
        c = make_console()
        c.print(
            f"[bold]{n.instance_id}[/] {n.instance_type} {n.market} {n.region} "
            f"asg={n.asg or '-'} price={d.prices.hourly(n)} $/h "
            f"owner: {owner(n, cfg.reclaim.owner_tags)}"
        )
        c.print(f"state: [bold]{dec.state}[/]; next step: {dec.step} ({dec.action})")
        c.print(f"utilization: {util.reason}")
        c.print(f"decision: {dec.reason}")
        rows = list(util.devices)
        if any(s.device == ROLLUP_DEVICE for s in rows):
            # decided from the per-instance rollup; show every accelerator's own series too
            rows += per_device_stats(d.aws, cfg, n, d.clock.now())
        t = Table(
            "device",
            "max %",
            "datapoints",
            "first",
            "last",
            "largest gap s",
            title=f"window {cfg.idle.window}, threshold {cfg.idle.threshold_percent}%",
        )
        for s in rows:
            t.add_row(
                s.device,
                "-" if s.max_value is None else f"{s.max_value:.1f}",
                str(s.datapoints),
                str(s.first or "-"),
                str(s.last or "-"),
                "-" if s.largest_gap_s is None else f"{s.largest_gap_s:.0f}",
            )
        c.print(t)


@app.command("org-scan")
def org_scan(
    config: ConfigOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="one JSON object per line")] = False,
) -> None:
    """Read-only scan of every account in `org`: GPU nodes, idle, blind and $/h per account and
    region. Assumes `org.role_name` in each account; changes, tags and alerts nothing. An
    account that fails (role not assumable, region disabled) is reported; the rest go on.
    Exits 1 when any account failed.

    $ coreburst guardrails org-scan --config guardrails.yaml
    """
    import json

    import boto3
    from botocore.exceptions import BotoCoreError, ClientError
    from rich.markup import escape
    from rich.table import Table

    from coreburst.common.catalog import load_catalog
    from guardrails import org
    from guardrails.adapters.aws import Aws

    configure_logging("warning")
    cfg = load_checked(config)
    if cfg.org is None:
        raise fail("org is not set in the config: add org: {accounts: [...]} or {discover: true}")
    oc = cfg.org
    home = boto3.session.Session()
    home_aws = Aws(cfg.aws, home)
    catalog = load_catalog()
    clock = runtime.now_clock()
    try:
        sts = home_aws.client("sts", cfg.regions[0])
        home_account = str(sts.get_caller_identity()["Account"])
        found = (
            org.discover_accounts(
                home_aws.client("organizations", "us-east-1"), oc.role_name, home_account
            )
            if oc.discover
            else []
        )
    except (ClientError, BotoCoreError) as exc:
        raise fail(f"cannot list the accounts to scan: {org.describe_error(exc)}") from None
    targets = org.targets(oc.accounts, found, oc.role_name, home_account)

    def session_for(t: org.AccountTarget) -> boto3.session.Session:
        return home if t.role_arn is None else org.assume_role_session(sts, t)

    def scan_one(sess: boto3.session.Session, t: org.AccountTarget, region: str) -> list[Any]:
        return org.scan_region(Aws(cfg.aws, sess), cfg, region, catalog, clock.now())

    results = org.scan(targets, cfg.regions, session_for, scan_one, oc.max_concurrency)
    rows = org.summarize(results)
    names = {t.account_id: t.name for t in targets}
    if as_json:
        for row in rows:
            typer.echo(json.dumps({**row, "name": names.get(row["account"], "")}, sort_keys=True))
    else:
        t = Table(
            "account",
            "name",
            "region",
            "nodes",
            "idle",
            "blind",
            "$/h",
            "idle $/h",
            "error",
            title=f"org-scan: {len(targets)} account(s) x {len(cfg.regions)} region(s), read-only",
        )
        for row in rows:
            t.add_row(
                row["account"],
                names.get(row["account"], ""),
                row["region"],
                str(row["nodes"]),
                str(row["idle"]),
                str(row["blind"]),
                f"{row['usd_per_hour']:,.2f}",
                f"{row['idle_usd_per_hour']:,.2f}",
                escape(row["error"] or ""),
            )
        make_console().print(t)
    if any(row["error"] for row in rows):
        raise typer.Exit(1)


def main(*, clock: Clock | None = None, pause: Callable[[str], None] | None = None) -> None:
    """Run the CLI. ``clock`` and ``pause`` replace the runtime's (test harnesses only;
    ``python -m guardrails`` passes neither: the system clock, no pause)."""
    if clock is not None:
        runtime.clock = clock
    if pause is not None:
        runtime.pause = pause
    app()
