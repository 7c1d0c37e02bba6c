"""The ``coreburst`` command: one entry point over the products, each loaded only when used.

$ coreburst plan --stack dev
$ coreburst tco --scenario coreburst/tco/examples/team8_85pct.yaml --plot tco.png
$ coreburst guardrails once --config guardrails.yaml
$ coreburst onprem validate --inventory fleet.yaml
$ coreburst core report --config guardrails.yaml --since 7d --plot core.png
$ coreburst cost report --since 30d --scenario coreburst/tco/examples/team8_85pct.yaml
$ coreburst prices import AmazonEC2-us-east-1.json --region us-east-1
$ coreburst gitops stacks --format github-matrix
$ coreburst --version

``coreburst guardrails --help`` imports the guardrails CLI and nothing of Pulumi, Ansible or
matplotlib (tests/unit/test_architecture.py measures it): a command's module is imported when
that command runs or shows its own help, never to list the others.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from typing import Annotated, Any

import typer
import typer.main
from typer import _click
from typer.core import TyperCommand, TyperGroup

# command -> (module, attribute, one-line help). The attribute is a Typer app (a group) or a
# function (one command). The help here is what `coreburst --help` lists without importing.
PRODUCTS: dict[str, tuple[str, str, str]] = {
    "plan": ("coreburst.plan", "plan", "Monthly cost and policy verdicts for a stack, offline."),
    "tco": (
        "coreburst.tco.cli",
        "tco",
        "Own, rent or both: total cost of ownership for a GPU fleet.",
    ),
    "guardrails": (
        "guardrails.cli",
        "app",
        "Spend limits, idle-GPU reclaim and egress alerts.",
    ),
    "onprem": ("coreburst.onprem.cli", "app", "Configure and validate on-prem DGX nodes."),
    "burst": (
        "coreburst.burst.cli",
        "app",
        "Overflow the on-prem Slurm queue to AWS: Slurm config and power programs.",
    ),
    "core": (
        "coreburst.core",
        "app",
        "On-prem core GPUs: allocated versus measured GPU-hours per team, and their price.",
    ),
    "cost": (
        "coreburst.cost.report",
        "app",
        "GPU cost per team, user or job across core and burst, from Slurm accounting.",
    ),
    "gitops": (
        "coreburst.gitops",
        "app",
        "The stacks the GitHub workflows run, and the deploy role's IAM policy.",
    ),
    "prices": (
        "coreburst.common.prices_import",
        "app",
        "Catalog prices: diff and import an AWS Price List offer file.",
    ),
}
# Commands added to a product's group from elsewhere: the demo lives in the sandbox (dev setup),
# not in the guardrails package that ships.
EXTRAS: dict[str, dict[str, tuple[str, str, str]]] = {
    "guardrails": {
        "demo": (
            "coreburst.sandbox.demo",
            "demo",
            "Run the daemon against a local AWS emulator and Slack receiver (dev setup).",
        ),
    },
    "burst": {
        "demo": (
            "coreburst.sandbox.burst_demo",
            "demo",
            "Overflow a local Slurm's full core to EC2 on the local emulator and back "
            "(dev setup; needs root and Slurm).",
        ),
    },
}


def _load(name: str, module: str, attr: str) -> _click.Command:
    try:
        obj: Any = getattr(importlib.import_module(module), attr)
    except ModuleNotFoundError as exc:
        raise _click.exceptions.UsageError(
            f"`{name}` needs the module {exc.name!r}, which is not installed here; "
            "`make setup` installs every part"
        ) from None
    if isinstance(obj, typer.Typer):
        cmd = typer.main.get_command(obj)
    else:
        single = typer.Typer(add_completion=False)
        single.command(name)(obj)
        cmd = typer.main.get_command(single)
    cmd.name = name
    return cmd


class LazyGroup(TyperGroup):
    """A group whose subcommands are imported when one runs; its help lists them from a table."""

    def __init__(self, *, lazy: dict[str, tuple[str, str, str]] | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.lazy = PRODUCTS if lazy is None else lazy

    def list_commands(self, ctx: _click.Context) -> list[str]:
        return sorted(set(self.commands) | set(self.lazy))

    def get_command(self, ctx: _click.Context, cmd_name: str) -> _click.Command | None:
        if cmd_name in self.commands:
            return self.commands[cmd_name]
        if cmd_name in self.lazy:  # listed in help: a stand-in that carries the short help
            return TyperCommand(name=cmd_name, help=self.lazy[cmd_name][2])
        return None

    def resolve_command(
        self, ctx: _click.Context, args: list[str]
    ) -> tuple[str | None, _click.Command | None, list[str]]:
        if args and args[0] in self.lazy and args[0] not in self.commands:
            self.commands[args[0]] = self._load(args[0])
        return super().resolve_command(ctx, args)

    def _load(self, name: str) -> _click.Command:
        module, attr, _ = self.lazy[name]
        cmd = _load(name, module, attr)
        extras = EXTRAS.get(name)
        if extras and isinstance(cmd, TyperGroup):
            cmd = LazyGroup(
                lazy=extras,
                name=name,
                commands=cmd.commands,
                help=cmd.help,
                params=cmd.params,
                callback=cmd.callback,
                no_args_is_help=cmd.no_args_is_help,
                rich_markup_mode=cmd.rich_markup_mode,
                context_settings=cmd.context_settings,
            )
        return cmd


app = typer.Typer(
    cls=LazyGroup,
    add_completion=False,
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)


DISTRIBUTION = "coreburst"


def version() -> str:
    """The installed distribution's version (the wheel's metadata, not a copy in the code)."""
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        # Imported from a checkout that was never installed: no metadata to read.
        return "unknown (not installed: run make setup, or pip install the wheel)"


def _show_version(value: bool) -> None:
    if value:
        typer.echo(f"coreburst {version()}")
        raise typer.Exit()


@app.callback()
def _root(
    _version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=_show_version,
            is_eager=True,
            help="Print the installed coreburst version and exit.",
        ),
    ] = False,
) -> None:
    """coreburst: provisioning, policies and cost guardrails for hybrid GPU fleets."""


def main() -> None:
    app(prog_name="coreburst")
