"""The reference of every configuration key, generated from the config models.

Two configurations: the stack (``Pulumi.<stack>.yaml``, keys under ``coreburst:``, read by
infra/config.py's ``StackConfig`` and, for ``coreburst:burst``, coreburst/burst/config.py's
``BurstSettings``) and the guardrails daemon (``guardrails.yaml``, the daemon's settings plus
each registered rule's section, guardrails/configfile.py). Each key's type, allowed range,
default and description come from its pydantic field (the description is the field's
docstring); its unit from its name (``...S`` seconds, ``...Usd`` dollars) or its type (a
duration); its example from the shipped example files where one sets it. Nothing here is
written by hand, so the reference cannot drift from the code: tests/unit/test_docs_keys.py
regenerates it and compares.

    $ python -m coreburst.docs_keys            # rewrite docs/reference/config.md
    $ python -m coreburst.docs_keys --check    # exit 1 when it is stale

    >>> rows = {r.key: r for r in stack_rows()}
    >>> r = rows["coreburst:burst.capacityBackoffS"]
    >>> r.type, r.default, r.unit
    ('integer, at least 10', '600', 'seconds')
"""

from __future__ import annotations

import argparse
import sys
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import yaml
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from coreburst.common.textio import read_text

OUT = Path("docs/reference/config.md")
# Example files whose values are shown as examples (relative to the repository root).
STACK_EXAMPLES = ("Pulumi.burst.yaml", "Pulumi.prod.yaml", "Pulumi.dev.yaml")
DAEMON_EXAMPLE = "guardrails/examples/guardrails.yaml"

# Units of keys whose name does not carry one (Slurm's own parameters are in seconds).
_UNITS = {
    "coreburst:burst.suspendTime": "seconds",
    "coreburst:burst.resumeTimeout": "seconds",
    "coreburst:burst.suspendTimeout": "seconds",
    "coreburst:burst.powerSaveInterval": "seconds",
    "coreburst:burst.memoryFraction": "fraction (0-1]",
    "coreburst:budget.thresholdsPercent": "percent of monthlyUsd",
    "coreburst:lustre.perUnitStorageThroughput": "MB/s per TiB",
    "coreburst:lustre.metadata.iops": "metadata IOPS",
}
# Name endings that state a unit (camelCase for the stack, snake_case for the daemon).
_SUFFIX_UNITS = (
    (("Seconds", "_seconds", "S", "_s"), "seconds"),
    (("Usd", "_usd"), "USD"),
    (("Gib", "_gib"), "GiB"),
    (("Days", "_days"), "days"),
    (("Hours", "_hours"), "hours"),
    (("Percent", "_percent", "_pct"), "percent"),
)


# What a value checked by one of the config's validators is, by the validator's name (the
# functions in infra/config.py, coreburst/burst/config.py and guardrails/regions.py); the
# reference test fails on a validated key whose type would read as a bare "string".
_CHECKED_TYPES = {
    "_cidr": "CIDR block",
    "_vpc_cidr": "IPv4 CIDR block, /16 to /28",
    "_on_prem_cidr": "IPv4 CIDR block, /8 or narrower",
    "_asn_private_or_public": "BGP ASN, 1 to 4294967294",
    "_amazon_side_asn": "ASN, 64512-65534 or 4200000000-4294967294",
    "_gateway_ip": "public IPv4 address",
    "_conf_server": "host[:port], comma-separated for a backup",
    "_srun_port_range": "port range LOW-HIGH",
    "_port_or_range": "port or port range LOW-HIGH",
    "aws_region": "AWS region",
    "_slurm_time": "Slurm time: days-hours:minutes:seconds, minutes or UNLIMITED",
    "_hostlist": "Slurm hostlist",
    "_safe": "slurm.conf value (letters, digits, . _ / - @ % : + = , [ ])",
    "check": "ARN",
}


# Library types by name, as a reader would call them.
_NAMED = {"IPvAnyAddress": "IP address", "IPv4Address": "IPv4 address"}


@dataclass(frozen=True)
class Row:
    key: str
    type: str
    default: str
    unit: str
    example: str
    description: str


