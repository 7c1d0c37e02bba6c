"""node_health builds NHC from its release archive, verified by checksum, idempotently.

NHC is distributed as release archives (https://github.com/mej/nhc/releases,
lbnl-nhc-<version>.tar.gz), built with ``./configure --prefix=/usr --sysconfdir=/etc
--libexecdir=/usr/libexec && make install``; no Debian/Ubuntu archive carries lbnl-nhc.

The archive here is MADE UP: it mimics the release's layout (top directory lbnl-nhc-<version>
with a configure script that turns Makefile.in into Makefile, and an install rule honouring
DESTDIR that puts nhc in $(sbindir) and the checks in $(sysconfdir)/nhc/scripts), not its code.
get_url, unarchive, sh, make and tar are the machine's own; it is served on 127.0.0.1.
"""

from __future__ import annotations

import hashlib
import re
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.apt_sandbox import require_tools, run_role, serve

pytestmark = pytest.mark.integration

VERSION = "1.4.3"

CONFIGURE = """#!/bin/sh
# Made-up stand-in for NHC's autoconf configure: same options, same outputs (Makefile).
prefix=/usr/local; sysconfdir='${prefix}/etc'; libexecdir='${prefix}/libexec'
for arg in "$@"; do
  case "$arg" in
    --prefix=*) prefix=${arg#*=} ;;
    --sysconfdir=*) sysconfdir=${arg#*=} ;;
    --libexecdir=*) libexecdir=${arg#*=} ;;
    *) echo "configure: unknown option $arg" >&2; exit 1 ;;
  esac
done
sed -e "s|@prefix@|$prefix|" -e "s|@sysconfdir@|$sysconfdir|" -e "s|@libexecdir@|$libexecdir|" \\
  Makefile.in > Makefile
echo "configure: prefix=$prefix" > config.log
"""

MAKEFILE_IN = """# Made-up stand-in for NHC's automake Makefile.in (install rules only).
prefix = @prefix@
sbindir = $(prefix)/sbin
sysconfdir = @sysconfdir@
libexecdir = @libexecdir@

install:
\tinstall -D -m 0755 nhc $(DESTDIR)$(sbindir)/nhc
\tinstall -D -m 0644 scripts/common.nhc $(DESTDIR)$(sysconfdir)/nhc/scripts/common.nhc
\tinstall -D -m 0755 helpers/node-mark-offline $(DESTDIR)$(libexecdir)/nhc/node-mark-offline
"""


def _release_tarball(dest: Path) -> Path:
    top = dest.parent / f"lbnl-nhc-{VERSION}"
    files = {
        "configure": (CONFIGURE, 0o755),
        "Makefile.in": (MAKEFILE_IN, 0o644),
        "nhc": (f"#!/bin/sh\necho 'NHC version {VERSION} (made-up stand-in)'\n", 0o755),
        "scripts/common.nhc": ("# made-up check library\n", 0o644),
        "helpers/node-mark-offline": ("#!/bin/sh\nexit 0\n", 0o755),
    }
    for rel, (text, mode) in files.items():
        path = top / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        path.chmod(mode)
    with tarfile.open(dest, "w:gz") as tar:
        tar.add(top, arcname=top.name)
    return dest


@pytest.fixture
def release(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """(URL, "sha256:<hex>") of the made-up release archive served on 127.0.0.1."""
    require_tools("make", "tar")
    served = tmp_path / "releases"
    served.mkdir()
    archive = _release_tarball(served / f"lbnl-nhc-{VERSION}.tar.gz")
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    with serve(served) as url:
        yield url + archive.name, f"sha256:{digest}"


def _vars(root: Path, url: str, checksum: str) -> dict[str, Any]:
    return {
        "coreburst_root": str(root),
        # Sandbox: no apt, no services; the NHC build is switched on by itself.
        "coreburst_manage_system": False,
        "node_health_install": True,
        "node_health_url": url,
        "node_health_checksum": checksum,
        "coreburst_gpu_count": 8,
        "coreburst_hcas": [{"name": "mlx5_0", "rate": 400}],
    }


def _changed(recap: str) -> int:
    m = re.search(r"changed=(\d+)", recap)
    assert m, recap
    return int(m.group(1))


def test_nhc_is_built_from_the_release_and_rerun_changes_nothing(
    tmp_path: Path, release: tuple[str, str]
) -> None:
    url, checksum = release
    root = tmp_path / "node"
    out = run_role("node_health", tmp_path, _vars(root, url, checksum), gather_facts=True)
    assert out.returncode == 0, out.stdout + out.stderr

    nhc = root / "usr/sbin/nhc"
    run = subprocess.run([str(nhc)], capture_output=True, text=True, check=True)
    assert f"NHC version {VERSION}" in run.stdout
    assert (root / "etc/nhc/scripts/common.nhc").is_file()  # --sysconfdir=/etc honoured
    assert (root / "usr/libexec/nhc/node-mark-offline").is_file()  # --libexecdir honoured
    assert "check_hw_ib 400 mlx5_0:1" in (root / "etc/nhc/nhc.conf").read_text()

    again = run_role("node_health", tmp_path, _vars(root, url, checksum), gather_facts=True)
    assert again.returncode == 0, again.stdout + again.stderr
    assert _changed(again.stdout.split("PLAY RECAP")[1]) == 0, again.stdout


def test_checksum_mismatch_fails_and_installs_nothing(
    tmp_path: Path, release: tuple[str, str]
) -> None:
    url, _ = release
    root = tmp_path / "node"
    wrong = "sha256:" + "0" * 64
    out = run_role("node_health", tmp_path, _vars(root, url, wrong), gather_facts=True)
    assert out.returncode != 0
    assert "did not match" in out.stdout
    assert not (root / "usr/sbin/nhc").exists()
    assert not list((root / "usr/local/src").glob("lbnl-nhc-*"))


def test_unset_checksum_is_refused_with_one_clear_line(
    tmp_path: Path, release: tuple[str, str]
) -> None:
    url, _ = release
    root = tmp_path / "node"
    out = run_role("node_health", tmp_path, _vars(root, url, ""), gather_facts=True)
    assert out.returncode != 0
    assert "node_health_checksum is empty: set it to" in out.stdout
    assert not (root / "usr/local/src").exists()
