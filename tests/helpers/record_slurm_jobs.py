"""Record what a real Slurm prints for jobs whose comments look like Slurm's own fields.

``python -m tests.helpers.record_slurm_jobs OUT_DIR`` starts the sandbox lab
(coreburst/sandbox/slurmlab.py) with the Slurm on PATH, submits the jobs below, and writes,
unchanged, ``squeue --json --states=all`` to ``OUT_DIR/squeue-jobs-<release>-recorded.json`` and
``scontrol -o show job`` (every job) to ``OUT_DIR/scontrol-o-show-job-<release>-recorded.txt``.
(``scontrol --json`` does not exist on 22.05: "unrecognized option '--json'".) The same for
another release:
``.ci/slurm-chroot.sh 24.11 --run python -m tests.helpers.record_slurm_jobs OUT_DIR``
(tests/fixtures/slurm/README.md names the files this wrote).

The jobs (all held, so nothing runs):
1. a site's AdminComment holding two spaces and ``Key=`` text, and a user's ``--comment``
   that reads like the rest of a ``scontrol -o`` line (the text that Slurm 25.11+'s one-space
   layout made the old reader take as the AdminComment);
2. no AdminComment, a user's comment with spaces, a time limit of 90 minutes;
3. an AdminComment that is coreburst's notes after a site's text.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from coreburst.sandbox.slurmlab import SlurmLab
from tests.helpers.slurm_recording import main, release_name, write_all

SITE_1 = "site: project=alpha  Partition=fake | ops"
USER_1 = "x y Comment=user note: keep me StdErr= StdIn=/dev/null"
USER_2 = "just a note  with two spaces"
NOTES_3 = (
    "site: ticket #42 | coreburst: bursting on od-1 (1 x p5.48xlarge, $55.04/h) | "
    "coreburst: pending 0:10:00 for spot (more than 0:05:00): burst added; a=b"
)


def record(out_dir: Path) -> list[Path]:
    release = release_name()
    with tempfile.TemporaryDirectory() as tmp:
        lab = SlurmLab(Path(tmp) / "lab", {})
        try:
            lab.start()

            def sbatch(*args: str) -> str:
                out = lab.run("sbatch", "--parsable", "-H", "-p", "core", "-o", "/dev/null", *args)
                return out.stdout.strip().split(";")[0]

            j1 = sbatch("--comment", USER_1, "--wrap", "sleep 1")
            lab.run("scontrol", "update", f"jobid={j1}", f"AdminComment={SITE_1}")
            sbatch("--comment", USER_2, "-t", "90", "--wrap", "sleep 1")
            j3 = sbatch("--wrap", "sleep 1")
            lab.run("scontrol", "update", f"jobid={j3}", f"AdminComment={NOTES_3}")
            as_json = lab.run("squeue", "--json", "--states=all").stdout
            as_text = lab.run("scontrol", "-o", "show", "job").stdout
        finally:
            lab.stop()
    return write_all(
        out_dir,
        {
            f"squeue-jobs-{release}-recorded.json": as_json,
            f"scontrol-o-show-job-{release}-recorded.txt": as_text,
        },
    )


if __name__ == "__main__":
    raise SystemExit(main("record_slurm_jobs", record, sys.argv[1:]))
