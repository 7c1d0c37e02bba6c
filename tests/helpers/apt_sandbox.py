"""Real apt for the on-prem role tests, confined to a sandbox.

What is real: gpg makes a throwaway signing key, dpkg-deb builds the packages, apt-ftparchive
indexes a flat repository (the layout of NVIDIA's DOCA and CUDA repositories: ``deb URL ./``),
gpg signs it (InRelease and Release.gpg), python's http.server serves it on 127.0.0.1, and the
roles run through ansible-playbook with apt-get, python-apt and dpkg doing the work.

What is made up: the packages. They are empty stand-ins named like the vendor's (doca-ofed,
nvidia-driver-550-server, ...) at made-up builds; they follow the deb format (deb(5)), nothing
more.

Isolation: these tests run as root on the dev/CI machine. ``APT_CONFIG`` points apt-get,
apt-cache and python-apt (which the ansible apt module uses) at a config that moves every apt
directory (Dir::Etc, Dir::State, Dir::Cache, Dir::State::status, Dir::Log) under the sandbox
root and makes dpkg install with ``--root=<sandbox>``. Because Dir::Etc moves, the machine's
/etc/apt/apt.conf.d hooks, sources and keys are not read either. ``AptSandbox.check`` asserts
that before any role runs.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
ANSIBLE = ROOT / "ansible"
BIN = Path(sys.executable).parent
# The Python that runs the modules on the (local) node: the distribution's python3, the one
# ansible's interpreter discovery (ansible.cfg: interpreter_python = auto_silent) finds on a real
# Debian/Ubuntu node. It has python-apt (under .venv's Python the apt module respawns itself under
# /usr/bin/python3: two interpreters per apt task), and Debian builds it optimised: a module run
# costs about a quarter less CPU than under a .venv made from pyenv's default (unoptimised) build.
MODULE_PYTHON = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable

# tool -> Debian package that provides it (for the message when one is missing).
TOOLS = {
    "gpg": "gnupg",
    "dpkg-deb": "dpkg",
    "apt-ftparchive": "apt-utils",
    "apt-get": "apt",
    "make": "make",
    "tar": "tar",
}


def require_tools(*names: str) -> None:
    missing = [f"{n} (Debian package {TOOLS[n]})" for n in names if shutil.which(n) is None]
    if missing:
        pytest.fail("missing tools: " + ", ".join(missing))
    if (
        not Path("/usr/bin/python3").exists()
        or subprocess.run(
            ["/usr/bin/python3", "-c", "import apt_pkg"], capture_output=True, check=False
        ).returncode
    ):
        pytest.fail("ansible's apt module needs python-apt: apt-get install python3-apt")


@functools.cache
def apt_verifier() -> str:
    """The program this machine's apt-get checks a repository's signature with: Sequoia's
    ``sqv`` from apt 3.0 (Debian 13), ``gpgv`` before (apt 2.6, Debian 12)."""
    out = _ok(["apt-get", "--version"])  # "apt 2.6.1 (amd64)"
    match = re.match(r"apt (\d+)\.", out)
    assert match, out
    return "sqv" if int(match[1]) >= 3 else "gpgv"


def apt_refusal(signer: GpgKey, keyring: Path) -> list[str]:
    """What ``apt-get update`` prints, in the words of this release's verifier, when it refuses
    a repository that ``signer`` signed because ``keyring`` (its ``signed-by``) is missing or
    holds another key: each string is in the output. Seen on Debian 12 and 13 (2026-12-05)."""
    if apt_verifier() == "gpgv":
        # gpgv (apt 2.6, Debian 12) names the signer's long key id, whichever the case.
        return [
            "The following signatures couldn't be verified because the public key is not "
            f"available: NO_PUBKEY {signer.fingerprint[-16:]}"
        ]
    # sqv (apt 3.0, Debian 13) says why: no such keyring, or not the signer's key in it.
    why = (
        f"Missing key {signer.fingerprint}, which is needed to verify signature."
        if keyring.exists()
        else f'Error: Failed to parse keyring "{keyring}"'
    )
    return [
        "OpenPGP signature verification failed",
        f"Sub-process /usr/bin/sqv returned an error code (1), error message is: {why}",
    ]


def _run(cmd: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=120, **kw)


def _ok(cmd: list[str], **kw: Any) -> str:
    r = _run(cmd, **kw)
    assert r.returncode == 0, f"{cmd}: {r.stdout}{r.stderr}"
    return r.stdout


@dataclass
class GpgKey:
    """A throwaway ed25519 signing key in its own GNUPGHOME."""

    home: Path
    fingerprint: str

    @classmethod
    def create(cls, home: Path, uid: str) -> GpgKey:
        home.mkdir(mode=0o700, parents=True)
        env = {**os.environ, "GNUPGHOME": str(home)}
        gen = ["gpg", "--batch", "--pinentry-mode", "loopback", "--passphrase", ""]
        _ok([*gen, "--quick-gen-key", uid, "ed25519", "sign", "never"], env=env)
        out = _ok(["gpg", "--batch", "--with-colons", "--list-keys"], env=env)
        fpr = next(line.split(":")[9] for line in out.splitlines() if line.startswith("fpr:"))
        return cls(home, fpr)

    def stop_agent(self) -> None:
        """End the gpg-agent that making and using the key started (it outlives gpg)."""
        _run(["gpgconf", "--kill", "gpg-agent"], env={**os.environ, "GNUPGHOME": str(self.home)})

    def _gpg(self, *args: str) -> str:
        return _ok(
            ["gpg", "--batch", "--yes", *args], env={**os.environ, "GNUPGHOME": str(self.home)}
        )

    def export_armored(self, dest: Path) -> Path:
        dest.parent.mkdir(parents=True, exist_ok=True)
        self._gpg("--armor", "--output", str(dest), "--export", self.fingerprint)
        return dest

    def sign_release(self, release: Path) -> None:
        self._gpg(
            "--local-user",
            self.fingerprint,
            "--clearsign",
            "-o",
            str(release.with_name("InRelease")),
            str(release),
        )
        self._gpg(
            "--local-user",
            self.fingerprint,
            "-abs",
            "-o",
            str(release.with_name("Release.gpg")),
            str(release),
        )


def build_deb(
    out_dir: Path, name: str, version: str, files: dict[str, str] | None = None, depends: str = ""
) -> Path:
    """A stand-in package (made up, deb(5) layout) carrying ``files`` (path -> text)."""
    stage = out_dir / f".stage-{name}-{version}"
    (stage / "DEBIAN").mkdir(parents=True)
    control = (
        f"Package: {name}\nVersion: {version}\nArchitecture: all\n"
        "Maintainer: coreburst tests <tests@example.invalid>\n"
        f"Description: made-up stand-in for {name}\n"
    )
    if depends:
        control += f"Depends: {depends}\n"
    (stage / "DEBIAN" / "control").write_text(control)
    for path, text in (files or {f"usr/share/doc/{name}/VERSION": version}).items():
        target = stage / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    deb = out_dir / f"{name}_{version}_all.deb"
    _ok(["dpkg-deb", "--root-owner-group", "--build", str(stage), str(deb)])
    shutil.rmtree(stage)
    return deb


@dataclass
class AptRepo:
    """A flat repository (``deb <url> ./``) in ``path``, signed by ``key``."""

    path: Path
    key: GpgKey
    url: str = ""

    def publish(self) -> None:
        for stale in ("Packages", "Release", "InRelease", "Release.gpg"):
            (self.path / stale).unlink(missing_ok=True)
        (self.path / "Packages").write_text(_ok(["apt-ftparchive", "packages", "."], cwd=self.path))
        release = self.path / "Release"
        release.write_text(_ok(["apt-ftparchive", "release", "."], cwd=self.path))
        self.key.sign_release(release)


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextlib.contextmanager
def serve(directory: Path) -> Iterator[str]:
    """Serve ``directory`` over http on 127.0.0.1 (a free port); yields the base URL."""
    handler = functools.partial(_Quiet, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


class AptSandbox:
    """apt-get / apt-cache / python-apt / dpkg confined to ``root`` through APT_CONFIG."""

    def __init__(self, root: Path) -> None:
        self.root = root
        for d in (
            "etc/apt/apt.conf.d",
            "etc/apt/preferences.d",
            "etc/apt/sources.list.d",
            "etc/apt/trusted.gpg.d",
            "var/lib/apt/lists/partial",
            "var/cache/apt/archives/partial",
            "var/lib/dpkg/info",
            "var/lib/dpkg/updates",
            "var/log/apt",
        ):
            (root / d).mkdir(parents=True, exist_ok=True)
        for f in ("var/lib/dpkg/status", "var/lib/dpkg/available"):
            (root / f).touch()
        self.config = root.parent / f"{root.name}-apt.conf"
        r = str(root)
        self.config.write_text(
            "// Every apt directory under the sandbox; dpkg installs into it (--root).\n"
            f'Dir::Etc "{r}/etc/apt/";\n'
            f'Dir::State "{r}/var/lib/apt/";\n'
            f'Dir::Cache "{r}/var/cache/apt/";\n'
            f'Dir::State::status "{r}/var/lib/dpkg/status";\n'
            f'Dir::Log "{r}/var/log/apt/";\n'
            # root may read the sandbox; _apt (the download user) may not.
            'APT::Sandbox::User "root";\n'
            'Acquire::Languages "none";\n'
            f'DPkg::Options {{ "--root={r}"; "--force-script-chrootless"; }};\n'
        )

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "APT_CONFIG": str(self.config), "DEBIAN_FRONTEND": "noninteractive"}

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return _run(list(args), env=self.env)

    def check(self) -> None:
        """Fail unless apt really is confined (guards the machine's own apt state)."""
        dump = _ok(["apt-config", "dump"], env=self.env)
        for key in ("Dir::Etc", "Dir::State", "Dir::Cache", "Dir::State::status"):
            line = next(x for x in dump.splitlines() if x.startswith(f'{key} "'))
            assert str(self.root) in line, line
        # The host's apt.conf.d hooks (e.g. docker-clean's DPkg::Post-Invoke) are not loaded.
        assert "Post-Invoke" not in dump, dump

    def forget_indexes(self) -> None:
        """Drop the downloaded index files: apt then behaves as on a freshly installed node
        (with old indexes a failed update only warns and keeps them)."""
        lists = self.root / "var/lib/apt/lists"
        shutil.rmtree(lists)
        (lists / "partial").mkdir(parents=True)

    def candidate(self, package: str) -> str:
        out = self.run("apt-cache", "policy", package).stdout
        return next(
            (x.split(":", 1)[1].strip() for x in out.splitlines() if "Candidate:" in x), "(none)"
        )

    def installed(self, package: str) -> str:
        r = _run(
            ["dpkg-query", f"--admindir={self.root}/var/lib/dpkg", "-W", "-f=${Version}", package]
        )
        return r.stdout if r.returncode == 0 else ""


def run_role(
    roles: str | list[str],
    workdir: Path,
    extravars: dict[str, Any],
    *,
    env: dict[str, str] | None = None,
    skip_tags: str = "",
    gather_facts: bool = False,
) -> subprocess.CompletedProcess[str]:
    """Run roles of ansible/roles on localhost (local connection) through ansible-playbook."""
    names = [roles] if isinstance(roles, str) else roles
    playbook = workdir / f"play-{names[0]}.yml"
    playbook.write_text(
        f"- hosts: all\n  gather_facts: {str(gather_facts).lower()}\n  gather_subset: [hardware]\n"
        "  roles:\n" + "".join(f"    - {r}\n" for r in names)
    )
    varsfile = workdir / f"vars-{names[0]}.json"
    varsfile.write_text(
        json.dumps(
            {
                "ansible_connection": "local",
                "ansible_python_interpreter": MODULE_PYTHON,
                "coreburst_become": False,
                **extravars,
            }
        )
    )
    cmd = [
        str(BIN / "ansible-playbook"),
        "-i",
        "localhost,",
        "-e",
        f"@{varsfile}",
        str(playbook),
    ]
    if skip_tags:
        cmd += ["--skip-tags", skip_tags]
    base = env or dict(os.environ)
    full_env = {
        **base,
        "PATH": f"{BIN}{os.pathsep}{base.get('PATH', '')}",
        "ANSIBLE_CONFIG": str(ANSIBLE / "ansible.cfg"),
        "ANSIBLE_ROLES_PATH": str(ANSIBLE / "roles"),
        "ANSIBLE_LOCAL_TEMP": str(workdir / ".ansible-tmp"),
        "ANSIBLE_NOCOLOR": "1",
    }
    return subprocess.run(
        cmd, capture_output=True, text=True, check=False, timeout=300, env=full_env
    )
