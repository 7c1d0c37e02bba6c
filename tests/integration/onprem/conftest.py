"""Fixtures for the on-prem role tests: an apt sandbox and a signed repository served on
127.0.0.1 (tests/helpers/apt_sandbox.py says what is real and what is made up)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.apt_sandbox import AptRepo, AptSandbox, GpgKey, require_tools, serve
from tests.helpers.prereq import require


@pytest.fixture
def sandbox(tmp_path: Path) -> AptSandbox:
    if os.geteuid() != 0:
        require("dpkg --root installs need root (CI runs as root)")
    require_tools("gpg", "dpkg-deb", "apt-ftparchive", "apt-get")
    box = AptSandbox(tmp_path / "root")
    box.check()
    return box


@pytest.fixture
def repo(tmp_path: Path) -> Iterator[AptRepo]:
    """An empty signed repository served on 127.0.0.1; add .debs then call publish()."""
    require_tools("gpg", "dpkg-deb", "apt-ftparchive")
    key = GpgKey.create(tmp_path / "gnupg-vendor", "stand-in vendor <vendor@example.invalid>")
    path = tmp_path / "repo"
    path.mkdir()
    with serve(path) as url:
        yield AptRepo(path, key, url)
    key.stop_agent()
