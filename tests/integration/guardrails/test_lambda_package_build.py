"""A real build of the guardrails Lambda package: pip installs pyproject's list for the Lambda
runtime (manylinux2014_x86_64, CPython 3.11), the package is zipped the way Pulumi uploads a
FileArchive, unzipped the way Lambda unpacks it, and the handler imports from it with nothing
else on the path except what the Lambda runtime provides (boto3, botocore and their deps).

Needs the package index pip is configured with (PyPI or a mirror).
"""

from __future__ import annotations

import importlib.util
import platform
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from infra.lambda_package import ensure_lambda_package, lambda_requirements

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
# What the python3.11 Lambda runtime has besides the standard library.
RUNTIME_PROVIDED = ("boto3", "botocore", "s3transfer", "jmespath", "dateutil", "urllib3", "six")


def _runtime_dir(tmp_path: Path) -> Path:
    """boto3 and friends, linked from this venv, standing in for the runtime's copies."""
    out = tmp_path / "runtime"
    out.mkdir()
    for name in RUNTIME_PROVIDED:
        spec = importlib.util.find_spec(name)
        assert spec and spec.origin, name
        origin = Path(spec.origin)
        src = origin.parent if origin.name == "__init__.py" else origin
        (out / src.name).symlink_to(src)
    return out


@pytest.mark.skipif(
    platform.machine() != "x86_64" or sys.version_info[:2] != (3, 11),
    reason="imports x86_64 CPython 3.11 wheels, so it needs that interpreter",
)
def test_real_build_imports_the_handler(tmp_path: Path) -> None:
    dest = ensure_lambda_package(tmp_path / "build" / "lambda", root=ROOT)
    names = {p.name.split("-")[0].lower() for p in dest.glob("*.dist-info")}
    for req in lambda_requirements():
        dist = req.split(">")[0].split("<")[0].split("=")[0].strip().lower().replace("-", "_")
        assert dist in names, f"{req} not installed into the package ({sorted(names)})"

    archive = shutil.make_archive(str(tmp_path / "code"), "zip", dest)
    unpacked = tmp_path / "var-task"
    with zipfile.ZipFile(archive) as z:
        z.extractall(unpacked)

    probe = (
        "import sys; sys.path[:0] = sys.argv[1:3]\n"
        "import guardrails.lambda_handler as h, pydantic_core, orjson, yaml\n"
        "assert callable(h.handler)\n"
        "for m in (h, pydantic_core, orjson, yaml):\n"
        "    assert m.__file__.startswith(sys.argv[1]), m.__file__\n"
        "print('ok')\n"
    )
    # -I -S: no site-packages, no user site, no PYTHONPATH: only the package and the runtime.
    out = subprocess.run(
        [sys.executable, "-I", "-S", "-c", probe, str(unpacked), str(_runtime_dir(tmp_path))],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
