"""Every test file stands alone: no module under tests/ imports a test module (``test_*``) or a
conftest.py. What several files share lives in tests/helpers/; fixtures a directory shares stay
in its conftest.py, which pytest loads by itself. So a test file can be moved, renamed or
deleted without breaking another, and pytest imports each file once."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"


def is_test_module(name: str) -> bool:
    """``tests.<...>.test_x`` or ``tests.<...>.conftest``, or a name inside one."""
    parts = name.split(".")
    return parts[0] == "tests" and any(p.startswith("test_") or p == "conftest" for p in parts)


def imported(source: str, path: Path) -> list[tuple[int, str]]:
    """(line, dotted name) of every module, and module member, that ``source`` (the file
    ``path`` under ROOT) imports, at any depth; relative imports resolved against its package."""
    package = list(path.relative_to(ROOT).with_suffix("").parts[:-1])
    found = []
    for node in ast.walk(ast.parse(source, str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            found += [(node.lineno, module)]
            found += [(node.lineno, f"{module}.{a.name}") for a in node.names]
    return found


def test_no_file_under_tests_imports_a_test_module_or_a_conftest() -> None:
    files = sorted(TESTS.rglob("*.py"))
    assert len([p for p in files if p.name.startswith("test_")]) > 100
    offenders = sorted(
        f"{path.relative_to(ROOT)}:{line} imports {name}"
        for path in files
        for line, name in imported(path.read_text(), path)
        if is_test_module(name)
    )
    assert offenders == [], "import it from tests/helpers/ instead:\n" + "\n".join(offenders)


def test_the_walk_sees_every_form_of_import_and_passes_helpers() -> None:
    source = (
        "from tests.unit.burst.conftest import stack_map\n"
        "from .test_power import _templates\n"
        "from . import conftest\n"
        "from .. import test_packaging\n"
        "import tests.unit.guardrails.test_slack_limits\n"
        "def f():\n"
        "    from tests.unit.conftest import StoreOpener\n"
        "from tests.helpers.burst import stack_map as ok\n"
        "from tests import cli_runner\n"
        "from coreburst.burst import power\n"
    )
    found = imported(source, TESTS / "unit" / "burst" / "test_example.py")
    assert sorted({line for line, name in found if is_test_module(name)}) == [1, 2, 3, 4, 5, 7]
    names = {name for _, name in found}
    assert {"tests.unit.burst.test_power", "tests.unit.burst.conftest"} <= names
    assert {"tests.unit.test_packaging", "tests.unit.conftest.StoreOpener"} <= names
