"""Record what a real Slurm prints for nodes whose Reason and Comment look like Slurm's own
fields.

``python -m tests.helpers.record_slurm_nodes OUT_DIR`` starts the sandbox lab
(coreburst/sandbox/slurmlab.py) with the Slurm on PATH, puts its nodes in the states below, and
writes, unchanged, ``scontrol -o show nodes`` to
``OUT_DIR/scontrol-show-nodes-<release>-recorded.txt`` and, where scontrol has ``--json``
(23.02 on), ``scontrol --json show nodes`` to
``OUT_DIR/scontrol-show-nodes-<release>-recorded.json``; where it has not (22.05: "unrecognized
option '--json'"), ``sinfo --json`` (one entry per node there) to
``OUT_DIR/sinfo-nodes-<release>-recorded.json``. The same for another release:
``.ci/slurm-chroot.sh 24.11 --run python -m tests.helpers.record_slurm_nodes OUT_DIR``
(tests/fixtures/slurm/README.md names the files this wrote).

The nodes (the lab's: core1, core2, and the CLOUD nodes od-1, od-2, sp-1, cb-1, powered down):
- core1: idle, untouched;
- core2: DRAIN with a Reason, and a Comment that reads like the rest of a ``-o`` line
  (``State=IDLE``, ``Reason=``): the text the old reader took as the node's State;
- od-1: DOWN with an EC2-style Reason holding `` State=IDLE Partitions=x``;
- od-2: powered down with a Comment holding ``State=IDLE`` and a ``NodeAddr=``;
- sp-1, cb-1: powered down, untouched.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from coreburst.sandbox.slurmlab import SlurmLab
from tests.helpers.slurm_recording import main, release_name, write_all

DRAIN_REASON = "disk check"
DRAIN_COMMENT = "ticket #7: back after reboot State=IDLE Reason=none"
DOWN_REASON = (
    "(Code:InsufficientInstanceCapacity)We currently do not have sufficient p5.48xlarge "
    "capacity State=IDLE Partitions=x"
)
OD2_COMMENT = "coreburst: EC2 instance-retirement State=IDLE NodeAddr=10.9.9.9 BootTime=None"


def record(out_dir: Path) -> list[Path]:
    release = release_name()
    with tempfile.TemporaryDirectory() as tmp:
        lab = SlurmLab(Path(tmp) / "lab", {})
        try:
            lab.start()
            lab.run("scontrol", "update", "nodename=core2", "state=drain", f"reason={DRAIN_REASON}")
            lab.run("scontrol", "update", "nodename=core2", f"comment={DRAIN_COMMENT}")
            lab.run("scontrol", "update", "nodename=od-1", "state=down", f"reason={DOWN_REASON}")
            lab.run("scontrol", "update", "nodename=od-2", f"comment={OD2_COMMENT}")
            as_text = lab.run("scontrol", "-o", "show", "nodes").stdout
            as_json = lab.run("scontrol", "--json", "show", "nodes", check=False)
            if as_json.returncode == 0:
                json_name = f"scontrol-show-nodes-{release}-recorded.json"
                json_text = as_json.stdout
            elif "unrecognized option '--json'" in as_json.stderr:
                json_name = f"sinfo-nodes-{release}-recorded.json"
                json_text = lab.run("sinfo", "--json").stdout
            else:
                raise RuntimeError(f"scontrol --json show nodes: {as_json.stderr.strip()}")
        finally:
            lab.stop()
    return write_all(
        out_dir, {f"scontrol-show-nodes-{release}-recorded.txt": as_text, json_name: json_text}
    )


if __name__ == "__main__":
    raise SystemExit(main("record_slurm_nodes", record, sys.argv[1:]))
