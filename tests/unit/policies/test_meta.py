"""Walk the pack: every policy is well-formed, and the pack's files hold together."""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from pulumi_policy import EnforcementLevel, ResourceValidationPolicy, StackValidationPolicy

from policies.pack import all_policies

KEBAB = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)+$")
POLICIES_DIR = Path(__file__).resolve().parents[3] / "policies"


def test_every_policy_is_documented_and_enforced() -> None:
    policies = all_policies()
    assert len(policies) >= 17
    names = [p.name for p in policies]
    assert len(set(names)) == len(names), "policy names repeat"
    for p in policies:
        assert KEBAB.match(p.name), f"{p.name}: not kebab-case"
        assert p.description and p.description.endswith("."), f"{p.name}: description"
        assert p.remediation_steps, f"{p.name}: remediation"
        assert isinstance(p.enforcement_level, EnforcementLevel), f"{p.name}: enforcement"
        assert isinstance(p, ResourceValidationPolicy | StackValidationPolicy)
        schema = p.config_schema
        if schema is not None:
            for key, prop in schema.properties.items():
                assert "type" in prop, f"{p.name}.{key}: no JSON-schema type"


def test_pack_files() -> None:
    doc = yaml.safe_load((POLICIES_DIR / "PulumiPolicy.yaml").read_text())
    assert doc["runtime"] == {"name": "python", "options": {"virtualenv": "../.venv"}}
    assert "PolicyPack(" in (POLICIES_DIR / "__main__.py").read_text()
    assert "pulumi-policy" in (POLICIES_DIR / "requirements.txt").read_text()


def test_stack_policy_configs_name_real_policies_and_params() -> None:
    import json

    by_name = {p.name: p for p in all_policies()}
    for path in sorted((POLICIES_DIR / "config").glob("*.json")):
        for name, cfg in json.loads(path.read_text()).items():
            assert name in by_name, f"{path.name}: unknown policy {name}"
            schema = by_name[name].config_schema
            params = set(cfg) - {"enforcementLevel"} if isinstance(cfg, dict) else set()
            known = set(schema.properties) if schema else set()
            assert params <= known, f"{path.name}: {name} has unknown params {params - known}"


def test_the_pack_starts_as_the_cli_would_run_it() -> None:
    """`python __main__.py` in policies/ builds the PolicyPack and prints its gRPC port."""
    import subprocess
    import sys

    proc = subprocess.Popen(
        [sys.executable, "-u", "__main__.py"],
        cwd=POLICIES_DIR,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        port = proc.stdout.readline().strip()
        assert port.isdigit(), proc.stderr.read() if proc.stderr else port
    finally:
        proc.kill()
        proc.wait(timeout=10)
