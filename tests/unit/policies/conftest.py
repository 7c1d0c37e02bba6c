"""Builders for hand-made policy arguments: start from a passing resource, change one field."""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Callable
from typing import Any

import pytest
from pulumi_policy import (
    PolicyProviderResource,
    PolicyResource,
    ResourceValidationArgs,
    StackValidationArgs,
)

from infra.efa import efa_layout
from infra.offline import evaluate_config, evaluate_stack, load_stack_yaml
from policies.runner import default_options
from policies.sources import from_offline

TAGS = {"team": "ml", "project": "llm", "cost-center": "cc-1", "environment": "dev"}
SUBNET_ID = "subnet-0abc"
SGS = ["sg-efa", "sg-node"]


def provider(tags: dict[str, str] | None = None) -> PolicyProviderResource:
    props = {"region": "us-east-1", "defaultTags": json.dumps({"tags": tags or TAGS})}
    return PolicyProviderResource("pulumi:providers:aws", props, "urn:provider", "aws")


def interfaces(count: int, itype: str = "") -> list[dict[str, Any]]:
    del itype
    out = []
    for nic in efa_layout(count):
        d: dict[str, Any] = {
            "networkCardIndex": float(nic.network_card_index),
            "deviceIndex": float(nic.device_index),
            "subnetId": SUBNET_ID,
            "securityGroups": list(SGS),
            "deleteOnTermination": "true",
            "associatePublicIpAddress": "false",
        }
        if nic.interface_type != "interface":
            d["interfaceType"] = nic.interface_type
        out.append(d)
    return out


def launch_template(itype: str = "p5.48xlarge", efa: int = 32) -> dict[str, Any]:
    return {
        "instanceType": itype,
        "networkInterfaces": interfaces(efa),
        "metadataOptions": {"httpEndpoint": "enabled", "httpTokens": "required"},
        "blockDeviceMappings": [
            {"deviceName": "/dev/sda1", "ebs": {"volumeSize": 512.0, "encrypted": "true"}}
        ],
        "tagSpecifications": [
            {"resourceType": rt, "tags": dict(TAGS)}
            for rt in ("instance", "volume", "network-interface")
        ],
    }


def rargs(
    typ: str,
    props: dict[str, Any],
    name: str = "res",
    config: dict[str, Any] | None = None,
    prov: PolicyProviderResource | None = None,
) -> ResourceValidationArgs:
    return ResourceValidationArgs(
        typ,
        copy.deepcopy(props),
        f"urn:pulumi:dev::coreburst::{typ}::{name}",
        name,
        default_options(),
        prov if prov is not None else provider(),
        config or {},
    )


def violations(fn: Callable[..., None], args: Any) -> list[str]:
    found: list[str] = []
    fn(args, lambda message, urn=None: found.append(message))
    return found


def res(typ: str, name: str, props: dict[str, Any], **deps: list[PolicyResource]) -> PolicyResource:
    r = PolicyResource(
        typ,
        props,
        f"urn:pulumi:dev::coreburst::{typ}::{name}",
        name,
        default_options(),
        None,
        None,
        [],
        {},
    )
    r.property_dependencies = dict(deps)
    r.dependencies = [d for v in deps.values() for d in v]
    return r


def sargs(resources: list[PolicyResource], config: dict[str, Any] | None = None) -> Any:
    return StackValidationArgs(resources, config or {})


@functools.cache
def _evaluated(stack: str) -> Any:
    return evaluate_stack(stack)


def stack_resources(stack: str) -> list[PolicyResource]:
    """Fresh PolicyResources of an example stack (safe to mutate)."""
    ev = _evaluated(stack)
    return from_offline(copy.deepcopy(ev.resources), stack)


def config_resources(stack: str, **overrides: Any) -> list[PolicyResource]:
    config = load_stack_yaml(stack)
    config.update({f"coreburst:{k}": v for k, v in overrides.items()})
    return from_offline(evaluate_config(stack, config).resources, stack)


@pytest.fixture
def h() -> Any:
    """The builders, as one namespace: ``h.rargs(...)``, ``h.violations(...)``."""
    import types

    return types.SimpleNamespace(
        TAGS=TAGS,
        provider=provider,
        interfaces=interfaces,
        launch_template=launch_template,
        rargs=rargs,
        violations=violations,
        res=res,
        sargs=sargs,
        stack_resources=stack_resources,
        config_resources=config_resources,
    )
