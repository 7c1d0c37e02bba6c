"""``coreburst gitops``: what the GitHub workflows need to know about the repository's stacks.

$ coreburst gitops stacks                              # a table: stack, region, policy config
$ coreburst gitops stacks --format github-matrix       # one line of JSON for a job matrix
$ coreburst gitops deploy-policy --out .github/iam     # the deploy role's policies, one file each
$ coreburst gitops deploy-policy --check .github/iam   # exit 1 if those files are out of date

The stacks are the ``Pulumi.<stack>.yaml`` files of a directory (``--stack-dir``, the current
one by default, as ``pulumi`` finds them); each names its region as ``aws:region``. The
workflows (``.github/workflows/``) start with a job that runs ``stacks --format github-matrix``
and run one preview or deploy per entry: adding a stack file adds it to GitOps, with no
workflow to edit. Listing the stacks needs only the base install (no Pulumi); the deploy
policy needs the infra extra.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml

from coreburst.common.textio import read_text

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="The stacks the GitHub workflows run, and the deploy role's IAM policy.",
)

STACK_GLOB = "Pulumi.*.yaml"
# Pulumi's own rule for a stack name (letters, digits, "-", "_", "."); it also keeps a name
# safe wherever a workflow interpolates it (environment names, session names, file paths).
_STACK_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
# <area>-<direction>-<number>, lower case (us-east-1, us-gov-west-1, cn-north-1). The program
# checks a region against botocore's partitions (infra/config.py); this install has no botocore,
# and this check only has to keep a malformed value out of the matrix.
_REGION = re.compile(r"^[a-z]{2}(-[a-z]+)+-[0-9]+$")
POLICY_CONFIG_DIR = Path("policies") / "config"


class GitOpsError(ValueError):
    """A stack file the workflows cannot use; printed as one line."""


@dataclass(frozen=True)
class Stack:
    """One ``Pulumi.<name>.yaml``: its stack name, region, and policy pack config (the path
    ``pulumi --policy-pack-config`` is given, relative to the stack directory; empty when the
    stack has none and every policy runs at its defaults)."""

    name: str
    region: str
    policy_config: str = ""


def list_stacks(root: Path) -> list[Stack]:
    """Every stack file in ``root``, by name; GitOpsError (one line) on a file the workflows
    could not run, or when there is none.

    >>> [s.name for s in list_stacks(Path("."))]          # doctest: +SKIP
    ['burst', 'dev', 'prod']
    """
    paths = sorted(root.glob(STACK_GLOB))
    if not paths:
        raise GitOpsError(
            f"no {STACK_GLOB} in {root}: run from the directory holding the stack files "
            "or pass --stack-dir"
        )
    return [_stack(path, root) for path in paths]


def _stack(path: Path, root: Path) -> Stack:
    name = path.name.removeprefix("Pulumi.").removesuffix(".yaml")
    if not _STACK_NAME.fullmatch(name):
        raise GitOpsError(
            f"{path.name}: {name!r} is not a Pulumi stack name (letters, digits, '-', '_', '.'); "
            "rename the file"
        )
    text = read_text(path, "stack file", GitOpsError)
    try:
        doc = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise GitOpsError(f"{path.name}: not valid YAML ({' '.join(str(exc).split())})") from None
    config = doc.get("config") if isinstance(doc, dict) else None
    region = config.get("aws:region") if isinstance(config, dict) else None
    if region is None:
        raise GitOpsError(
            f"{path.name}: no aws:region; add `aws:region: <region>` under config: "
            "(the workflows deploy each stack to the region its file names)"
        )
    if not isinstance(region, str) or not _REGION.fullmatch(region):
        raise GitOpsError(f"{path.name}: aws:region {region!r} is not an AWS region (us-east-1)")
    policy = POLICY_CONFIG_DIR / f"{name}.json"
    return Stack(name, region, policy.as_posix() if (root / policy).is_file() else "")


def github_matrix(stacks: list[Stack]) -> dict[str, Any]:
    """A job matrix for ``strategy.matrix: ${{ fromJSON(...) }}``: one ``include`` entry per
    stack, in name order (the order GitHub starts them in, one at a time for the deploy).

    >>> github_matrix([Stack("dev", "us-east-1", "policies/config/dev.json")])
    {'include': [{'stack': 'dev', 'region': 'us-east-1', 'policyConfig': 'policies/config/dev.json'}]}
    """  # noqa: E501
    return {
        "include": [
            {"stack": s.name, "region": s.region, "policyConfig": s.policy_config} for s in stacks
        ]
    }


class Format(StrEnum):
    table = "table"
    json = "json"
    github_matrix = "github-matrix"


StackDirOpt = Annotated[
    Path, typer.Option("--stack-dir", help="Directory holding the Pulumi.<stack>.yaml files.")
]
HERE = Path(".")


def _fail(msg: str) -> typer.Exit:
    typer.echo(f"error: {msg}", err=True)
    return typer.Exit(2)


@app.command("stacks")
def stacks(
    stack_dir: StackDirOpt = HERE,
    fmt: Annotated[
        Format,
        typer.Option(
            "--format",
            help="table for people; json; github-matrix: one line for $GITHUB_OUTPUT.",
        ),
    ] = Format.table,
) -> None:
    """List the stacks (Pulumi.<stack>.yaml) with the region each deploys to."""
    try:
        found = list_stacks(stack_dir)
    except GitOpsError as exc:
        raise _fail(str(exc)) from None
    if fmt is Format.github_matrix:
        # One line, no spaces to quote: `echo "matrix=$(...)" >> "$GITHUB_OUTPUT"`.
        typer.echo(json.dumps(github_matrix(found), separators=(",", ":")))
        return
    if fmt is Format.json:
        typer.echo(json.dumps(github_matrix(found)["include"], indent=2))
        return
    from rich.table import Table

    from coreburst.common.console import console

    table = Table("stack", "region", "policy pack config", box=None, pad_edge=False)
    for s in found:
        table.add_row(s.name, s.region, s.policy_config or "none (policy defaults)")
    console().print(table)


@app.command("deploy-policy")
def deploy_policy(
    stack_dir: StackDirOpt = HERE,
    account: Annotated[
        str, typer.Option(help="The 12-digit AWS account id the stacks deploy to; * if not given.")
    ] = "*",
    out: Annotated[
        Path | None,
        typer.Option(help="Write one deploy-<group>.json per policy into this directory."),
    ] = None,
    check: Annotated[
        Path | None,
        typer.Option(help="Compare with the files in this directory; exit 1 if they differ."),
    ] = None,
) -> None:
    """The deploy role's IAM policies: what `pulumi up` of every stack here needs (infra/deploy_iam.py), split to fit IAM's size limit for a managed policy. Printed as one JSON object (group -> policy) unless --out or --check."""  # noqa: E501
    from coreburst.burst.config import load_burst_stack
    from coreburst.common.catalog import CatalogError
    from infra.config import StackConfigError
    from infra.deploy_iam import deploy_policies, deploy_scope, render

    try:
        # The same validation the program runs (burst settings included): a stack that would
        # not deploy gets no policy.
        configs = [load_burst_stack(s.name, stack_dir).config for s in list_stacks(stack_dir)]
        docs = deploy_policies(deploy_scope(configs), account=account)
    except (GitOpsError, StackConfigError, CatalogError, ValueError) as exc:
        raise _fail(str(exc)) from None
    files = {f"deploy-{group}.json": render(doc) for group, doc in docs.items()}
    if check is not None:
        try:
            stale = _stale(check, files)
        except GitOpsError as exc:
            raise _fail(str(exc)) from None
        if stale:
            typer.echo(
                f"{check}: out of date: {', '.join(stale)}; "
                f"run: coreburst gitops deploy-policy --out {check}",
                err=True,
            )
            raise typer.Exit(1)
        typer.echo(f"{check}: {len(files)} policies up to date")
        return
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (out / name).write_text(text, encoding="utf-8")
        typer.echo(f"wrote {', '.join(sorted(files))} to {out}")
        return
    typer.echo(json.dumps(docs, indent=2))


def _stale(directory: Path, files: dict[str, str]) -> list[str]:
    """The files of ``directory`` that differ from ``files`` (name -> text), or are missing, and
    the deploy-*.json there that are no longer generated."""
    stale = [
        name
        for name, text in sorted(files.items())
        if not (directory / name).is_file()
        or read_text(directory / name, "policy file", GitOpsError) != text
    ]
    extra = sorted(p.name for p in directory.glob("deploy-*.json") if p.name not in files)
    return stale + [f"{name} (no longer generated)" for name in extra]
