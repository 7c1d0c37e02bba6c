"""A real build of the guardrails Lambda package: `pip install '.[guardrails]'` for the Lambda
runtime (manylinux2014_x86_64, CPython 3.11), zipped the way Pulumi uploads a FileArchive,
checked against the Lambda deployment-package quotas, unzipped the way Lambda unpacks it, and
the handler imported from it with nothing else on the path (`python -I -S`: no site-packages,
no user site, no PYTHONPATH). The package carries boto3 itself (infra/lambda_package.py says
why), so no stand-in for the runtime's copy is needed.

The build targets the Lambda platform whatever this machine's Python (3.11 or 3.13), so it and
its checks run everywhere; importing the handler needs a CPython 3.11 on x86_64 and is skipped,
with the reason, where there is none (Debian 13).

Needs the package index pip is configured with (PyPI or a mirror).
"""

from __future__ import annotations

import platform
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from infra.lambda_package import (
    QUOTA_UNZIPPED,
    QUOTA_ZIPPED,
    ensure_lambda_package,
    lambda_requirements,
)

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
# Runtimes of the other products: none of them may reach the daemon's package.
NOT_SHIPPED = (
    "pulumi",
    "pulumi_aws",
    "pulumi_policy",
    "ansible_core",
    "ansible_runner",
    "matplotlib",
    "moto",
    "coreburst_sandbox",
)


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def _lambda_python() -> str | None:
    """An interpreter of the Lambda runtime's kind, CPython 3.11 on x86_64, which the package's
    compiled wheels (pydantic_core, orjson) are built for: the running one where it is 3.11
    (Debian 12's python3), else python3.11 on PATH. Debian 13's python3 is 3.13, and Debian 13
    ships no 3.11."""
    if platform.machine() != "x86_64":
        return None
    return sys.executable if sys.version_info[:2] == (3, 11) else shutil.which("python3.11")


LAMBDA_PYTHON = _lambda_python()


@pytest.fixture(scope="module")
def package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The package, built once for the module: pip targets the Lambda platform
    (manylinux2014_x86_64, CPython 3.11) whatever this machine's Python."""
    return ensure_lambda_package(tmp_path_factory.mktemp("build") / "lambda", root=ROOT)


def test_real_build_holds_only_what_the_lambda_runs(package: Path) -> None:
    dest = package
    names = {_norm(p.name.split("-")[0]) for p in dest.glob("*.dist-info")}
    assert "coreburst" in names, "the project itself, from its wheel"
    for req in lambda_requirements():
        dist = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", req)
        assert dist and _norm(dist.group(0)) in names, f"{req} not installed ({sorted(names)})"
    assert not names & {_norm(n) for n in NOT_SHIPPED}, sorted(names)
    assert not (dest / "coreburst" / "sandbox").exists() and not (dest / "tests").exists()
    # Only what the Lambda runs (issue 24): no Pulumi program, policy pack or other product.
    for gone in ("infra", "policies", "coreburst/tco", "coreburst/onprem"):
        assert not (dest / gone).exists(), gone
    # burst's guardrail rules are registered rules like the daemon's own (issue 30)
    assert (dest / "coreburst" / "burst" / "reconcile.py").is_file()
    assert (dest / "coreburst" / "common" / "data" / "catalog.yaml").is_file()


def test_real_build_fits_the_lambda_quotas(package: Path, tmp_path: Path) -> None:
    archive = Path(shutil.make_archive(str(tmp_path / "code"), "zip", package))
    with zipfile.ZipFile(archive) as z:
        unzipped = sum(i.file_size for i in z.infolist())
    # "Lambda quotas": 50 MB zipped for a direct upload, 250 MB unzipped.
    assert archive.stat().st_size < QUOTA_ZIPPED, archive.stat().st_size
    assert unzipped < QUOTA_UNZIPPED, unzipped


@pytest.mark.skipif(
    LAMBDA_PYTHON is None,
    reason="imports the package's x86_64 CPython 3.11 wheels, so it needs that interpreter: "
    "none on this machine (Debian 12's python3 is 3.11; Debian 13 ships 3.13 only)",
)
def test_the_handler_imports_from_the_unzipped_package(package: Path, tmp_path: Path) -> None:
    assert LAMBDA_PYTHON is not None
    archive = Path(shutil.make_archive(str(tmp_path / "code"), "zip", package))
    with zipfile.ZipFile(archive) as z:
        z.extractall(tmp_path / "var-task")  # as Lambda unpacks it
    probe = (
        "import sys; sys.path[:0] = [sys.argv[1]]\n"
        "import guardrails.lambda_handler as h, pydantic_core, orjson, yaml, boto3, botocore\n"
        "assert callable(h.handler)\n"
        "for m in (h, pydantic_core, orjson, yaml, boto3, botocore):\n"
        "    assert m.__file__.startswith(sys.argv[1]), m.__file__\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('pulumi', 'ansible', 'matplotlib')]\n"
        "assert not bad, bad\n"
        "print('ok')\n"
    )
    out = subprocess.run(
        [LAMBDA_PYTHON, "-I", "-S", "-c", probe, str(tmp_path / "var-task")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
