"""The guardrails Lambda package: ``pip install '.[guardrails]'`` for the Lambda runtime
(python3.11, x86_64), into ``build/lambda``.

What goes in is what packaging says, not a list of files: this project built as a wheel, then
installed with its ``guardrails`` extra (``pyproject.toml`` [project.optional-dependencies])
for the Lambda platform. The container image installs the same extra
(guardrails/deploy/Containerfile), so the daemon runs the same code and packages in both.

A build is reused while its fingerprint (pyproject, target platform, every file the wheel is
built from) is unchanged; a failed build leaves the previous package in place. The Pulumi
program calls :func:`ensure_lambda_package` itself, so ``pulumi preview``/``up`` work on a fresh
clone; ``make lambda-package`` runs the same code::

    python -m infra.lambda_package            # build, or reuse an up-to-date build
    python -m infra.lambda_package --force    # rebuild
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from coreburst.common.textio import read_text

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DEST = REPO_ROOT / "build" / "lambda"
EXTRA = "guardrails"
# Lambda's python3.11 runtime runs on Amazon Linux 2 (glibc 2.26): manylinux2014 wheels load.
PLATFORM = "manylinux2014_x86_64"
PYTHON_VERSION = "3.11"
# boto3/botocore ship in the package although the runtime has its own copies. Measured on
# 2026-12-03 (boto3 1.44, this tree): 23.8 MB zipped / 44.7 MB unzipped with them, 6.3 / 20.9 MB
# without, against the Lambda quotas of 50 MB zipped for a direct upload and 250 MB unzipped
# ("Lambda quotas", docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html). Both fit,
# so the package keeps the SDK version the daemon was tested with instead of whichever one the
# runtime carries that month, as AWS advises for full control of dependencies ("Working with
# .zip file archives for Python Lambda functions", .../python-package.html, "Runtime
# dependencies in Python"); tests/integration/guardrails/test_lambda_package_build.py keeps the
# build under both quotas.
QUOTA_ZIPPED = 50 * 1024 * 1024
QUOTA_UNZIPPED = 250 * 1024 * 1024

# install(project_root, target): put `project_root[guardrails]` for the Lambda into target.
Installer = Callable[[Path, Path], None]


class LambdaPackageError(RuntimeError):
    """The package cannot be built; the message is one line saying what to do."""


def _pyproject(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(read_text(path, "pyproject", LambdaPackageError))
    except tomllib.TOMLDecodeError as exc:
        raise LambdaPackageError(f"{path}: not valid TOML ({exc})") from None


def lambda_requirements(pyproject: Path = REPO_ROOT / "pyproject.toml") -> list[str]:
    """The requirements `pip install '.[guardrails]'` starts from: the base dependencies and the
    ``guardrails`` extra, as ``pyproject.toml`` states them."""
    project = _pyproject(pyproject).get("project", {})
    extra = project.get("optional-dependencies", {}).get(EXTRA)
    if not extra:
        raise LambdaPackageError(
            f"{pyproject.name}: [project.optional-dependencies] has no {EXTRA} extra; add the "
            "daemon's runtime packages there"
        )
    return [*project.get("dependencies", []), *extra]


def _sources(root: Path) -> list[Path]:
    """Every file the wheel is built from: pyproject, README (the metadata's description) and
    the packages ``[tool.setuptools.packages.find]`` includes."""
    find = _pyproject(root / "pyproject.toml").get("tool", {}).get("setuptools", {})
    include = find.get("packages", {}).get("find", {}).get("include", ["*"])
    packages = sorted(
        p
        for p in root.iterdir()
        if (p / "__init__.py").is_file() and any(fnmatch.fnmatch(p.name, pat) for pat in include)
    )
    files = [root / "pyproject.toml", root / "README.md"]
    for pkg in packages:
        files += [
            p
            for p in sorted(pkg.rglob("*"))
            if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
        ]
    return [f for f in files if f.is_file()]


def fingerprint(root: Path, requirements: Sequence[str]) -> str:
    h = hashlib.sha256()
    h.update(f"{PLATFORM} {PYTHON_VERSION} {EXTRA}\n".encode())
    for req in requirements:
        h.update(f"{req}\n".encode())
    for path in _sources(root):
        h.update(f"{path.relative_to(root).as_posix()}\n".encode())
        h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()


def _pip(args: Sequence[str], what: str) -> None:
    cmd = [
        sys.executable,
        "-m",
        "pip",
        *args[:1],
        "--quiet",
        "--disable-pip-version-check",
        "--no-input",
        "--retries",
        "2",
        *args[1:],
    ]
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        lines = [ln.strip() for ln in (result.stderr or result.stdout).splitlines() if ln.strip()]
        errors = [ln for ln in lines if ln.startswith("ERROR")]
        last = (errors or lines or [f"exit status {result.returncode}"])[-1]
        raise LambdaPackageError(
            f"could not build the guardrails Lambda package: {what} failed ({last}); "
            "check that this machine reaches the package index (PyPI, or PIP_INDEX_URL), then "
            "run `make lambda-package` again"
        )


def pip_install(root: Path, target: Path) -> None:
    """``pip install 'root[guardrails]' --target target`` with wheels for the Lambda runtime.

    pip cannot select a platform for a source tree, so the project is built as a wheel first
    (pure Python, any platform); its dependencies then come as manylinux wheels.
    """
    with tempfile.TemporaryDirectory(prefix="coreburst-wheel-") as tmp:
        # setuptools builds in <root>/build/lib and packs whatever it finds there, including
        # modules deleted from the tree since the last build: start from an empty one.
        build = root / "build"
        if build.is_dir():
            for scratch in [build / "lib", *build.glob("bdist.*")]:
                shutil.rmtree(scratch, ignore_errors=True)
        _pip(["wheel", "--no-deps", "--wheel-dir", tmp, str(root)], "building the wheel")
        wheels = sorted(Path(tmp).glob("*.whl"))
        if len(wheels) != 1:
            raise LambdaPackageError(
                f"could not build the guardrails Lambda package: expected one wheel from {root}, "
                f"got {len(wheels)}; run `make lambda-package FORCE=1`"
            )
        _pip(
            [
                "install",
                "--target",
                str(target),
                "--no-compile",
                "--platform",
                PLATFORM,
                "--python-version",
                PYTHON_VERSION,
                "--implementation",
                "cp",
                "--only-binary=:all:",
                f"{wheels[0]}[{EXTRA}]",
            ],
            "pip install",
        )
    prune(target)


# What the Lambda runs: guardrails/ and, of the import root, its __init__, common/ and burst/
# (burst's guardrail rules register beside the daemon's: the registry loads every one). The
# wheel also carries the Pulumi program, the policy pack and the other products: not shipped.
NOT_IN_LAMBDA = (
    "infra",
    "policies",
    "coreburst/onprem",
    "coreburst/tco",
    "coreburst/sandbox",
    "coreburst/cli.py",
    "coreburst/core.py",
    "coreburst/plan.py",
    "coreburst/__main__.py",
    "bin",
)


def prune(target: Path) -> None:
    """Remove from an installed ``target`` what the Lambda never imports."""
    for rel in NOT_IN_LAMBDA:
        p = target / rel
        if p.is_dir():
            shutil.rmtree(p)
        elif p.exists():
            p.unlink()


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
        (dest / "guardrails" / "lambda_handler.py").is_file()
        and stamp.is_file()
        and stamp.read_bytes().strip() == fp.encode()
    )
    if fresh and not force:
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    # Build beside dest and swap it in at the end: a failed build leaves no half package.
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}-", dir=dest.parent))
    try:
        (install or pip_install)(root, tmp)
        if not (tmp / "guardrails" / "lambda_handler.py").is_file():
            raise LambdaPackageError(
                "could not build the guardrails Lambda package: the install holds no "
                "guardrails/lambda_handler.py; check [tool.setuptools.packages.find] in "
                "pyproject.toml"
            )
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
    except OSError as exc:  # the destination: read-only, under a file, no space
        where = exc.filename or args.dest
        print(
            f"error: cannot write the Lambda package at {where}: {exc.strerror}; "
            "give --dest a writable directory",
            file=sys.stderr,
        )
        return 2
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
