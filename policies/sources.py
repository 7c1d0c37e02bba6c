"""Turn what we know about a stack into the ``PolicyResource`` list the engine would pass.

- :func:`from_offline`: the resources of :func:`infra.offline.evaluate_stack` (mock ids are
  ``<name>-id``, so a string input equal to another resource's id is a property dependency);
- :func:`from_preview`: the JSON of ``pulumi preview --json`` (its ``steps``; each step's
  ``newState`` carries ``type``, ``urn``, ``inputs``, ``provider`` and
  ``propertyDependencies``).

    >>> resources = from_preview(json.loads(Path("preview.json").read_text()))  # doctest: +SKIP
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Protocol

from pulumi_policy import PolicyProviderResource, PolicyResource
from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationError, field_validator

from coreburst.common.errors import field_path, first_problem
from coreburst.common.textio import read_text
from policies.runner import default_options

DELETE_OPS = frozenset({"delete", "delete-replaced", "discard", "discard-replaced"})
PROJECT = "coreburst"


class PreviewError(ValueError):
    """The preview JSON is not what ``pulumi preview --json`` writes; one line for the user."""


# -- the shape of `pulumi preview --json` --------------------------------------------------------
# Pulumi CLI reference, `pulumi preview` (https://www.pulumi.com/docs/iac/cli/commands/pulumi_preview/):
# `--json` serialises the preview's operations. Each of its `steps` has an `op`, the `urn`, the
# `provider` reference and the resource's `oldState`/`newState`, which are the engine's resource
# records (`apitype.ResourceV3` in pulumi/sdk/go/common/apitype/core.go): `urn`, `type`,
# `custom`, `inputs`/`outputs` (objects), `parent`, `provider` (a string), `dependencies`
# (URNs) and `propertyDependencies` (an object of property name -> list of URNs). Fields this
# module does not read may be added by newer CLIs, so extra keys are kept, not refused.
UNKNOWN = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"  # the engine's "known after apply" sentinel


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return f"the number {value!r}"
    if isinstance(value, str):
        return f"the string {value!r}" if len(value) <= 40 else "a string"
    return "a list" if isinstance(value, list) else "an object"


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {_json_type(value)}")
    return value


def _count(value: Any) -> Any:
    """A whole number >= 0 (JSON has one number type: 2.0 is 2), or unknown until apply."""
    if value == UNKNOWN:
        return value
    ok = (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and float(value).is_integer()
        and value >= 0
    )
    if not ok:
        raise ValueError(f"expected a whole number >= 0, got {_json_type(value)}")
    return value


def _urns(value: Any) -> Any:
    if not isinstance(value, list) or not all(isinstance(u, str) for u in value):
        raise ValueError(f"expected a list of URN strings, got {_json_type(value)}")
    return value


def _strings_or_unknown(value: Any) -> Any:
    if value == UNKNOWN:
        return value
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"expected a list of strings, got {_json_type(value)}")
    return value


def _object(value: Any) -> Any:
    if not isinstance(value, dict):
        raise ValueError(f"expected an object, got {_json_type(value)}")
    return value


Text = Annotated[Any, AfterValidator(_text)]
Count = Annotated[Any, AfterValidator(_count)]
Urns = Annotated[Any, AfterValidator(_urns)]
Strings = Annotated[Any, AfterValidator(_strings_or_unknown)]
JsonObject = Annotated[Any, AfterValidator(_object)]


class _Shape(BaseModel):
    model_config = ConfigDict(extra="allow")


class _ResourceState(_Shape):
    urn: Text
    type: Text
    inputs: JsonObject | None = None
    outputs: JsonObject | None = None
    provider: Text | None = None
    parent: Text | None = None
    dependencies: Urns | None = None
    propertyDependencies: dict[str, Urns] | None = None  # noqa: N815 (the engine's key)

    @field_validator("propertyDependencies", mode="before")
    @classmethod
    def _deps_object(cls, value: Any) -> Any:
        return value if value is None else _object(value)


class _Step(_Shape):
    op: Text
    urn: Text | None = None
    provider: Text | None = None
    oldState: _ResourceState | None = None  # noqa: N815
    newState: _ResourceState | None = None  # noqa: N815


class _Preview(_Shape):
    steps: list[_Step]

    @field_validator("steps", mode="before")
    @classmethod
    def _steps_list(cls, value: Any) -> Any:
        if not isinstance(value, list):
            raise ValueError(f"expected a list of steps, got {_json_type(value)}")
        return value


# Inputs the pricing reads (policies.pricing), by resource type: a wrongly typed one would be
# priced as zero or as something else, so it is refused instead. Unknown values are allowed.
class _AsgInputs(_Shape):
    desiredCapacity: Count | None = None  # noqa: N815
    minSize: Count | None = None  # noqa: N815


class _Ebs(_Shape):
    volumeSize: Count | None = None  # noqa: N815


class _BlockDevice(_Shape):
    ebs: _Ebs | None = None


class _LaunchTemplateInputs(_Shape):
    instanceType: Text | None = None  # noqa: N815
    blockDeviceMappings: list[_BlockDevice] | None = None  # noqa: N815


class _LustreInputs(_Shape):
    deploymentType: Text | None = None  # noqa: N815
    perUnitStorageThroughput: Count | None = None  # noqa: N815
    storageCapacity: Count | None = None  # noqa: N815


class _EndpointInputs(_Shape):
    vpcEndpointType: Text | None = None  # noqa: N815
    subnetIds: Strings | None = None  # noqa: N815


class _DxInputs(_Shape):
    bandwidth: Text | None = None


class _ProviderInputs(_Shape):
    region: Text | None = None


PRICED_INPUTS: dict[str, type[BaseModel]] = {
    "aws:autoscaling/group:Group": _AsgInputs,
    "aws:ec2/launchTemplate:LaunchTemplate": _LaunchTemplateInputs,
    "aws:fsx/lustreFileSystem:LustreFileSystem": _LustreInputs,
    "aws:ec2/vpcEndpoint:VpcEndpoint": _EndpointInputs,
    "aws:directconnect/connection:Connection": _DxInputs,
    "pulumi:providers:aws": _ProviderInputs,
}


def _shape_error(exc: ValidationError, prefix: tuple[int | str, ...] = ()) -> PreviewError:
    problem = first_problem(exc)
    msg = problem.message
    if problem.kind == "missing":
        msg = "missing"
    elif problem.kind in ("list_type", "dict_type", "model_type", "model_attributes_type"):
        kind = {"list_type": "a list", "dict_type": "an object"}.get(problem.kind, "an object")
        msg = f"expected {kind}, got {_json_type(exc.errors()[0].get('input'))}"
    where = field_path(prefix + problem.loc, "brackets")
    return PreviewError(
        f"preview JSON {where}: {msg}; pass the unmodified output of `pulumi preview --json`"
    )


def validate_preview(doc: Any) -> None:
    """Check the parts of a ``pulumi preview --json`` document this module reads.

    Raises :class:`PreviewError` with one line naming the JSON path of the first bad value.
    """
    if not isinstance(doc, dict) or "steps" not in doc:
        raise PreviewError(
            "preview JSON has no 'steps' list; pass the output of `pulumi preview --json`"
        )
    try:
        preview = _Preview.model_validate(doc)
    except ValidationError as exc:
        raise _shape_error(exc) from None
    for i, step in enumerate(preview.steps):
        for key in ("oldState", "newState"):
            state = getattr(step, key)
            model = PRICED_INPUTS.get(state.type) if state is not None else None
            if model is None or state.inputs is None:
                continue
            try:
                model.model_validate(state.inputs)
            except ValidationError as exc:
                raise _shape_error(exc, ("steps", i, key, "inputs")) from None


class OfflineResource(Protocol):
    typ: str
    name: str
    inputs: dict[str, Any]
    provider: str | None


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _strings(v)


def _provider_urn(ref: Any) -> str | None:
    # Provider references are "<provider urn>::<provider id>".
    if not isinstance(ref, str) or "::" not in ref:
        return None
    return ref.rsplit("::", 1)[0]


def _link(
    built: dict[str, PolicyResource], deps_by_urn: dict[str, dict[str, list[str]]]
) -> list[PolicyResource]:
    for urn, by_prop in deps_by_urn.items():
        r = built[urn]
        r.property_dependencies = {
            k: [built[u] for u in v if u in built] for k, v in by_prop.items()
        }
        seen: dict[str, PolicyResource] = {}
        for v in r.property_dependencies.values():
            for d in v:
                seen[d.urn] = d
        r.dependencies = list(seen.values())
    return list(built.values())


def _provider(built: dict[str, PolicyResource], urn: str | None) -> PolicyProviderResource | None:
    p = built.get(urn or "")
    return PolicyProviderResource(p.resource_type, p.props, p.urn, p.name) if p else None


def from_offline(resources: Sequence[OfflineResource], stack: str) -> list[PolicyResource]:
    """PolicyResources for an offline evaluation (see :mod:`infra.offline`)."""
    built: dict[str, PolicyResource] = {}
    urn_of_id: dict[str, str] = {}
    provider_refs: dict[str, str | None] = {}
    for r in resources:
        urn = f"urn:pulumi:{stack}::{PROJECT}::{r.typ}::{r.name}"
        built[urn] = PolicyResource(
            r.typ, dict(r.inputs), urn, r.name, default_options(), None, None, [], {}
        )
        urn_of_id[f"{r.name}-id"] = urn
        provider_refs[urn] = r.provider
    # Offline provider refs name the provider by urn prefix; map them onto ours.
    providers = {r.name: u for u, r in built.items() if r.resource_type.startswith("pulumi:")}
    deps_by_urn: dict[str, dict[str, list[str]]] = {}
    for urn, pr in built.items():
        deps_by_urn[urn] = {
            key: sorted({urn_of_id[s] for s in _strings(value) if s in urn_of_id} - {urn})
            for key, value in pr.props.items()
        }
        ref = _provider_urn(provider_refs[urn])
        if ref:
            pr.provider = _provider(built, providers.get(ref.rsplit("::", 1)[-1]))
    return _link(built, deps_by_urn)


def from_preview(doc: Any) -> list[PolicyResource]:
    """PolicyResources for what ``pulumi preview --json`` says will exist after the update.

    Deleted resources are left out; a replaced resource counts once, in its new state.
    """
    validate_preview(doc)
    steps = doc["steps"]
    states: dict[str, Mapping[str, Any]] = {}
    deleted: set[str] = set()
    # Shapes were checked above: states are objects with string type/urn, inputs objects.
    for step in steps:
        op = step["op"]
        state = step.get("newState") or (None if op in DELETE_OPS else step.get("oldState"))
        if op in DELETE_OPS or state is None:
            if isinstance(step.get("urn"), str):
                deleted.add(step["urn"])
            continue
        states[state["urn"]] = state
    built: dict[str, PolicyResource] = {}
    deps_by_urn: dict[str, dict[str, list[str]]] = {}
    for urn, state in states.items():
        props = dict(state.get("inputs") or state.get("outputs") or {})
        name = urn.rsplit("::", 1)[-1]
        built[urn] = PolicyResource(
            state["type"], props, urn, name, default_options(), None, None, [], {}
        )
        pdeps = state.get("propertyDependencies") or {}
        deps_by_urn[urn] = {str(k): list(v) for k, v in pdeps.items()}
    for urn, state in states.items():
        built[urn].provider = _provider(built, _provider_urn(state.get("provider")))
    return _link(built, deps_by_urn)


def load_preview(path: Path) -> list[PolicyResource]:
    """Read and convert a preview JSON file; raises PreviewError with one line on any problem."""
    text = read_text(path, "preview JSON", PreviewError)
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PreviewError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    return from_preview(doc)
