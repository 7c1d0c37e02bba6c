"""The guardrails Lambda package: the daemon, the infra modules it imports, and its third-party
packages for the Lambda runtime (python3.11, x86_64), built into ``build/lambda``.

The packages are named in ``pyproject.toml`` under ``[tool.coreburst.lambda]``; their versions
come from ``[project].dependencies``, so there is one list of versions. A build is reused while
its fingerprint (requirements, target platform, sources) is unchanged. The Pulumi program calls
:func:`ensure_lambda_package` itself, so ``pulumi preview``/``up`` work on a fresh clone;
``make lambda-package`` runs the same code::

    python -m infra.lambda_package            # build, or reuse an up-to-date build
    python -m infra.lambda_package --force    # rebuild
"""

from __future__ import annotations

import argparse
import hashlib
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Callable, Sequence
from pathlib import Path

from common.textio import read_text

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DEST = REPO_ROOT / "build" / "lambda"
# Lambda's python3.11 runtime runs on Amazon Linux 2 (glibc 2.26): manylinux2014 wheels load.
PLATFORM = "manylinux2014_x86_64"
PYTHON_VERSION = "3.11"
# What the daemon imports from infra (see guardrails/*: common.catalog, common.telemetry,
# common.textio).
INFRA_FILES = (
    "common/__init__.py",
    "common/catalog.py",
    "common/telemetry.py",
    "common/textio.py",
    "common/data/catalog.yaml",
)

Installer = Callable[[Sequence[str], Path], None]


class LambdaPackageError(RuntimeError):
    """The package cannot be built; the message is one line saying what to do."""


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def lambda_requirements(pyproject: Path = REPO_ROOT / "pyproject.toml") -> list[str]:
    """The requirement strings (with versions) of the Lambda's third-party packages."""
    doc = tomllib.loads(read_text(pyproject, "pyproject", LambdaPackageError))
    names = doc.get("tool", {}).get("coreburst", {}).get("lambda", {}).get("dependencies")
    if not names:
        raise LambdaPackageError(
            f"{pyproject.name}: [tool.coreburst.lambda] dependencies is missing or empty"
        )
    by_name: dict[str, str] = {}
    for req in doc["project"]["dependencies"]:
        match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", req)
        if match:
            by_name[_normalize(match.group(1))] = req.strip()
    missing = [n for n in names if _normalize(n) not in by_name]
    if missing:
        raise LambdaPackageError(
            f"{pyproject.name}: [tool.coreburst.lambda] names {', '.join(missing)}, which "
            "[project].dependencies does not list; add them there (with their versions)"
        )
    return [by_name[_normalize(n)] for n in names]


def _sources(root: Path) -> list[Path]:
    files = [
        p
        for p in sorted((root / "guardrails").rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
    ]
    return files + [root / f for f in INFRA_FILES]


def fingerprint(root: Path, requirements: Sequence[str]) -> str:
    h = hashlib.sha256()
    h.update(f"{PLATFORM} {PYTHON_VERSION}\n".encode())
    for req in requirements:
        h.update(f"{req}\n".encode())
    for path in _sources(root):
        h.update(f"{path.relative_to(root).as_posix()}\n".encode())
        h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()


def pip_install(requirements: Sequence[str], target: Path) -> None:
    """Install wheels for the Lambda runtime into ``target`` with this interpreter's pip."""
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        "--no-input",
        "--retries",
        "2",
        "--target",
        str(target),
        "--platform",
        PLATFORM,
        "--python-version",
        PYTHON_VERSION,
        "--implementation",
        "cp",
        "--only-binary=:all:",
        *requirements,
    ]
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        lines = [ln.strip() for ln in (result.stderr or result.stdout).splitlines() if ln.strip()]
        last = lines[-1] if lines else f"exit status {result.returncode}"
        raise LambdaPackageError(
            f"could not build the guardrails Lambda package: pip install failed ({last}); "
            "check that this machine reaches the package index (PyPI, or PIP_INDEX_URL), then "
            "run `make lambda-package` again"
        )


def _stamp(dest: Path) -> Path:
    return dest.with_name(f"{dest.name}.sha256")


def ensure_lambda_package(
    dest: Path = DEFAULT_DEST,
    *,
    root: Path = REPO_ROOT,
    install: Installer | None = None,
    force: bool = False,
) -> Path:
    """``dest`` holding an up-to-date package; builds it when missing or stale.

    Raises :class:`LambdaPackageError` (one line) when it cannot be built.
    """
    requirements = lambda_requirements(root / "pyproject.toml")
    fp = fingerprint(root, requirements)
    stamp = _stamp(dest)
    fresh = (
        (dest / "guardrails").is_dir()
        and stamp.is_file()
        and stamp.read_bytes().strip() == fp.encode()
    )
    if fresh and not force:
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    # Build beside dest and swap it in at the end: a failed build leaves no half package.
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}-", dir=dest.parent))
    try:
        (install or pip_install)(requirements, tmp)
        shutil.copytree(
            root / "guardrails",
            tmp / "guardrails",
            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
        )
        for rel in INFRA_FILES:
            (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(root / rel, tmp / rel)
        stamp.unlink(missing_ok=True)
        if dest.exists():
            shutil.rmtree(dest)
        tmp.rename(dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    stamp.write_text(f"{fp}\n")
    return dest


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build the guardrails Lambda package.")
    parser.add_argument("--dest", type=Path, default=DEFAULT_DEST)
    parser.add_argument("--force", action="store_true", help="rebuild even if up to date")
    args = parser.parse_args(argv)
    try:
        path = ensure_lambda_package(args.dest, force=args.force)
    except LambdaPackageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
