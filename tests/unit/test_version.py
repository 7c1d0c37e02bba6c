"""``coreburst --version`` prints the installed distribution's version (its metadata, the one
that pip reads; tests/integration/test_wheel_install.py runs it from the wheel)."""

from __future__ import annotations

import importlib.metadata
import tomllib
from pathlib import Path

from typer.testing import CliRunner

from coreburst.cli import app

ROOT = Path(__file__).resolve().parents[2]


def test_version_is_the_installed_distributions_and_pyprojects() -> None:
    out = CliRunner().invoke(app, ["--version"])
    assert out.exit_code == 0, out.output
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert out.output == f"coreburst {importlib.metadata.version('coreburst')}\n"
    assert out.output == f"coreburst {declared}\n"


def test_the_license_file_and_the_changelog_ship_and_agree() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "Apache-2.0" and project["license-files"] == ["LICENSE"]
    license_text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in license_text and "Version 2.0, January 2004" in license_text
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert f"## [{project['version']}] - " in changelog  # the release this tree is
    assert "include CHANGELOG.md" in (ROOT / "MANIFEST.in").read_text()  # in the sdist
