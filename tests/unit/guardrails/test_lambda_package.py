"""The guardrails Lambda package is what `pip install '.[guardrails]'` installs: every
third-party package the handler imports is in the base dependencies or the guardrails extra,
pyproject.toml is the one list, and the package is rebuilt when stale.

Anything missing from the package is an ImportError on the first scheduled run, long after
`pulumi up` succeeded. The real pip build is
tests/integration/guardrails/test_lambda_package_build.py.
"""

from __future__ import annotations

import importlib.metadata as md
import os
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Sequence
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from infra import lambda_package
from infra.lambda_package import (
    LambdaPackageError,
    ensure_lambda_package,
    lambda_requirements,
    pip_install,
)

ROOT = Path(__file__).parents[3]
# Imported only when present (structlog's console niceties, botocore's CA bundle lookup), or
# no distribution at all (Cython's runtime marker).
OPTIONAL = {"attr", "colorama", "better_exceptions", "certifi", "cython_runtime"}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _closure(requirements: Sequence[str]) -> set[str]:
    """Every distribution these requirements install, read from the installed metadata."""
    todo = [Requirement(r) for r in requirements]
    seen: set[str] = set()
    while todo:
        req = todo.pop()
        key = f"{_norm(req.name)}{sorted(req.extras)}"
        if key in seen:
            continue
        seen.add(key)
        for line in md.requires(req.name) or []:
            sub = Requirement(line)
            if sub.marker is None or any(
                sub.marker.evaluate({"extra": e}) for e in (req.extras or {""})
            ):
                todo.append(sub)
    return {k.split("[")[0] for k in seen}


