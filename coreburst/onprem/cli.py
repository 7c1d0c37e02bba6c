"""``coreburst onprem``: configure and accept on-prem DGX nodes and the InfiniBand fabric.

$ coreburst onprem render-inventory ansible/fleet.example.yml -o inventory/hosts.yml
$ coreburst onprem apply --fleet ansible/fleet.example.yml --tags os,driver --check
$ coreburst onprem validate --inventory inventory/hosts.yml --limit dgx_nodes --report out.json

Exit codes: 0 ok, 1 task or validation failures, 2 bad input or unreachable host.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Annotated

import typer
import yaml
from rich.console import Console

from coreburst.common.console import console as make_console
from coreburst.onprem.fleet import FleetError, load_fleet, render_inventory, write_inventory
from coreburst.onprem.runner import EXIT_BAD_INPUT, Kind, RunOutcome, run_playbook, summary_table

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Configure (Ansible via ansible-runner) and validate on-prem DGX + InfiniBand nodes.",
)

FleetOpt = Annotated[
    Path | None, typer.Option("--fleet", "-f", help="Fleet YAML (rendered to an inventory).")
]
InventoryOpt = Annotated[
    Path | None, typer.Option("--inventory", "-i", help="Ansible YAML inventory file or dir.")
]
LimitOpt = Annotated[str | None, typer.Option("--limit", "-l", help="Hosts or groups to run on.")]
TagsOpt = Annotated[str | None, typer.Option("--tags", "-t", help="Only these layers (a,b).")]
ReportOpt = Annotated[
    Path | None, typer.Option("--report", help="Write the JSON report here ('-' for stdout).")
]
ExtraOpt = Annotated[
    list[str] | None, typer.Option("--extra-var", "-e", help="key=value passed to Ansible.")
]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No live progress display.")]


def _fail(message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(EXIT_BAD_INPUT)


def _extravars(pairs: list[str] | None) -> dict[str, object]:
    out: dict[str, object] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise _fail(f"--extra-var {pair!r} is not key=value")
        out[key] = yaml.safe_load(value) if value else ""
    return out


def _run(
    kind: Kind,
    *,
    fleet: Path | None,
    inventory: Path | None,
    limit: str | None,
    tags: str | None,
    extra: list[str] | None,
    report: Path | None,
    quiet: bool,
    check: bool = False,
) -> None:
    if (fleet is None) == (inventory is None):
        raise _fail("give exactly one of --fleet FILE or --inventory PATH")
    console = make_console(stderr=True)
    extravars = _extravars(extra)
    try:
        with tempfile.TemporaryDirectory(prefix="coreburst-inv-") as tmp:
            inv = inventory
            if fleet is not None:
                inv = write_inventory(load_fleet(fleet), Path(tmp) / "hosts.yml")
            assert inv is not None
            if not inv.exists():
                raise FleetError(f"{inv}: no such inventory")
            outcome = run_playbook(
                kind,
                inv,
                limit=limit,
                tags=tags,
                extravars=extravars,
                check=check,
                console=None if quiet else console,
            )
    except FleetError as exc:
        raise _fail(str(exc)) from None
    _finish(outcome, report, console)


def _finish(outcome: RunOutcome, report: Path | None, console: Console) -> None:
    if outcome.hosts:
        console.print(summary_table(outcome))
    if report is not None:
        if str(report) == "-":
            sys.stdout.write(outcome.to_json() + "\n")
        else:
            report.parent.mkdir(parents=True, exist_ok=True)
            report.write_text(outcome.to_json() + "\n")
    if outcome.error:
        typer.echo(f"error: {outcome.error}", err=True)
    raise typer.Exit(outcome.exit_code)


@app.command("render-inventory")
def render_inventory_cmd(
    fleet: Annotated[Path, typer.Argument(help="Fleet YAML file.")],
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write here instead of stdout.")
    ] = None,
) -> None:
    """Render an Ansible inventory from a fleet file.

    $ coreburst onprem render-inventory ansible/fleet.example.yml -o /tmp/hosts.yml
    """
    try:
        model = load_fleet(fleet)
        if output is not None:
            write_inventory(model, output)
    except FleetError as exc:
        raise _fail(str(exc)) from None
    if output is None:
        sys.stdout.write("---\n" + yaml.safe_dump(render_inventory(model), sort_keys=False))


@app.command()
def apply(
    *,
    fleet: FleetOpt = None,
    inventory: InventoryOpt = None,
    limit: LimitOpt = None,
    tags: TagsOpt = None,
    extra_var: ExtraOpt = None,
    report: ReportOpt = None,
    quiet: QuietOpt = False,
    check: Annotated[bool, typer.Option("--check", help="Ansible check mode (dry run).")] = False,
) -> None:
    """Configure nodes with ansible/site.yml.

    $ coreburst onprem apply --fleet ansible/fleet.example.yml --limit dgx_nodes --check
    """
    _run(
        "apply",
        fleet=fleet,
        inventory=inventory,
        limit=limit,
        tags=tags,
        extra=extra_var,
        report=report,
        quiet=quiet,
        check=check,
    )


@app.command()
def validate(
    *,
    fleet: FleetOpt = None,
    inventory: InventoryOpt = None,
    limit: LimitOpt = None,
    tags: TagsOpt = None,
    extra_var: ExtraOpt = None,
    report: ReportOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Run the acceptance checks of ansible/validate.yml; exit 1 if any check fails.

    $ coreburst onprem validate --fleet ansible/fleet.example.yml --tags gpu,ib --report r.json
    """
    _run(
        "validate",
        fleet=fleet,
        inventory=inventory,
        limit=limit,
        tags=tags,
        extra=extra_var,
        report=report,
        quiet=quiet,
    )
