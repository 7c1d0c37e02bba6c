"""The ``coreburst`` command.

$ coreburst plan --stack dev
$ coreburst tco --scenario infra/tco/examples/team8_85pct.yaml --plot tco.png
"""

from __future__ import annotations

import typer

from guardrails.cli import app as guardrails_app
from infra.onprem.cli import app as onprem_app
from infra.plan import plan
from infra.tco.cli import app as tco_app

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="coreburst: provisioning, policies and cost guardrails for hybrid GPU fleets.",
)
app.command("plan")(plan)
app.add_typer(tco_app)
app.add_typer(
    guardrails_app, name="guardrails", help="Spend limits, idle-GPU reclaim and egress alerts."
)
app.add_typer(onprem_app, name="onprem", help="Configure and validate on-prem DGX nodes.")


@app.callback()
def _root() -> None:
    """Provisioning, policies and cost guardrails for hybrid GPU fleets."""


def main() -> None:
    app()
