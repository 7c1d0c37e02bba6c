"""Many job records in ``sacct --json``'s layouts, and a stand-in ``sacct`` that answers a
time window from them as slurmdbd selects it, for benchmarks and tests of the cost report.

Records are **generated**, not recorded: each is a recorded job of the caller's fixture (a
``sacct --json`` document, e.g. tests/fixtures/slurm/sacct-22.05-recorded.json) with its
id, user, account, partition, nodes, GPU count, state and times replaced, so the layout
(22.05's ``openapi/dbv0.0.38`` or a data_parser one) is the fixture's, key for key.

The stand-in selects as slurmdbd does for ``--starttime S --endtime E`` with no ``--state``
(SchedMD/slurm ``src/plugins/accounting_storage/mysql/as_mysql_jobacct_process.c``,
``setup_job_cond_limits``): eligible, and eligible before E, and ended at or after S or not
at all (``time_end = 0``). Records are kept per hour of their end with an index, so one
call reads only the hours it can answer from.

    >>> gen = Generated.create(Path("/tmp/recs"), template, n=100_000, days=30)  # doctest: +SKIP
    >>> # a script named sacct on PATH: exec python -m coreburst.sandbox.sacctgen /tmp/recs "$@"
"""

from __future__ import annotations

import json
import marshal
import math
import os
import random
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HOUR = 3600
FORMAT = 2  # of the files written; older ones are generated again
_ELAPSED = "@@elapsed-now@@"
# Sentinels put into the template, then cut out: a record is the template's text with the
# values in between (so rendering a million records is string joins, not json.dumps calls).
_FIELDS = ("job_id", "user", "account", "partition", "nodes", "gpus", "state",
           "elapsed", "eligible", "start", "end", "submission")  # fmt: skip
_SENTINEL = {f: f"@@{f}@@" for f in _FIELDS}
_INT_SENTINEL = {"job_id": 900000001, "gpus": 900000002, "elapsed": 900000003,
                 "eligible": 900000004, "start": 900000005, "end": 900000006,
                 "submission": 900000007}  # fmt: skip


def _set_num(obj: dict[str, Any], key: str, value: int) -> None:
    """Set an integer as the layout holds it: plain, or data_parser's {set, infinite, number}."""
    if isinstance(obj.get(key), dict):
        obj[key] = {"set": True, "infinite": False, "number": value}
    else:
        obj[key] = value


def template_parts(fixture: dict[str, Any]) -> tuple[list[str], list[str]]:
    """The first job of a ``sacct --json`` document cut into literal text and field names."""
    job = json.loads(json.dumps(fixture["jobs"][0]))
    for key in ("job_id",):
        _set_num(job, key, _INT_SENTINEL[key])
    for key in ("user", "account", "partition", "nodes"):
        job[key] = _SENTINEL[key]
    t = job["time"]
    for key in ("elapsed", "eligible", "start", "end", "submission"):
        _set_num(t, key, _INT_SENTINEL[key])
    state = job["state"]
    state["current"] = (
        [_SENTINEL["state"]] if isinstance(state["current"], list) else _SENTINEL["state"]
    )
    gpu = [
        x for x in job["tres"]["allocated"] if x.get("type") == "gres" and x.get("name") == "gpu"
    ]
    if not gpu:
        raise ValueError("the template job has no gres/gpu TRES")
    gpu[0]["count"] = _INT_SENTINEL["gpus"]
    text = json.dumps(job, indent=2)
    marks = {json.dumps(v): k for k, v in _SENTINEL.items()}
    marks.update({str(v): k for k, v in _INT_SENTINEL.items()})
    parts: list[str] = []
    names: list[str] = []
    pos = 0
    while True:
        hits = [(text.find(m, pos), m) for m in marks if text.find(m, pos) >= 0]
        if not hits:
            parts.append(text[pos:])
            return parts, names
        at, m = min(hits)
        parts.append(text[pos:at])
        names.append(marks[m])
        pos = at + len(m)


