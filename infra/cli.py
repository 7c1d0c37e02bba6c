"""The ``coreburst`` command.

$ coreburst plan --stack dev
"""

from __future__ import annotations

import typer

from infra.plan import plan

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="coreburst: provisioning, policies and cost guardrails for hybrid GPU fleets.",
)
app.command("plan")(plan)


@app.callback()
def _root() -> None:
    """Keep subcommands even while only one is registered."""


def main() -> None:
    app()
