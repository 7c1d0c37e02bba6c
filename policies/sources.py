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
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from pulumi_policy import PolicyProviderResource, PolicyResource

from policies.runner import default_options

DELETE_OPS = frozenset({"delete", "delete-replaced", "discard", "discard-replaced"})
PROJECT = "coreburst"


class PreviewError(ValueError):
    """The preview JSON is not what ``pulumi preview --json`` writes; one line for the user."""


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
    steps = doc.get("steps") if isinstance(doc, Mapping) else None
    if not isinstance(steps, list):
        raise PreviewError(
            "preview JSON has no 'steps' list; pass the output of `pulumi preview --json`"
        )
    states: dict[str, Mapping[str, Any]] = {}
    deleted: set[str] = set()
    for i, step in enumerate(steps):
        if not isinstance(step, Mapping) or not isinstance(step.get("op"), str):
            raise PreviewError(f"preview JSON steps[{i}] is not a step object with an 'op'")
        op = step["op"]
        state = step.get("newState") or (None if op in DELETE_OPS else step.get("oldState"))
        if op in DELETE_OPS or state is None:
            if isinstance(step.get("urn"), str):
                deleted.add(step["urn"])
            continue
        if not isinstance(state, Mapping) or not all(
            isinstance(state.get(k), str) for k in ("type", "urn")
        ):
            raise PreviewError(f"preview JSON steps[{i}] ({op}) has no newState type and urn")
        inputs = state.get("inputs")
        if inputs is not None and not isinstance(inputs, Mapping):
            raise PreviewError(f"preview JSON steps[{i}] newState.inputs is not an object")
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
        deps_by_urn[urn] = {
            str(k): [u for u in v if isinstance(u, str)]
            for k, v in pdeps.items()
            if isinstance(v, list)
        }
    for urn, state in states.items():
        built[urn].provider = _provider(built, _provider_urn(state.get("provider")))
    return _link(built, deps_by_urn)


def load_preview(path: Path) -> list[PolicyResource]:
    """Read and convert a preview JSON file; raises PreviewError with one line on any problem."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise PreviewError(f"cannot read preview JSON {path}: {exc.strerror}") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PreviewError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    return from_preview(doc)
