"""Packaging: each product's runtime is an extra, the daemon's installs carry only its own.

Read from what pip installed (``importlib.metadata``: the metadata setuptools wrote from
pyproject.toml) and from the source (every import statement, by its AST), not from our own
description of either:

- the guardrails extra's closure (base dependencies + the extra + everything they require) has
  no Pulumi, Ansible or matplotlib: the container and the Lambda package are built from it;
- the container installs exactly ``.[guardrails]``;
- each package's third-party imports are declared by the base or by its product's extra.
"""

from __future__ import annotations

import ast
import importlib.metadata as md
import re
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
CONTAINERFILE = ROOT / "guardrails" / "deploy" / "Containerfile"
FIRST_PARTY = {p.name for p in ROOT.iterdir() if (p / "__init__.py").is_file()}
# Distributions that are not the daemon's runtime: the other products' and the test tools'.
NOT_DAEMON = re.compile(r"^(pulumi.*|ansible.*|matplotlib|moto|pytest.*)$")
# Which extra declares the imports of each package (the base always counts); "coreburst" is
# the root's own modules (the command), its subpackages are listed each with their product.
EXTRA_OF = {
    "coreburst": None,
    "coreburst/common": None,
    "coreburst/burst": "guardrails",  # the power programs: boto3, and the daemon's state
    "coreburst/onprem": "onprem",
    "coreburst/tco": "tco",
    "coreburst/sandbox": "dev",
    "guardrails": "guardrails",
    "infra": "infra",
    "policies": "infra",
}
# Modules a declared distribution ships under another distribution's name, at a version it pins.
SHIPPED_WITH = {"pydantic-core": "pydantic"}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirements(dist: str, extras: frozenset[str] = frozenset()) -> list[Requirement]:
    """``dist``'s requirements that apply with ``extras`` on this interpreter."""
    out = []
    for line in md.requires(dist) or []:
        req = Requirement(line)
        if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in (extras or {""})):
            out.append(req)
    return out


def _declared(extra: str | None) -> set[str]:
    """Distributions coreburst names for ``extra`` (with the base), following its own extras
    (``coreburst[guardrails]`` inside the infra extra)."""
    names: set[str] = set()
    todo = [frozenset({extra} if extra else set())]
    seen: set[frozenset[str]] = set()
    while todo:
        extras = todo.pop()
        if extras in seen:
            continue
        seen.add(extras)
        for req in _requirements("coreburst", extras):
            if _norm(req.name) == "coreburst":
                todo.append(frozenset(req.extras))
            else:
                names.add(_norm(req.name))
    return names


def _closure(extra: str) -> set[str]:
    """Every distribution ``pip install '.[extra]'`` installs, from the installed metadata."""
    todo = [(name, frozenset[str]()) for name in _declared(extra)]
    seen: set[str] = set()
    while todo:
        name, extras = todo.pop()
        key = f"{name}{sorted(extras)}"
        if key in seen:
            continue
        seen.add(key)
        for req in _requirements(name, extras):
            todo.append((_norm(req.name), frozenset(req.extras)))
    return {k.split("[")[0] for k in seen}


def test_the_guardrails_closure_holds_no_other_product() -> None:
    closure = _closure("guardrails")
    assert {"boto3", "pydantic-settings", "slack-sdk", "structlog", "orjson"} <= closure
    assert sorted(n for n in closure if NOT_DAEMON.match(n)) == []
    # ...while the other extras do bring their products (the check can fail).
    assert "pulumi" in _closure("infra") and "pulumi-policy" in _closure("infra")
    assert "ansible-core" in _closure("onprem") and "matplotlib" in _closure("tco")


def test_the_container_installs_exactly_the_guardrails_extra() -> None:
    lines = [ln.strip() for ln in CONTAINERFILE.read_text().replace("\\\n", " ").splitlines()]
    installs = [
        shlex.split(ln.removeprefix("RUN "))
        for ln in lines
        if ln.startswith("RUN ") and "pip install" in ln
    ]
    assert len(installs) == 1, installs
    targets = [a for a in installs[0][installs[0].index("install") + 1 :] if not a.startswith("-")]
    assert targets == [".[guardrails]"]
    copied = {
        Path(src).name
        for ln in lines
        if ln.startswith("COPY ") and not ln.startswith("COPY --from")
        for src in ln.split()[1:-1]
    }
    assert copied.isdisjoint({"infra", "policies", "coreburst", "tests"}), copied
    # The daemon's part of the import root only: the command and common/.
    assert {"cli.py", "common", "guardrails"} <= copied


def _imports(path: Path) -> Iterator[tuple[str, int]]:
    """Top-level names of absolute imports, skipping ``if TYPE_CHECKING:`` blocks (stubs)."""

    def walk(nodes: list[ast.stmt]) -> Iterator[tuple[str, int]]:
        for node in nodes:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                yield from walk(node.orelse)
                continue
            for sub in ast.walk(node):
                if isinstance(sub, ast.Import):
                    yield from ((a.name.split(".")[0], sub.lineno) for a in sub.names)
                elif isinstance(sub, ast.ImportFrom) and sub.level == 0 and sub.module:
                    yield sub.module.split(".")[0], sub.lineno

    yield from walk(ast.parse(path.read_text(encoding="utf-8")).body)


@pytest.mark.parametrize("package", sorted(EXTRA_OF))
def test_every_third_party_import_is_declared(package: str) -> None:
    declared = _declared(EXTRA_OF[package])
    providers = md.packages_distributions()
    missing = []
    files = (
        (ROOT / package).glob("*.py") if package == "coreburst" else (ROOT / package).rglob("*.py")
    )
    for path in sorted(files):
        for name, line in _imports(path):
            if name in sys.stdlib_module_names or name in FIRST_PARTY or name == "__future__":
                continue
            dists = {_norm(d) for d in providers.get(name, [name])}
            dists |= {SHIPPED_WITH[d] for d in dists if d in SHIPPED_WITH}
            if not dists & declared:
                missing.append(f"{path.relative_to(ROOT)}:{line} imports {name}")
    extra = EXTRA_OF[package]
    where = f"the {extra} extra" if extra else "dependencies"
    assert missing == [], f"declare in pyproject.toml ({where}): {missing}"


def test_the_wheel_leaves_the_sandbox_and_tests_out() -> None:
    """setuptools' own discovery with our [tool.setuptools.packages.find]: one import root plus
    the three top-level packages; the sandbox (coreburst.sandbox) and tests never ship."""
    import tomllib

    from setuptools import find_packages

    find = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    shipped = set(find_packages(ROOT, **find["packages"]["find"]))
    assert {p.split(".")[0] for p in shipped} == {"coreburst", "guardrails", "infra", "policies"}
    assert {"coreburst.common", "coreburst.burst", "coreburst.onprem", "coreburst.tco"} <= shipped
    assert not any(p.startswith(("coreburst.sandbox", "tests", "tools")) for p in shipped)
