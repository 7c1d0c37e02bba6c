"""The layer contract (docs/architecture.md), enforced by import-linter on the real source:

    coreburst > sandbox > burst > infra > guardrails | policies | onprem | tco > common

A part imports only parts below it; the four products in the middle do not import each other;
common imports none of the others; no product imports the sandbox. The contract lists no
exceptions (no ignore_imports), and every top-level package is under it. ``make arch`` prints
the graph (``tools/import_graph.py``) and runs the same linter.

Also here: listing the commands (``coreburst --help``, ``coreburst tco --help``) imports no
Pulumi or Ansible. The 0.3 s bar for ``coreburst guardrails --help`` is measured in
tests/unit/guardrails/test_cli_import_time.py.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"
# Top-level directories that hold no product code: tests, scripts, benchmarks.
NOT_PRODUCT = {"tests", "tools", "benchmarks"}
# The design card's top level: one import root (coreburst) and the three packages it keeps.
TOP_LEVEL_PACKAGES = {"coreburst", "infra", "policies", "guardrails"}


def _config() -> dict[str, Any]:
    doc = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    config: dict[str, Any] = doc["tool"]["importlinter"]
    return config


def _documented_layers() -> list[str]:
    """The layer contract as docs/architecture.md states it to readers ("The layer contract,
    top first: **a > b | c > ...**"), one entry per layer."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    stated = re.search(r"The layer contract, top first:\s*\*\*(.+?)\*\*", text, re.S)
    assert stated, "docs/architecture.md no longer states the layer contract"
    return [" ".join(layer.split()) for layer in stated.group(1).split(" >")]


def _rule_modules() -> set[str]:
    """Every shipped module that defines a guardrail rule (a top-level ``RULE = Rule(...)``)."""
    out = set()
    for home in (ROOT / "guardrails" / "rules", ROOT / "coreburst" / "burst"):
        for path in home.glob("*.py"):
            for node in ast.parse(path.read_text(encoding="utf-8")).body:
                if (
                    isinstance(node, ast.Assign)
                    and [getattr(t, "id", None) for t in node.targets] == ["RULE"]
                    and isinstance(node.value, ast.Call)
                    and getattr(node.value.func, "id", None) == "Rule"
                ):
                    out.add(path.relative_to(ROOT).with_suffix("").as_posix().replace("/", "."))
    return out


def _lint(cwd: Path) -> subprocess.CompletedProcess[str]:
    # PYTHONPATH=cwd: the packages under cwd are the ones analysed, whatever is installed.
    env = {**os.environ, "PYTHONPATH": str(cwd)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--no-logo"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


def test_the_layer_contract_holds() -> None:
    result = _lint(ROOT)
    report = result.stdout + result.stderr
    assert result.returncode == 0, report[report.find("Broken contracts") :] or report
    kept = len(_config()["contracts"])
    assert re.search(rf"Contracts: {kept} kept, 0 broken", report), report


def test_the_contract_lists_no_exceptions() -> None:
    config = _config()
    contracts = config["contracts"]
    # What readers are told is what is enforced.
    assert [c["layers"] for c in contracts if c["type"] == "layers"] == [_documented_layers()]
    for contract in contracts:
        loose = {"ignore_imports", "allow_indirect_imports", "unmatched_ignore_imports_alerting"}
        assert loose.isdisjoint(contract), contract["name"]
    assert "ignore_imports" not in config


def test_every_rule_is_in_the_independence_contract() -> None:
    """Checked against the files: a rule module added anywhere is under the contract."""
    (independence,) = [c for c in _config()["contracts"] if c["type"] == "independence"]
    assert set(independence["modules"]) == _rule_modules()


def test_every_top_level_package_is_under_the_contract() -> None:
    packages = {
        p.name
        for p in ROOT.iterdir()
        if (p / "__init__.py").is_file() and p.name not in NOT_PRODUCT
    }
    assert packages - set(_config()["root_packages"]) == set(), (
        "add these packages to [tool.importlinter] root_packages and to a layer"
    )
    # Issue 24: one import root. Anything else goes under coreburst/.
    assert packages == TOP_LEVEL_PACKAGES


def test_an_import_against_the_contract_breaks_it(tmp_path: Path) -> None:
    """The same contract over a made-up tree with four wrong imports: each is reported."""
    mods = [
        "coreburst/__main__.py", "coreburst/cli.py", "coreburst/core.py", "coreburst/plan.py",
        "coreburst/gitops.py",
        "coreburst/sandbox/__init__.py", "coreburst/burst/__init__.py", "infra/__init__.py",
        "guardrails/__init__.py", "policies/__init__.py", "coreburst/onprem/__init__.py",
        "coreburst/tco/__init__.py", "coreburst/common/__init__.py", "coreburst/__init__.py",
        "guardrails/rules/__init__.py", "guardrails/rules/base.py", "coreburst/cost/__init__.py",
        "guardrails/adapters/__init__.py", "guardrails/stores/__init__.py", "guardrails/idle.py",
        "guardrails/spend.py", "guardrails/egress.py", "guardrails/actuator.py",
        "guardrails/daemon.py", "guardrails/loop.py", "guardrails/cli.py",
        "guardrails/lambda_handler.py",
    ]  # fmt: skip
    for rule in ("budget_relay", "core_idle", "egress_spike"):
        mods.append(f"guardrails/rules/{rule}.py")
    for rule in ("idle_reclaim", "inventory", "spend_limit"):
        mods.append(f"guardrails/rules/{rule}.py")
    for rule in ("ec2_events", "reconcile", "spot_interruption"):  # burst's rules
        mods.append(f"coreburst/burst/{rule}.py")
    for m in mods:
        (tmp_path / m).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / m).touch()
    (tmp_path / "coreburst/common/up.py").write_text("import infra\n")  # bottom imports a product
    (tmp_path / "guardrails/side.py").write_text("import policies\n")  # sibling
    (tmp_path / "coreburst/tco/demo.py").write_text("import coreburst.sandbox\n")  # the sandbox
    (tmp_path / "guardrails/rules/core_idle.py").write_text(  # a rule imports a rule
        "import guardrails.rules.inventory\n"
    )
    (tmp_path / "guardrails/adapters/slurm.py").write_text(  # an adapter imports a rule
        "import guardrails.rules.inventory\n"
    )
    (tmp_path / "guardrails/idle.py").write_text("import subprocess\n")  # a pure module does I/O
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    result = _lint(tmp_path)
    report = result.stdout + result.stderr
    assert result.returncode == 1, report
    assert f"Contracts: 0 kept, {len(_config()['contracts'])} broken" in report, report
    for line in (
        "coreburst.common.up -> infra",
        "guardrails.side -> policies",
        "coreburst.tco.demo -> coreburst.sandbox",
        "guardrails.rules.core_idle -> guardrails.rules.inventory",
        "guardrails.adapters.slurm -> guardrails.rules.inventory",
        "guardrails.idle -> subprocess",
    ):
        assert line in report, report


# -- the README's and docs' map matches the tree ---------------------------------------------------
README = ROOT / "README.md"
# The contract and the layout table live in docs/architecture.md (the README links it).
ARCHITECTURE = ROOT / "docs" / "architecture.md"
PATH_RE = re.compile(r"`((?:[\w.-]+/)+[\w.<>-]*)`")
# Paths that exist once built or run, not in a checkout.
GENERATED = {"build/lambda"}


def _readme_paths(text: str) -> set[str]:
    """Backticked repository paths (``dir/``, ``dir/file.py``) the README names."""
    return {m.group(1) for m in PATH_RE.finditer(text) if "<" not in m.group(1)}


def test_every_path_the_readmes_name_exists() -> None:
    missing = []
    for readme in (README, ROOT / "ansible" / "README.md", *sorted((ROOT / "docs").glob("*.md"))):
        base = ROOT if readme == README else readme.parent
        # Rows of the layout table name paths under their directory: checked below.
        text = "\n".join(
            ln
            for ln in readme.read_text(encoding="utf-8").splitlines()
            if not re.match(r"\| `[\w/]+/` \|", ln)
        )
        for rel in sorted(_readme_paths(text) - GENERATED):
            if not ((base / rel).exists() or (ROOT / rel).exists()):
                missing.append(f"{readme.relative_to(ROOT)}: {rel}")
    assert missing == []


def test_every_file_the_layout_table_names_is_in_its_directory() -> None:
    """A row ``| `tco/` | `model.py`, `data/` ... |`` names files under ``tco/``."""
    missing = []
    for line in _layout().splitlines():
        row = re.match(r"\| `([\w/]+/)` \| (.*)\|$", line)
        if not row:
            continue
        for name in re.findall(r"`([^`]+)`", row.group(2)):
            if re.fullmatch(r"[\w./-]+\.(?:py|ya?ml|md)|[\w-]+/", name):
                base = ROOT / row.group(1)
                if not ((base / name).exists() or (ROOT / name).exists()):
                    missing.append(f"{row.group(1)}{name}")
    assert missing == []


def test_the_layout_names_every_module() -> None:
    """Every product module is one hop from the layout: its directory's row names it (or the
    layout names its path), so the map cannot fall behind the tree."""
    layout = _layout()
    rows = {
        row.group(1): set(re.findall(r"`([^`]+)`", row.group(2)))
        for line in layout.splitlines()
        if (row := re.match(r"\| `([\w/]+/)` \| (.*)\|$", line))
    }
    named = set(re.findall(r"`([^`]+)`", layout))
    missing = []
    for package in sorted(TOP_LEVEL_PACKAGES):
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if path.name in {"__init__.py", "__main__.py"} or "/playbooks/" in rel:
                continue
            in_row = any(rel.startswith(d) and rel[len(d) :] in names for d, names in rows.items())
            if not in_row and rel not in named:
                missing.append(rel)
    assert missing == []


def _layout() -> str:
    return ARCHITECTURE.read_text(encoding="utf-8").split("\n## Layout\n")[1]


def test_every_rule_component_and_role_is_one_hop_from_the_readme() -> None:
    layout = _layout()
    rules = sorted(p.stem for p in (ROOT / "guardrails" / "rules").glob("*.py"))
    components = sorted(p.stem for p in (ROOT / "infra" / "components").glob("*.py"))
    roles = sorted(p.name for p in (ROOT / "ansible" / "roles").iterdir() if p.is_dir())
    expected = [
        *(f"`guardrails/rules/{r}.py`" for r in rules if r != "__init__"),
        *(f"`infra/components/{c}.py`" for c in components if c != "__init__"),
        *(f"`ansible/roles/{r}`" for r in roles),
        *(
            f"`{p.name}/`"
            for p in ROOT.iterdir()
            if ((p / "__init__.py").is_file() and p.name != "tests")
            or p.name in {"ansible", "tools", "benchmarks"}
        ),
    ]
    assert [e for e in expected if e not in layout] == []


def test_the_readme_states_the_contract_pyproject_enforces() -> None:
    assert "docs/architecture.md" in README.read_text(encoding="utf-8")
    text = " ".join(ARCHITECTURE.read_text(encoding="utf-8").replace("**", "").split())
    (layers,) = [c["layers"] for c in _config()["contracts"] if c["type"] == "layers"]
    assert " > ".join(layers) in text
