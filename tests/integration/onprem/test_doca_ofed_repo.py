"""doca_ofed installs the DOCA repository key before apt-get update, checked with real apt.

NVIDIA's "DOCA-Host Installation and Upgrade" guide
(https://docs.nvidia.com/doca/sdk/DOCA-Host+Installation+and+Upgrade, online repo, Deb-based):
fetch GPG-KEY-Mellanox.pub, add ``deb [signed-by=<key>] $DOCA_URL ./``, apt-get update, install
doca-ofed. Here a local repository signed with a throwaway key stands in for the vendor's
(see conftest.py); apt-get, python-apt and dpkg are the machine's own, confined to a sandbox.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.helpers.apt_sandbox import (
    AptRepo,
    AptSandbox,
    GpgKey,
    apt_refusal,
    build_deb,
    run_role,
)

pytestmark = pytest.mark.integration


def _vars(sandbox: AptSandbox, repo: AptRepo, key_url: str) -> dict[str, Any]:
    return {
        "coreburst_root": str(sandbox.root),
        "coreburst_manage_system": True,
        "coreburst_doca_version": "2.9.1",
        "doca_ofed_repo_url": repo.url,
        "doca_ofed_key_url": key_url,
    }


def test_role_installs_the_key_so_apt_update_and_install_succeed(
    tmp_path: Path, sandbox: AptSandbox, repo: AptRepo
) -> None:
    host_files = [Path("/etc/apt/sources.list.d/doca.list"), Path("/etc/apt/keyrings/doca.asc")]
    host_before = [p.exists() for p in host_files]
    build_deb(repo.path, "doca-ofed", "2.9.1-1")
    repo.publish()
    repo.key.export_armored(repo.path / "keys" / "GPG-KEY-Mellanox.pub")

    out = run_role(
        "doca_ofed",
        tmp_path,
        _vars(sandbox, repo, repo.url + "keys/GPG-KEY-Mellanox.pub"),
        env=sandbox.env,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert sandbox.installed("doca-ofed") == "2.9.1-1"  # dpkg put it in the sandbox root

    keyring = sandbox.root / "etc/apt/keyrings/doca.asc"
    source = (sandbox.root / "etc/apt/sources.list.d/doca.list").read_text()
    assert f"deb [signed-by={keyring}] {repo.url} ./" in source
    update = sandbox.run("apt-get", "update")
    assert update.returncode == 0, update.stdout + update.stderr

    # Before the fix, on a fresh node (no index files yet): the same source and no key at the
    # signed-by path -> apt refuses (exit 100).
    keyring.unlink()
    sandbox.forget_indexes()
    update = sandbox.run("apt-get", "update")
    assert update.returncode == 100, update.stdout + update.stderr
    # In the words of the release's verifier: gpgv's NO_PUBKEY (Debian 12), sqv's (Debian 13).
    for words in apt_refusal(repo.key, keyring):
        assert words in update.stdout + update.stderr, update.stdout + update.stderr

    # A key that did not sign the repository is refused the same way.
    other = GpgKey.create(tmp_path / "gnupg-other", "someone else <x@example.invalid>")
    other.export_armored(keyring)
    other.stop_agent()
    sandbox.forget_indexes()
    update = sandbox.run("apt-get", "update")
    assert update.returncode == 100, update.stdout + update.stderr
    for words in apt_refusal(repo.key, keyring):
        assert words in update.stdout + update.stderr, update.stdout + update.stderr

    # The role puts the right key back (get_url force: a rotated key is replaced).
    again = run_role(
        "doca_ofed",
        tmp_path,
        _vars(sandbox, repo, repo.url + "keys/GPG-KEY-Mellanox.pub"),
        env=sandbox.env,
    )
    assert again.returncode == 0, again.stdout + again.stderr
    assert sandbox.run("apt-get", "update").returncode == 0
    assert [p.exists() for p in host_files] == host_before  # the machine's apt untouched
