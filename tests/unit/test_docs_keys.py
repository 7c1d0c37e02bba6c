"""docs/reference/config.md: every stack and daemon key, generated from the config models
(coreburst/docs_keys.py) so that it cannot drift from the code (issue 32 item 4). The shipped
example files (Pulumi.*.yaml, guardrails/examples/guardrails.yaml) are what users copy: every
key they set must be in the reference."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from coreburst.burst.config import BurstSettings
from coreburst.docs_keys import OUT, daemon_rows, main, render, stack_rows

ROOT = Path(__file__).resolve().parents[2]


def test_the_reference_is_generated_from_the_models() -> None:
    committed = (ROOT / OUT).read_text()
    assert committed == render(ROOT), (
        f"{OUT} is stale: run `python -m coreburst.docs_keys` and commit the result"
    )


def test_check_mode_fails_on_a_stale_file_and_names_the_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / OUT).parent.mkdir(parents=True)
    (tmp_path / OUT).write_text("# Configuration reference\n(edited by hand)\n")
    assert main(["--root", str(tmp_path), "--check"]) == 1
    err = capsys.readouterr().err
    assert err.strip() == f"{OUT} is stale: run `python -m coreburst.docs_keys`"
    assert main(["--root", str(tmp_path)]) == 0
    assert main(["--root", str(tmp_path), "--check"]) == 0


def test_a_broken_example_file_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "Pulumi.burst.yaml").write_text("config: [\n")
    assert main(["--root", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err == f"error: {tmp_path}/Pulumi.burst.yaml: not valid YAML at line 2; fix the file\n"
    assert not (tmp_path / OUT).exists()


def test_every_key_has_a_type_a_default_and_a_description() -> None:
    for rows in (stack_rows(ROOT), daemon_rows(ROOT)):
        assert len(rows) > 100
        undescribed = [r.key for r in rows if not r.description]
        assert undescribed == [], "give these fields a docstring (their description)"
        assert all(r.type and r.default for r in rows)
        keys = [r.key for r in rows]
        assert len(set(keys)) == len(keys)


def test_the_keys_the_issue_found_undocumented_are_documented() -> None:
    rows = {r.key: r for r in stack_rows(ROOT)}
    for key in (
        "coreNodes",
        "maxTime",
        "spotMaxTime",
        "suspendTime",
        "resumeTimeout",
        "memoryFraction",
        "nodeAddress",
        "capacityBlocks",
        "node.healthGate",
        "node.installPackages",
        "capacityBackoffS",
    ):
        assert f"coreburst:burst.{key}" in rows, key
    # the format of vpc.extraZones: a list of {availabilityZone, privateSubnetCidr}
    assert rows["coreburst:vpc.extraZones"].type == "list of section"
    assert rows["coreburst:vpc.extraZones[].availabilityZone"].default == "required"
    assert rows["coreburst:vpc.extraZones[].privateSubnetCidr"].default == "required"
    # defaults, units and examples as the code and the example stack have them
    r = rows["coreburst:burst.maxTime"]
    assert (r.default, r.example) == (BurstSettings().max_time, "2-00:00:00")
    assert rows["coreburst:burst.spotMaxTime"].example == "12:00:00"
    assert (
        rows["coreburst:burst.suspendTime"].default,
        rows["coreburst:burst.suspendTime"].unit,
    ) == (
        "600",
        "seconds",
    )
    assert rows["coreburst:burst.nodeAddress"].type == "one of `private-ip`, `registration`"
    assert rows["coreburst:burst.memoryFraction"].type == "number, above 0, at most 1"
    daemon = {r.key: r for r in daemon_rows(ROOT)}
    assert (daemon["interval"].type, daemon["interval"].default) == ("duration, 10s to 1d", "1m")
    # a section's own default instance sets its keys' defaults (CoreIdleConfig.interactive)
    assert daemon["core_idle.interactive.window"].default == "30m"
    assert daemon["core_idle.batch.window"].default == "2h"
    # one capacity back-off: the stack's key; the daemon has none of its own
    assert not [k for k in daemon if "capacity_backoff" in k]


def _leaf_keys(doc: Any, prefix: str, sep: str) -> list[str]:
    """Every key path a YAML document sets (lists as ``[]``; mapping entries by name)."""
    out = []
    if isinstance(doc, dict):
        for k, v in doc.items():
            key = f"{prefix}{sep}{k}" if prefix else str(k)
            out.append(key)
            out += _leaf_keys(v, key, ".")
    elif isinstance(doc, list):
        for item in doc:
            out += _leaf_keys(item, prefix + "[]", ".")
    return out


def _generalise(key: str, documented: set[str]) -> bool:
    """Whether ``key`` is documented, a mapping entry's name standing for ``<name>``."""
    if key in documented:
        return True
    parts = key.split(".")
    for i in range(1, len(parts)):
        candidate = ".".join([*parts[:i], "<name>", *parts[i + 1 :]])
        if candidate in documented or _generalise(candidate, documented - {key}):
            return True
    return False


@pytest.mark.parametrize("stack", sorted(p.name for p in ROOT.glob("Pulumi.*.yaml")))
def test_every_key_an_example_stack_sets_is_documented(stack: str) -> None:
    config = yaml.safe_load((ROOT / stack).read_text())["config"]
    documented = {r.key for r in stack_rows(ROOT)}
    keys = _leaf_keys({k: v for k, v in config.items() if k.startswith("coreburst:")}, "", "")
    # coreburst:tags and the like are sections whose own keys are listed; mapping entries
    # (capacityBlocks.<cluster>) are documented as <name>
    missing = [k for k in keys if not _generalise(k, documented)]
    assert missing == []


def test_every_key_the_example_guardrails_yaml_sets_is_documented() -> None:
    doc = yaml.safe_load((ROOT / "guardrails/examples/guardrails.yaml").read_text())
    documented = {r.key for r in daemon_rows(ROOT)}
    missing = [k for k in _leaf_keys(doc, "", "") if not _generalise(k, documented)]
    assert missing == []
