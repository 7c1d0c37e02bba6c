"""Run the pack in-process over a list of resources, as the engine would.

``coreburst plan`` and the tests use it; the engine itself runs the same policies through
``policies/__main__.py``. Unknown (preview) values raise inside a validator exactly as under
the engine, and the policy is skipped for that resource.

    >>> from policies.sources import from_offline
    >>> resources = from_offline(evaluate_stack("dev").resources, "dev")  # doctest: +SKIP
    >>> run_policies(resources)                                          # doctest: +SKIP
    []
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pulumi_policy import (
    EnforcementLevel,
    Policy,
    PolicyCustomTimeouts,
    PolicyProviderResource,
    PolicyResource,
    PolicyResourceOptions,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)
from pulumi_policy.proxy import UnknownValueError, unknown_checking_proxy

from policies.pack import all_policies


class PolicyError(RuntimeError):
    """A validator crashed (a bug in the pack, not a violation)."""


@dataclass(frozen=True)
class Violation:
    policy: str
    enforcement: str
    message: str
    urn: str | None = None


def default_options() -> PolicyResourceOptions:
    return PolicyResourceOptions(
        protect=False,
        ignore_changes=[],
        delete_before_replace=None,
        aliases=[],
        custom_timeouts=PolicyCustomTimeouts(0, 0, 0),
        additional_secret_outputs=[],
    )


def _level(policy: Policy, cfg: Any) -> EnforcementLevel:
    raw = cfg if isinstance(cfg, str) else (cfg or {}).get("enforcementLevel")
    if raw:
        return EnforcementLevel(raw)
    return policy.enforcement_level or EnforcementLevel.ADVISORY


def _params(cfg: Any) -> dict[str, Any]:
    if isinstance(cfg, Mapping):
        return {k: v for k, v in cfg.items() if k != "enforcementLevel"}
    return {}


def _proxied(resources: Sequence[PolicyResource]) -> list[PolicyResource]:
    """Copies whose props raise UnknownValueError on unknowns, dependencies relinked."""
    copies = {
        id(r): PolicyResource(
            r.resource_type,
            unknown_checking_proxy(dict(r.props)),
            r.urn,
            r.name,
            r.opts,
            r.provider,
            None,
            [],
            {},
        )
        for r in resources
    }
    for r in resources:
        c = copies[id(r)]
        c.parent = copies.get(id(r.parent)) if r.parent is not None else None
        c.dependencies = [copies.get(id(d), d) for d in r.dependencies]
        c.property_dependencies = {
            k: [copies.get(id(d), d) for d in v] for k, v in r.property_dependencies.items()
        }
    return [copies[id(r)] for r in resources]


def run_policies(
    resources: Sequence[PolicyResource],
    config: Mapping[str, Any] | None = None,
    policies: Sequence[Policy] | None = None,
) -> list[Violation]:
    """Violations of every enabled policy, in pack order.

    ``config`` has the shape of ``--policy-pack-config`` JSON: ``{policy: level}`` or
    ``{policy: {"enforcementLevel": ..., param: value}}``.
    """
    config = config or {}
    found: list[Violation] = []
    proxied = _proxied(resources)
    for policy in policies or all_policies():
        cfg = config.get(policy.name)
        level = _level(policy, cfg)
        if level == EnforcementLevel.DISABLED:
            continue
        params = _params(cfg)

        def report(
            message: str,
            urn: str | None = None,
            *,
            _p: Policy = policy,
            _level: EnforcementLevel = level,
        ) -> None:
            found.append(Violation(_p.name, _level.value, message, urn))

        try:
            if isinstance(policy, ResourceValidationPolicy):
                for r in proxied:
                    provider = r.provider
                    args = ResourceValidationArgs(
                        r.resource_type, r.props, r.urn, r.name, r.opts, provider, params
                    )

                    # A resource policy's violations belong to the resource it validated.
                    def on_resource(m: str, u: str | None = None, _urn: str = r.urn) -> None:
                        report(m, _urn)

                    try:
                        policy.validate(args, on_resource)
                    except UnknownValueError:
                        continue
            elif isinstance(policy, StackValidationPolicy):
                try:
                    policy.validate(StackValidationArgs(proxied, params), report)
                except UnknownValueError:
                    continue
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            raise PolicyError(f"policy {policy.name} failed: {exc!r}") from exc
    return found


def as_provider(r: PolicyResource) -> PolicyProviderResource:
    return PolicyProviderResource(r.resource_type, r.props, r.urn, r.name)