def _unwrap(annotation: Any) -> tuple[Any, list[Any]]:
    """The bare type and the metadata of ``Annotated`` layers around it."""
    meta: list[Any] = []
    while get_origin(annotation) is Annotated:
        annotation, *more = get_args(annotation)
        meta += more
    return annotation, meta


def _optional(annotation: Any) -> tuple[Any, bool]:
    if get_origin(annotation) in (Union, types.UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return annotation, False


def _bounds(meta: list[Any]) -> str:
    parts = []
    for m in meta:
        for attr, word in (
            ("ge", "at least"),
            ("gt", "above"),
            ("le", "at most"),
            ("lt", "below"),
            ("min_length", "length at least {}"),
        ):
            # annotated_types' Ge, Gt, Le, Lt, MinLen (what Field(ge=...) puts in metadata)
            value = getattr(m, attr, None)
            if not isinstance(value, int | float) or isinstance(value, bool):
                continue
            parts.append(word.format(value) if "{}" in word else f"{word} {value}")
        low, high = getattr(m, "low", None), getattr(m, "high", None)
        if isinstance(low, str) and isinstance(high, str):
            parts.append(f"{low} to {high}")
        pattern = getattr(m, "pattern", None)
        if isinstance(pattern, str):
            parts.append(f"matching `{pattern}`")
    return ", ".join(parts)


def _type_name(annotation: Any, meta: list[Any] | None = None) -> str:
    bare, more = _unwrap(annotation)
    meta = [*(meta or []), *more]
    bare, _ = _optional(bare)
    bare, more = _unwrap(bare)
    meta += more
    origin = get_origin(bare)
    if origin is Literal:
        name = "one of " + ", ".join(f"`{v}`" for v in get_args(bare))
    elif origin is list:
        (item,) = get_args(bare)
        name = f"list of {_type_name(item)}"
    elif origin is dict:
        _, value = get_args(bare)
        name = f"mapping of name to {_type_name(value)}"
    elif isinstance(bare, type) and issubclass(bare, BaseModel):
        name = "section"
    else:
        name = {
            bool: "boolean",
            int: "integer",
            float: "number",
            str: "string",
            Path: "path",
            timedelta: "duration",
            datetime: "date and time (ISO 8601, UTC)",
            date: "date (YYYY-MM-DD)",
        }.get(bare, _NAMED.get(getattr(bare, "__name__", ""), getattr(bare, "__name__", str(bare))))
    checked = [
        _CHECKED_TYPES[m.func.__name__]
        for m in meta
        if getattr(getattr(m, "func", None), "__name__", "") in _CHECKED_TYPES
    ]
    if checked and name == "string":
        name = checked[-1]  # Hostlist: _safe, then _hostlist (the more telling)
    elif checked and name == "integer":
        name = checked[-1]
    bounds = _bounds(meta)
    return name + (f", {bounds}" if bounds else "")


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    bare, _ = _unwrap(annotation)
    if isinstance(bare, type) and issubclass(bare, BaseModel):
        return [bare]
    out: list[type[BaseModel]] = []
    for arg in get_args(bare):
        out += _models_in(arg)
    return out


def _is_list(annotation: Any) -> bool:
    bare, _ = _unwrap(annotation)
    bare, _ = _optional(bare)
    bare, _ = _unwrap(bare)
    return get_origin(bare) is list


def _is_dict(annotation: Any) -> bool:
    bare, _ = _unwrap(annotation)
    bare, _ = _optional(bare)
    return get_origin(bare) is dict


def _text(value: Any) -> str:
    from guardrails.configtypes import format_duration

    if isinstance(value, timedelta):
        return format_duration(value)
    if isinstance(value, BaseModel):
        return "(section defaults)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "none"
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, list | dict):
        return yaml.safe_dump(_plain(value), default_flow_style=True, width=1000).strip()
    return str(value)


def _plain(value: Any) -> Any:
    """Plain YAML data: sections as their keys, durations as ``30m``, paths as text."""
    from guardrails.configtypes import format_duration

    if isinstance(value, BaseModel):
        value = dict(value)
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, timedelta):
        return format_duration(value)
    if isinstance(value, Path):
        return str(value)
    return value


def _default(value: Any) -> str:
    return "required" if value is PydanticUndefined else _text(value)