def test_every_import_of_the_handler_is_packaged() -> None:
    """Import the handler and every guardrails module; each third-party module that loads must
    come with `pip install '.[guardrails]'` (its distribution in the requirements' closure)."""
    code = (
        "import sys, importlib, pkgutil, guardrails, guardrails.lambda_handler as h\n"
        "for m in pkgutil.walk_packages(guardrails.__path__, 'guardrails.'):\n"
        "    importlib.import_module(m.name)\n"
        "print('\\n'.join(sorted({m.split('.')[0] for m in sys.modules})))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    # What the interpreter loads before any code runs (site, and a distribution's own
    # sitecustomize such as Debian's) comes with the runtime, not with the handler.
    loaded = "import sys; print('\\n'.join({m.split('.')[0] for m in sys.modules}))"
    bare = subprocess.run(
        [sys.executable, "-c", loaded], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    third_party = {
        m
        for m in set(out) - set(bare)
        if m not in sys.stdlib_module_names
        and not m.startswith("_")
        and m not in {"guardrails", "coreburst", *OPTIONAL}
    }
    providers = md.packages_distributions()
    packaged = _closure(lambda_requirements())
    missing = sorted(
        m for m in third_party if not {_norm(d) for d in providers.get(m, [m])} & packaged
    )
    assert {"orjson", "structlog", "boto3", "botocore", "slack_sdk"} <= third_party
    assert missing == [], f"imported by the Lambda handler but not packaged: {missing}"


def test_requirements_are_the_base_and_the_guardrails_extra() -> None:
    doc = tomllib.loads((ROOT / "pyproject.toml").read_text())
    project = doc["project"]
    assert lambda_requirements() == [
        *project["dependencies"],
        *project["optional-dependencies"]["guardrails"],
    ]
    assert "lambda" not in doc.get("tool", {}).get("coreburst", {}), "no second list"
    # The Makefile target runs the module; it keeps no second list of packages.
    recipe = (ROOT / "Makefile").read_text().split("\nlambda-package:")[1].split("\n\n")[0]
    assert "-m infra.lambda_package" in recipe
    assert "pip install" not in recipe and not re.search(r"'[A-Za-z-]+[<>=]", recipe)


def test_no_guardrails_extra_is_one_line(tmp_path: Path) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[project]\ndependencies = ["pydantic>=2.7,<3"]\n')
    with pytest.raises(LambdaPackageError) as exc:
        lambda_requirements(pyproject)
    assert str(exc.value) == (
        "pyproject.toml: [project.optional-dependencies] has no guardrails extra; add the "
        "daemon's runtime packages there"
    )


def _tree(tmp_path: Path) -> Path:
    """A copy of what the wheel is built from, to change sources without touching ours."""
    root = tmp_path / "src"
    root.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, root / name)
    for pkg in ("coreburst", "guardrails", "infra", "policies"):
        shutil.copytree(ROOT / pkg, root / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    return root


class Recorder:
    """Stands in for pip only (the real pip run is an integration test): records which project
    it was asked to install and puts its handler module where pip would."""

    def __init__(self) -> None:
        self.calls: list[Path] = []

    def __call__(self, root: Path, target: Path) -> None:
        self.calls.append(root)
        (target / "guardrails").mkdir()
        shutil.copy2(root / "guardrails" / "lambda_handler.py", target / "guardrails")


def test_builds_when_missing_reuses_when_fresh_rebuilds_when_stale(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    dest = tmp_path / "out" / "build" / "lambda"
    pip = Recorder()
    assert ensure_lambda_package(dest, root=root, install=pip) == dest
    assert pip.calls == [root]
    assert (dest / "guardrails" / "lambda_handler.py").is_file()

    ensure_lambda_package(dest, root=root, install=pip)
    assert len(pip.calls) == 1, "an up-to-date package is reused"

    handler = root / "guardrails" / "lambda_handler.py"
    handler.write_text(handler.read_text() + "\n# changed\n")
    ensure_lambda_package(dest, root=root, install=pip)
    assert len(pip.calls) == 2, "a changed source rebuilds"
    assert (dest / "guardrails" / "lambda_handler.py").read_text().endswith("# changed\n")

    ensure_lambda_package(dest, root=root, install=pip, force=True)
    assert len(pip.calls) == 3

    # Any file of the wheel counts, not only the daemon's: common/ ships in it too.
    catalog = root / "coreburst" / "common" / "data" / "catalog.yaml"
    catalog.write_text(catalog.read_text() + "\n# changed\n")
    ensure_lambda_package(dest, root=root, install=pip)
    assert len(pip.calls) == 4
    (root / "pyproject.toml").write_text((root / "pyproject.toml").read_text() + "\n# x\n")
    ensure_lambda_package(dest, root=root, install=pip)
    assert len(pip.calls) == 5


def test_an_install_without_the_handler_is_refused(tmp_path: Path) -> None:
    """A wheel that lost guardrails (a packages.find pattern gone wrong) never becomes the
    package: Lambda would fail on its first run."""
    root = _tree(tmp_path)
    dest = tmp_path / "build" / "lambda"
    with pytest.raises(LambdaPackageError, match=r"holds no guardrails/lambda_handler\.py"):
        ensure_lambda_package(dest, root=root, install=lambda r, t: None)
    assert not dest.exists()


def test_a_failed_build_keeps_the_previous_package(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    dest = tmp_path / "build" / "lambda"
    ensure_lambda_package(dest, root=root, install=Recorder())

    def broken(root: Path, target: Path) -> None:
        raise LambdaPackageError("no index")

    with pytest.raises(LambdaPackageError):
        ensure_lambda_package(dest, root=root, install=broken, force=True)
    assert (dest / "guardrails" / "lambda_handler.py").is_file()
    assert sorted(p.name for p in dest.parent.iterdir()) == ["lambda", "lambda.sha256"]


def test_unreachable_index_is_one_clear_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Real pip against an index nobody listens on (port 9, discard): the error names the
    problem and what to do, in one line."""
    # Only that index: no pip config files (mirrors, find-links) and no such env settings.
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    for var in ("PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_NO_INDEX"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    with pytest.raises(LambdaPackageError) as exc:
        pip_install(_tree(tmp_path), tmp_path / "target")
    message = str(exc.value)
    assert "\n" not in message
    # Building the wheel needs setuptools from the index first (build isolation).
    assert message.startswith(
        "could not build the guardrails Lambda package: building the wheel failed"
    )
    assert "package index" in message and "make lambda-package" in message


def test_cli_exits_2_with_the_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken(root: Path, target: Path) -> None:
        raise LambdaPackageError("could not build the guardrails Lambda package: offline")

    monkeypatch.setattr(lambda_package, "pip_install", broken)
    assert lambda_package.main(["--dest", str(tmp_path / "b" / "lambda")]) == 2
    assert capsys.readouterr().err == (
        "error: could not build the guardrails Lambda package: offline\n"
    )


@pytest.mark.parametrize("where", ["under-a-file", "read-only"])
def test_an_unwritable_dest_is_one_line_exit_2(tmp_path: Path, where: str) -> None:
    """`python -m infra.lambda_package --dest` where nothing can be written (issue 24): one
    line naming the place and the fix, exit 2, no traceback."""
    if where == "under-a-file":
        (tmp_path / "f").write_text("x")
        dest = tmp_path / "f" / "lambda"
    else:
        dest = Path("/proc/coreburst-lambda")  # procfs: no directory can be made there
    r = subprocess.run(
        [sys.executable, "-m", "infra.lambda_package", "--dest", str(dest)],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert r.returncode == 2, r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("error: cannot write the Lambda package at ")
    assert line.endswith("give --dest a writable directory") and "Traceback" not in r.stderr