@dataclass
class Generated:
    """Records on disk: ``meta.json`` (the document around the jobs, the window, the audit
    log's path) and per hour of end ``h<hour>.idx`` / ``h<hour>.dat``."""

    root: Path

    @property
    def meta(self) -> dict[str, Any]:
        return json.loads((self.root / "meta.json").read_text())

    @classmethod
    def create(
        cls,
        root: Path,
        fixture: dict[str, Any],
        *,
        n: int,
        days: int,
        until: int,
        seed: int = 1,
        burst_nodes: tuple[str, ...] = ("od-1", "od-2"),
        burst_share: float = 0.002,
    ) -> Generated:
        """``n`` job runs over ``days`` days before ``until``, scheduled onto core nodes
        ``core1..`` (8 GPUs each, enough for ~60 % use) and a few onto ``burst_nodes``, with
        the burst audit log of their instances (launched 30 s before the first job, ended 60
        s after the last). Some runs are still going at ``until`` (end 0 in the records)."""
        root.mkdir(parents=True, exist_ok=True)
        parts, names = template_parts(fixture)
        rnd = random.Random(seed)
        since = until - days * 86400
        # ~26,000 GPU-seconds a run on average (3.2 GPUs x ~8,000 s): nodes for ~60 % use
        core_count = max(2, math.ceil(n * 26_000 / (days * 86400) / 8 / 0.6))
        lanes: dict[str, list[int]] = {f"core{i}": [since] * 8 for i in range(1, core_count + 1)}
        lanes.update({b: [since] * 8 for b in burst_nodes})
        core_names = [f"core{i}" for i in range(1, core_count + 1)]
        accounts = [f"acct{i:02d}" for i in range(24)]
        users = [f"user{i:03d}" for i in range(300)]
        hours: dict[int, list[tuple[int, int, bytes]]] = {}
        running: list[tuple[int, int, bytes]] = []
        running_starts: list[int] = []
        burst_spans: dict[str, list[tuple[int, int]]] = {}
        step = days * 86400 / n
        for i in range(n):
            arrive = since + int(i * step)
            r = rnd.random()
            dur = (
                rnd.randint(60, 3600) if r < 0.7 else rnd.randint(3600, 8 * HOUR)
                if r < 0.97 else rnd.randint(8 * HOUR, 36 * HOUR)
            )  # fmt: skip
            gpus = rnd.choice((1, 1, 2, 4, 8))
            burst = rnd.random() < burst_share
            node = rnd.choice(burst_nodes) if burst else core_names[i % core_count]
            free = lanes[node]  # when each of the node's GPUs is next free, in order
            start = max(arrive, free[gpus - 1])
            end = start + dur
            free[:gpus] = [end] * gpus
            free.sort()
            eligible = max(since - 3600, start - rnd.randint(0, 600))
            if start >= until:
                continue  # still pending at the end: no run to record yet
            if burst:
                burst_spans.setdefault(node, []).append((start - 30, end + 60))
            still = end > until
            values = {
                "job_id": str(1000 + i),
                "user": json.dumps(rnd.choice(users)),
                "account": json.dumps(rnd.choice(accounts)),
                "partition": json.dumps("burst" if burst else "core"),
                "nodes": json.dumps(node),
                "gpus": str(gpus),
                "state": json.dumps("RUNNING" if still else "COMPLETED"),
                # a running job's elapsed grows: written when asked (answer), as sacct does
                "elapsed": _ELAPSED if still else str(dur),
                "eligible": str(eligible),
                "start": str(start),
                "end": "0" if still else str(end),
                "submission": str(eligible),
            }
            text = parts[0] + "".join(values[k] + parts[j + 1] for j, k in enumerate(names))
            rec = (eligible, 0 if still else end, text.encode())
            if still:
                running.append(rec)
                running_starts.append(start)
            else:
                hours.setdefault(end // HOUR, []).append(rec)
        for hour, recs in hours.items():
            _write_chunk(root / f"h{hour}", recs)
        _write_chunk(root / "running", running)
        (root / "running.starts").write_bytes(marshal.dumps(running_starts))
        audit = root / "burst-audit.jsonl"
        events: list[dict[str, Any]] = []
        for node, spans in burst_spans.items():
            spans.sort()
            merged: list[list[int]] = []
            for a, b in spans:
                if merged and a <= merged[-1][1]:
                    merged[-1][1] = max(merged[-1][1], b)
                else:
                    merged.append([a, b])
            for k, (a, b) in enumerate(merged):
                iid = f"i-{burst_nodes.index(node):02x}{k:015x}"
                events.append(
                    {"ts": a, "event": "resume.launched", "nodes": node, "instances": [iid]}
                )
                events.append({"ts": b, "event": "suspend", "nodes": node, "instances": [iid]})
        events.sort(key=lambda e: e["ts"])
        audit.write_text("".join(json.dumps(e) + "\n" for e in events))
        head = {k: v for k, v in fixture.items() if k not in ("jobs", "_coreburst_fixture")}
        (root / "meta.json").write_text(
            json.dumps(
                {
                    "doc": head,
                    "since": since,
                    "until": until,
                    "n": n,
                    "max_duration_s": 36 * HOUR + 600,
                    "core_nodes": core_count,
                    "audit_log": str(audit),
                    "format": FORMAT,
                }
            )
        )
        return cls(root)


def _write_chunk(base: Path, recs: list[tuple[int, int, bytes]]) -> None:
    """``.dat``: the records' text back to back; ``.idx``: (eligible, end, offset, length)."""
    index = []
    offset = 0
    with base.with_suffix(".dat").open("wb") as f:
        for eligible, end, text in recs:
            f.write(text)
            index.append((eligible, end, offset, len(text)))
            offset += len(text)
    base.with_suffix(".idx").write_bytes(marshal.dumps(index))


def _epoch(text: str) -> int:
    return int(datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp())


def answer(root: Path, argv: list[str], out: Any, now: int | None = None) -> int:
    """Write what sacct would print for ``argv`` (``--starttime``/``--endtime``, ``--json``)
    at ``now`` (default: ``$SACCTGEN_NOW``, else the clock): a running job's elapsed is
    ``now`` less its start."""
    if now is None:
        now = int(os.environ.get("SACCTGEN_NOW") or time.time())
    opts = dict(a.split("=", 1) for a in argv if a.startswith("--") and "=" in a)
    if "--json" not in argv:
        sys.stderr.write("sacct (stand-in): only --json is recorded here\n")
        return 1
    meta = json.loads((root / "meta.json").read_text())
    lo, hi = _epoch(opts["--starttime"]), _epoch(opts["--endtime"])
    head = json.dumps(meta["doc"], indent=2)
    out.write(head[:-2].encode() + b',\n  "jobs": [\n')
    first = True
    last_hour = (hi + meta["max_duration_s"]) // HOUR
    chunks = [root / f"h{h}" for h in range(lo // HOUR, last_hour + 1)] + [root / "running"]
    for base in chunks:
        idx_path = base.with_suffix(".idx")
        if not idx_path.exists():
            continue
        index = marshal.loads(idx_path.read_bytes())
        with base.with_suffix(".dat").open("rb") as f:
            data = f.read()
        starts = (
            marshal.loads((root / "running.starts").read_bytes()) if base.name == "running" else []
        )
        for k, (eligible, end, offset, length) in enumerate(index):
            if eligible and eligible < hi and (end >= lo or end == 0):
                if not first:
                    out.write(b",\n")
                text = data[offset : offset + length]
                if starts:  # still running: elapsed until now
                    text = text.replace(_ELAPSED.encode(), str(now - starts[k]).encode())
                out.write(text)
                first = False
    out.write(b"\n  ]\n}\n")
    return 0


if __name__ == "__main__":
    if sys.argv[1] == "generate":  # generate ROOT FIXTURE N DAYS UNTIL
        root, fixture, n, days, until = sys.argv[2:7]
        Generated.create(
            Path(root), json.loads(Path(fixture).read_text()), n=int(n), days=int(days),
            until=int(until),
        )  # fmt: skip
        sys.exit(0)
    sys.exit(answer(Path(sys.argv[1]), sys.argv[2:], sys.stdout.buffer))