def _unit(key: str, annotation: Any) -> str:
    if key in _UNITS:
        return _UNITS[key]
    bare, _ = _unwrap(_optional(_unwrap(annotation)[0])[0])
    if bare is timedelta:
        return ""  # the type says duration
    last = key.rsplit(".", 1)[-1].removesuffix("[]")
    for endings, unit in _SUFFIX_UNITS:
        if any(last.endswith(e) and last != e for e in endings):
            return unit
    return ""


def _description(f: FieldInfo, model: type[BaseModel]) -> str:
    text = f.description
    if not text:
        for m in _models_in(f.annotation):
            text = (m.__doc__ or "").strip()
            break
    return " ".join((text or "").split())


def _default_value(f: FieldInfo) -> Any:
    if f.default_factory is not None:
        return f.default_factory()  # type: ignore[call-arg]
    return f.default


def walk(
    model: type[BaseModel],
    prefix: str,
    sep: str,
    camel: bool,
    replace: dict[str, type[BaseModel]] | None = None,
    *,
    within: BaseModel | None = None,
) -> Iterator[tuple[str, FieldInfo, type[BaseModel], Any]]:
    """(key, field, owning model, default) of every key under ``model``, depth first, in field
    order. A section's default instance sets its keys' defaults: ``core_idle.interactive``
    defaults to a 30 min window where its model alone says 2 h."""
    for name, f in model.model_fields.items():
        key_name = (f.alias or name) if camel else name
        key = f"{prefix}{sep}{key_name}" if prefix else key_name
        default = getattr(within, name) if within is not None else _default_value(f)
        yield key, f, model, default
        sub = (replace or {}).get(key)
        models = [sub] if sub else _models_in(f.annotation)
        if not models:
            continue
        suffix = "[]" if _is_list(f.annotation) else ".<name>" if _is_dict(f.annotation) else ""
        inner = key + suffix
        section = default if isinstance(default, BaseModel) and not suffix and not sub else None
        yield from walk(models[0], inner, ".", camel, replace, within=section)


def _lookup(doc: Any, key: str) -> Any:
    """The value at ``key`` (``a.b[].c``, ``a.<name>.b``) in a loaded example, or None."""
    values = [doc]
    for part in key.split("."):
        nxt = []
        name, is_list = part.removesuffix("[]"), part.endswith("[]")
        for v in values:
            if name == "<name>" and isinstance(v, dict):
                nxt += list(v.values())
            elif isinstance(v, dict) and name in v:
                nxt.append(v[name])
        if is_list:
            nxt = [i for v in nxt if isinstance(v, list) for i in v]
        values = nxt
    return values[0] if values else None


def _example(examples: list[tuple[str, Any]], key: str, is_section: bool) -> str:
    if is_section:
        return ""
    for _, doc in examples:
        v = _lookup(doc, key)
        if (
            v is not None
            and not isinstance(v, dict)
            and not (isinstance(v, list) and v and isinstance(v[0], dict))
        ):
            return _text(v)
    return ""


class ExampleError(ValueError):
    """An example file that cannot be read; the message is one line naming it."""


def _load_yaml(path: Path) -> Any:
    try:
        doc = yaml.safe_load(read_text(path, "example file", ExampleError))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise ExampleError(f"{path}: not valid YAML{where}; fix the file") from None
    if not isinstance(doc, dict):
        raise ExampleError(f"{path}: expected a mapping of key: value")
    return doc


def _stack_examples(root: Path) -> list[tuple[str, Any]]:
    out = []
    for name in STACK_EXAMPLES:
        path = root / name
        if not path.is_file():
            continue
        config = (_load_yaml(path) or {}).get("config", {})
        out.append(
            (
                name,
                {
                    "coreburst:" + k.split(":", 1)[1]: v
                    for k, v in config.items()
                    if k.startswith("coreburst:")
                },
            )
        )
    return out


