"""What `pulumi preview`/`up` run, ``infra/__main__.py``, evaluates the prod stack (guardrails
enabled) on a tree with no ``build/`` directory: the program builds the Lambda package itself.

pip is replaced by a recorder here (the real pip build is
tests/integration/guardrails/test_lambda_package_build.py); everything else is the real program
under Pulumi's mocks.
"""

from __future__ import annotations

import runpy
import shutil
from pathlib import Path
from typing import Any

import pulumi
import pytest

from infra import lambda_package, program
from infra.lambda_package import LambdaPackageError
from infra.offline import REPO_ROOT, _as_pulumi_config, _Mocks, load_stack_yaml

MAIN = REPO_ROOT / "infra" / "__main__.py"


def _run_main(stack: str) -> _Mocks:
    config = _as_pulumi_config(load_stack_yaml(stack))
    mocks = _Mocks(config["aws:region"])
    pulumi.runtime.set_mocks(mocks, project="coreburst", stack=stack, preview=True)
    pulumi.runtime.set_all_config(config)

    @pulumi.runtime.test
    def run() -> None:
        runpy.run_path(str(MAIN), run_name="__main__")

    run()
    return mocks


@pytest.fixture
def fresh_tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The package goes to <tmp>/build/lambda; <tmp>/build does not exist yet."""
    dest = tmp_path / "build" / "lambda"
    assert not dest.parent.exists()
    monkeypatch.setattr(program, "LAMBDA_PACKAGE", dest)
    return dest


def test_prod_evaluates_through_main_without_a_prebuilt_package(
    fresh_tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[Path] = []

    def pip(root: Path, target: Path) -> None:
        """pip's stand-in: records the project and puts its handler where pip would."""
        calls.append(root)
        (target / "guardrails").mkdir()
        shutil.copy2(root / "guardrails" / "lambda_handler.py", target / "guardrails")

    monkeypatch.setattr(lambda_package, "pip_install", pip)
    mocks = _run_main("prod")

    assert calls == [REPO_ROOT], "built once, from this project (`.[guardrails]`)"
    assert (fresh_tree / "guardrails" / "lambda_handler.py").is_file()
    functions = [r for r in mocks.resources if r.typ == "aws:lambda/function:Function"]
    assert len(functions) == 1
    code: Any = functions[0].inputs["code"]
    assert Path(getattr(code, "path", "")) == fresh_tree
    assert any(r.typ == "aws:fsx/lustreFileSystem:LustreFileSystem" for r in mocks.resources)
    # Reuse of a fresh package is tested on a private copy of the sources
    # (tests/unit/guardrails/test_lambda_package.py): this tree's guardrails/ may change mid-run.


def test_a_package_that_cannot_be_built_stops_before_any_resource(
    fresh_tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def offline(root: Path, target: Path) -> None:
        raise LambdaPackageError(
            "could not build the guardrails Lambda package: pip install failed (offline)"
        )

    monkeypatch.setattr(lambda_package, "pip_install", offline)
    config = _as_pulumi_config(load_stack_yaml("prod"))
    mocks = _Mocks(config["aws:region"])
    pulumi.runtime.set_mocks(mocks, project="coreburst", stack="prod", preview=True)
    pulumi.runtime.set_all_config(config)
    with pytest.raises(pulumi.RunError) as exc:
        runpy.run_path(str(MAIN), run_name="__main__")
    assert str(exc.value).startswith("could not build the guardrails Lambda package")
    assert mocks.resources == []
    assert not fresh_tree.exists()


def test_dev_evaluates_through_main_and_needs_no_package(
    fresh_tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The dev stack (guardrails off, Lustre without EFA) evaluates through the same entry
    point and declares its file system; nothing is built for it."""

    def pip(root: Path, target: Path) -> None:
        raise AssertionError("dev has no Lambda to package")

    monkeypatch.setattr(lambda_package, "pip_install", pip)
    mocks = _run_main("dev")
    assert not fresh_tree.exists()
    assert any(r.typ == "aws:fsx/lustreFileSystem:LustreFileSystem" for r in mocks.resources)
    assert not any(r.typ == "aws:lambda/function:Function" for r in mocks.resources)
