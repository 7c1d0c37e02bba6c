"""What the recorders of real Slurm output share (tests/helpers/record_slurm_jobs.py,
record_slurm_nodes.py): the release's name in file names, writing the files unchanged, and the
command line."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from coreburst.sandbox.slurmlab import slurm_release


def release_name() -> str:
    """The release of the Slurm on PATH as file names spell it: ``22.05``."""
    major, minor = slurm_release()
    return f"{major}.{minor:02d}"


def write_all(out_dir: Path, files: dict[str, str]) -> list[Path]:
    """Each file name -> its text, unchanged, in ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in files.items():
        path = out_dir / name
        path.write_text(text)
        written.append(path)
    return written


def main(module: str, record: Callable[[Path], list[Path]], argv: list[str]) -> int:
    """``python -m tests.helpers.<module> OUT_DIR``: record, then say what was written."""
    if len(argv) != 1:
        print(f"usage: python -m tests.helpers.{module} OUT_DIR", file=sys.stderr)
        return 2
    try:
        for path in record(Path(argv[0])):
            print(f"wrote {path} ({path.stat().st_size} bytes)")
    except subprocess.CalledProcessError as exc:
        print(f"{module}: {exc.cmd} failed: {exc.stderr.strip()}", file=sys.stderr)
        return 1
    return 0