def _rows(
    model: type[BaseModel],
    prefix: str,
    sep: str,
    camel: bool,
    *,
    examples: list[tuple[str, Any]],
    replace: dict[str, type[BaseModel]] | None = None,
) -> list[Row]:
    rows = []
    for key, f, owner, default in walk(model, prefix, sep, camel, replace):
        sub = (replace or {}).get(key)
        is_section = bool(sub or _models_in(f.annotation))
        rows.append(
            Row(
                key=key,
                type=_type_name(f.annotation, list(f.metadata)),
                default="none" if sub else _default(default),
                unit=_unit(key, f.annotation),
                example=_example(examples, key, is_section and not _is_dict(f.annotation)),
                description=_description(f, owner)
                if not sub
                else " ".join((sub.__doc__ or "").split()),
            )
        )
    return rows


def stack_rows(root: Path | None = None) -> list[Row]:
    """Every ``coreburst:`` key of a stack file (``coreburst:burst`` as BurstSettings reads it:
    the superset of what the Pulumi program reads of it)."""
    from coreburst.burst.config import BurstSettings
    from infra.config import StackConfig

    examples = _stack_examples(root or Path.cwd())
    rows = _rows(
        StackConfig,
        "coreburst",
        ":",
        True,
        examples=examples,
        replace={"coreburst:burst": BurstSettings},
    )
    return [r for r in rows if r.key != "coreburst:region"]


def daemon_rows(root: Path | None = None) -> list[Row]:
    """Every key of guardrails.yaml: the daemon's settings and each registered rule's section."""
    from guardrails.configfile import GuardrailsConfig

    path = (root or Path.cwd()) / DAEMON_EXAMPLE
    examples = [(DAEMON_EXAMPLE, _load_yaml(path))] if path.is_file() else []
    return _rows(typing.cast(type[BaseModel], GuardrailsConfig), "", ".", False, examples=examples)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ") if text else ""


def _table(rows: list[Row], env: bool) -> list[str]:
    head = "| Key | Type | Default | Unit | Example | Description |"
    lines = [head, "|---|---|---|---|---|---|"]
    for r in rows:
        key = f"`{r.key}`"
        if env and "[]" not in r.key and "<name>" not in r.key:
            key += f"<br>`COREBURST_{r.key.replace('.', '__').upper()}`"
        ex = f"`{_cell(r.example)}`" if r.example else ""
        lines.append(
            f"| {key} | {_cell(r.type)} | `{_cell(r.default)}` | {r.unit} | {ex} | "
            f"{_cell(r.description)} |"
        )
    return lines


def render(root: Path | None = None) -> str:
    """docs/reference/config.md as it should read."""
    stack, daemon = stack_rows(root), daemon_rows(root)
    lines = [
        "# Configuration reference",
        "",
        "<!-- Generated by `python -m coreburst.docs_keys` from the config models "
        "(infra/config.py, coreburst/burst/config.py, guardrails/); do not edit by hand. -->",
        "",
        "Every key the code reads, with its type and allowed range, default, unit, an example "
        f"from the shipped example files ({', '.join(STACK_EXAMPLES)}, {DAEMON_EXAMPLE}) "
        "where one sets it, and what it does. A key not listed here is refused (one line naming "
        "it, exit 2). `[]` marks the items of a list, `<name>` the entries of a mapping.",
        "",
        "## Stack keys (`Pulumi.<stack>.yaml`)",
        "",
        "Under `config:`; the region is `aws:region`. Nested keys are written as YAML "
        "mappings under the top-level key (`coreburst:burst: {capacityBackoffS: 600}`).",
        "",
        *_table(stack, env=False),
        "",
        "## Guardrails daemon keys (`guardrails.yaml`)",
        "",
        "Each key may also come from the environment: `COREBURST_` and the key path in capitals "
        "with `__` between levels (the environment wins over the file). A duration is written "
        "`45s`, `30m`, `1h30m`, `2d` or as a number of seconds.",
        "",
        *_table(daemon, env=True),
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m coreburst.docs_keys",
        description="Write docs/reference/config.md from the config models.",
    )
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="repository root")
    parser.add_argument("--check", action="store_true", help="exit 1 when the file is stale")
    args = parser.parse_args(argv)
    path = args.root / OUT
    try:
        text = render(args.root)
        current = read_text(path, "reference", ExampleError) if path.is_file() else ""
    except ExampleError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.check:
        if current != text:
            print(f"{OUT} is stale: run `python -m coreburst.docs_keys`", file=sys.stderr)
            return 1
        print(f"{OUT} is up to date")
        return 0
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
