"""24 hours of EC2 capacity answers through the resume program on a fake clock (issue 33 item 1).

Shortage with partial fills, spot answered by a lone UnfulfillableCapacity, a type EC2 does not
offer in a zone (Unsupported), a full outage, a trickle and recovery, for an on-demand and a
spot pool (coreburst/sandbox/capacity_replay.py says what is made up and after which EC2 and
Slurm documents). Prints operator holds (the target: 0), timed backoff holds, backoffs by code,
alerts, and job waits (the target: every job starts within one capacityBackoffS plus one
power-save poll of capacity returning). Exit 1 when a target is missed.

$ python benchmarks/capacity_replay.py
$ python benchmarks/capacity_replay.py --backoff-s 300 --hours 48
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from coreburst.sandbox.capacity_replay import replay  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--hours", type=int, default=24)
    ap.add_argument("--backoff-s", type=int, default=600, help="capacityBackoffS")
    ap.add_argument("--poll-s", type=int, default=60, help="Slurm's power-save poll")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="coreburst-capacity-replay-") as tmp:
        report = replay(Path(tmp), hours=args.hours, backoff_s=args.backoff_s, poll_s=args.poll_s)
    print("\n".join(report.lines()))
    ok = report.operator_holds == 0 and report.worst_after_return_s <= report.bound_s
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
