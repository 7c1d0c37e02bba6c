"""Evaluate a stack offline: the real program under Pulumi's mocks, no cloud, no CLI.

``coreburst plan`` and the tests use this to see exactly the resources ``pulumi up`` would
declare, with the config of ``Pulumi.<stack>.yaml``.

    >>> result = evaluate_stack("dev")                    # doctest: +SKIP
    >>> [r.typ for r in result.resources][:2]              # doctest: +SKIP
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
import yaml

from coreburst.common.catalog import load_catalog
from coreburst.common.textio import read_text
from infra.config import StackConfig, StackConfigError, parse_stack_config
from infra.program import build, read_stack_config

REPO_ROOT = Path(__file__).resolve().parent.parent
PROJECT = "coreburst"
FAKE_ACCOUNT = "123456789012"


@dataclass
class Resource:
    typ: str
    name: str
    inputs: dict[str, Any]
    provider: str | None
    custom: bool


@dataclass
class Evaluation:
    stack: str
    config: StackConfig
    resources: list[Resource]
    outputs: dict[str, Any] = field(default_factory=dict)

    def of_type(self, typ: str) -> list[Resource]:
        return [r for r in self.resources if r.typ == typ]

    def named(self, name: str) -> Resource:
        for r in self.resources:
            if r.name == name:
                return r
        raise KeyError(name)


class _Mocks(pulumi.runtime.Mocks):
    """Records every registration and invents the computed outputs the program reads."""

    def __init__(self, region: str) -> None:
        self.region = region
        self.resources: list[Resource] = []
        self._lock = threading.Lock()

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        with self._lock:
            self.resources.append(
                Resource(args.typ, args.name, dict(args.inputs), args.provider, bool(args.custom))
            )
        rid = f"{args.name}-id"
        state = dict(args.inputs)
        service = args.typ.split(":")[1].split("/")[0] if ":" in args.typ else "x"
        state.setdefault("arn", f"arn:aws:{service}:{self.region}:{FAKE_ACCOUNT}:{args.name}")
        state.setdefault("name", args.name)
        if args.typ == "aws:s3/bucket:Bucket":
            state["bucket"] = args.name
            state["arn"] = f"arn:aws:s3:::{args.name}"
        if args.typ == "aws:sqs/queue:Queue":
            # The queue URL's documented form (Amazon SQS Developer Guide, "Amazon SQS queue
            # and message identifiers": https://sqs.<region>.amazonaws.com/<account>/<name>).
            state["url"] = f"https://sqs.{self.region}.amazonaws.com/{FAKE_ACCOUNT}/{args.name}"
        if args.typ == "aws:fsx/lustreFileSystem:LustreFileSystem":
            state["dnsName"] = f"fs-{args.name}.fsx.{self.region}.amazonaws.com"
            state["mountName"] = "abcdefgh"
        return rid, state

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[str, Any], list[Any]]:
        if args.token == "aws:ssm/getParameter:getParameter":
            return {
                "name": args.args["name"],
                "value": "ami-0123456789abcdef0",
                "type": "String",
            }, []
        return {}, []


def stack_file(stack: str, root: Path | None = None) -> Path:
    """``Pulumi.<stack>.yaml`` in ``root``: the directory the user names (``--stack-dir``),
    else the current directory, as ``pulumi`` itself finds a project's stacks."""
    return (root or Path.cwd()) / f"Pulumi.{stack}.yaml"


def load_stack_yaml(stack: str, root: Path | None = None) -> dict[str, Any]:
    """The ``config:`` map of ``Pulumi.<stack>.yaml``; raises StackConfigError on a bad file."""
    path = stack_file(stack, root)
    if not path.is_file():
        known = sorted(p.name.split(".")[1] for p in path.parent.glob("Pulumi.*.yaml"))
        listed = ", ".join(known) or "none"
        raise StackConfigError(
            f"no stack {stack!r}: {path.name} not found in {path.parent} (known: {listed}); "
            "run from the directory holding your stack files or pass --stack-dir"
        )
    try:
        doc = yaml.safe_load(read_text(path, "stack file", StackConfigError)) or {}
    except yaml.YAMLError as exc:
        # One line: PyYAML's message spans several (the mark and a caret under the column).
        why = " ".join(str(exc).split())
        raise StackConfigError(f"{path.name}: not valid YAML ({why})") from None
    config = doc.get("config", {}) if isinstance(doc, dict) else None
    if not isinstance(config, dict):
        raise StackConfigError(f"{path.name}: 'config' must be a mapping of key: value")
    return config


def _as_pulumi_config(config: dict[str, Any]) -> dict[str, str]:
    # The engine hands structured values to the program as JSON strings.
    return {k: v if isinstance(v, str) else json.dumps(v) for k, v in config.items()}


def evaluate_config(stack: str, config: dict[str, Any]) -> Evaluation:
    """Run the program on a stack config map under mocks; raises StackConfigError first if the
    config is invalid (nothing is declared then)."""
    flat = _as_pulumi_config(config)
    pulumi.runtime.set_all_config(flat)
    raw = read_stack_config()
    cfg = parse_stack_config(raw, load_catalog())
    mocks = _Mocks(cfg.region)
    pulumi.runtime.set_mocks(mocks, project=PROJECT, stack=stack, preview=False)
    pulumi.runtime.set_all_config(flat)
    captured: dict[str, Any] = {}

    @pulumi.runtime.test
    def run() -> pulumi.Output[Any]:
        outputs = build(cfg, stack)
        return pulumi.Output.from_input(outputs).apply(captured.update)

    run()
    return Evaluation(stack, cfg, mocks.resources, captured)


def evaluate_stack(stack: str, root: Path | None = None) -> Evaluation:
    return evaluate_config(stack, load_stack_yaml(stack, root))
