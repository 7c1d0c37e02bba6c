"""The guardrails Lambda package ships every third-party package the handler imports, takes
those packages (and their versions) from pyproject.toml only, and is rebuilt when stale.

The Lambda runtime provides boto3/botocore only; anything else missing from the package is an
ImportError on the first scheduled run, long after `pulumi up` succeeded. The real pip build is
tests/integration/guardrails/test_lambda_package_build.py.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Sequence
from pathlib import Path

import pytest

from infra import lambda_package
from infra.lambda_package import (
    INFRA_FILES,
    LambdaPackageError,
    ensure_lambda_package,
    lambda_requirements,
    pip_install,
)

ROOT = Path(__file__).parents[3]
PROVIDED = {"boto3", "botocore", "s3transfer", "jmespath", "dateutil", "urllib3", "six"}
# imported only when present: structlog's console niceties, botocore's CA bundle lookup
OPTIONAL = {
    "rich",
    "attr",
    "pygments",
    "colorama",
    "better_exceptions",
    "certifi",
    "cython_runtime",
}
DIST = {  # import name -> distribution name, where they differ
    "yaml": "PyYAML",
    "slack_sdk": "slack-sdk",
    "pydantic_settings": "pydantic-settings",
    "pydantic_core": "pydantic",  # installed with pydantic
    "annotated_types": "pydantic",
    "typing_extensions": "pydantic",
    "typing_inspection": "pydantic",
    "prometheus_client": "prometheus-client",
    "dotenv": "pydantic-settings",
}


def _name(req: str) -> str:
    match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", req)
    assert match, req
    return re.sub(r"[-_.]+", "-", match.group(0)).lower()


def test_every_import_of_the_handler_is_packaged() -> None:
    code = (
        "import sys, guardrails.lambda_handler as h; h.handler.__code__; "
        "from guardrails import aws, daemon, budget_relay, state_dynamo; "
        "print('\\n'.join(sorted({m.split('.')[0] for m in sys.modules})))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    third_party = {
        m
        for m in out
        if m not in sys.stdlib_module_names
        and not m.startswith("_")
        and m not in {"guardrails", "common", *PROVIDED, *OPTIONAL}
    }
    packaged = {_name(r) for r in lambda_requirements()}
    missing = sorted(m for m in third_party if _name(DIST.get(m, m)) not in packaged)
    assert "orjson" in third_party and "structlog" in third_party
    assert missing == [], f"imported by the Lambda handler but not packaged: {missing}"


def test_versions_come_from_project_dependencies_only() -> None:
    doc = tomllib.loads((ROOT / "pyproject.toml").read_text())
    project = {_name(r): r for r in doc["project"]["dependencies"]}
    reqs = lambda_requirements()
    assert reqs == [project[_name(n)] for n in doc["tool"]["coreburst"]["lambda"]["dependencies"]]
    # The Makefile target runs the module; it keeps no second list of packages.
    recipe = (ROOT / "Makefile").read_text().split("\nlambda-package:")[1].split("\n\n")[0]
    assert "-m infra.lambda_package" in recipe
    assert "pip install" not in recipe and not re.search(r"'[A-Za-z-]+[<>=]", recipe)


def test_a_name_missing_from_project_dependencies_is_one_line(tmp_path: Path) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(
        '[project]\ndependencies = ["pydantic>=2.7,<3"]\n'
        '[tool.coreburst.lambda]\ndependencies = ["pydantic", "orjson"]\n'
    )
    with pytest.raises(LambdaPackageError) as exc:
        lambda_requirements(pyproject)
    assert str(exc.value) == (
        "pyproject.toml: [tool.coreburst.lambda] names orjson, which [project].dependencies "
        "does not list; add them there (with their versions)"
    )


def _tree(tmp_path: Path) -> Path:
    """A copy of what the package is built from, to change sources without touching ours."""
    root = tmp_path / "src"
    shutil.copytree(ROOT / "guardrails", root / "guardrails")
    for rel in INFRA_FILES:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, root / rel)
    shutil.copy2(ROOT / "pyproject.toml", root / "pyproject.toml")
    return root


class Recorder:
    """Stands in for pip only (the real pip run is an integration test): records what it was
    asked to install and leaves a marker where a wheel would go."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def __call__(self, requirements: Sequence[str], target: Path) -> None:
        self.calls.append(list(requirements))
        (target / "installed.txt").write_text("\n".join(requirements))


def test_builds_when_missing_reuses_when_fresh_rebuilds_when_stale(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    dest = tmp_path / "out" / "build" / "lambda"
    pip = Recorder()
    assert ensure_lambda_package(dest, root=root, install=pip) == dest
    assert pip.calls == [lambda_requirements(root / "pyproject.toml")]
    assert (dest / "guardrails" / "lambda_handler.py").is_file()
    assert all((dest / rel).is_file() for rel in INFRA_FILES)
    assert not list(dest.rglob("__pycache__"))

    ensure_lambda_package(dest, root=root, install=pip)
    assert len(pip.calls) == 1, "an up-to-date package is reused"

    handler = root / "guardrails" / "lambda_handler.py"
    handler.write_text(handler.read_text() + "\n# changed\n")
    ensure_lambda_package(dest, root=root, install=pip)
    assert len(pip.calls) == 2, "a changed source rebuilds"
    assert (dest / "guardrails" / "lambda_handler.py").read_text().endswith("# changed\n")

    ensure_lambda_package(dest, root=root, install=pip, force=True)
    assert len(pip.calls) == 3


def test_a_failed_build_keeps_the_previous_package(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    dest = tmp_path / "build" / "lambda"
    ensure_lambda_package(dest, root=root, install=Recorder())

    def broken(requirements: Sequence[str], target: Path) -> None:
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
        pip_install(["orjson>=3.9,<4"], tmp_path)
    message = str(exc.value)
    assert "\n" not in message
    assert message.startswith("could not build the guardrails Lambda package: pip install failed")
    assert "package index" in message and "make lambda-package" in message


def test_cli_exits_2_with_the_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken(requirements: Sequence[str], target: Path) -> None:
        raise LambdaPackageError("could not build the guardrails Lambda package: offline")

    monkeypatch.setattr(lambda_package, "pip_install", broken)
    assert lambda_package.main(["--dest", str(tmp_path / "b" / "lambda")]) == 2
    assert capsys.readouterr().err == (
        "error: could not build the guardrails Lambda package: offline\n"
    )
