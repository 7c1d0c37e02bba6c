"""Job records from Slurm's accounting database (slurmdbd), read with ``sacct``.

What sites trust for "who used which GPUs when" is Slurm's own accounting, not what a daemon
happened to see: a job that ran while the guardrails daemon was down, or before it was
installed, is in slurmdbd all the same. :func:`read_jobs` runs ``sacct`` for a window and
returns one :class:`JobRecord` per job run (``--duplicates``: each run of a requeued job used
its GPUs), with its allocated GPUs from the job's TRES (``gres/gpu``; slurm.conf(5),
``AccountingStorageTRES=gres/gpu`` must be set for Slurm to account it).

Two layouts are read:

* ``sacct --json`` (preferred). Slurm 22.05 prints the ``openapi/dbv0.0.38`` layout
  (``meta.plugin.type``); 23.02 and later print the data_parser layout of their release
  (v0.0.39 on): ``state.current`` becomes a list of flags, and numbers that may be unset
  become ``{"set", "infinite", "number"}`` objects (SchedMD/slurm
  ``src/plugins/data_parser/v0.0.40/parsers.c``, ``PARSER_ARRAY(JOB)``). Both are read. The
  job's span is taken as ``time.end - time.elapsed`` to ``time.end`` (now for a running
  job). ``time.start`` is the run's start there too (``add_parse(..., start, "time/start")``;
  the eligible time is ``time/eligible``: SchedMD/slurm ``src/plugins/data_parser/*/parsers.c``,
  23.02 to 26.05), and the two spans differ only for a job that was suspended: slurmdbd leaves
  the time suspended out of ``elapsed`` (``as_mysql_jobacct_process.c``).
* ``sacct --parsable2`` with an explicit ``--format`` (:data:`PARSABLE_FIELDS`) and
  ``SLURM_TIME_FORMAT=%s`` (epoch seconds), when ``--json`` is not available (a Slurm built
  without its JSON serializer). sacct(1): ``AllocTRES``, ``ElapsedRaw`` (seconds), ``End``
  ("Unknown" while running).

    >>> jobs = parse_sacct_parsable(
    ...     "7|ann|ml|core|burstlab|core1|3600|1796000000|1796003600|"
    ...     "billing=1,cpu=1,gres/gpu=4,node=1|COMPLETED\\n", now=1796010000)
    >>> jobs[0].gpus, jobs[0].gpu_seconds(1796000000, 1796001800, now=1796010000)
    (4, 7200)
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from fractions import Fraction
from typing import Any

from coreburst.burst.hostlist import HostlistError, expand
from coreburst.common.slurmcmd import Runner, SlurmError, call

# How to get a sacct that can answer.
SACCT_HINT = (
    "install slurm-client (Debian) on this machine, with a slurm.conf whose "
    "AccountingStorageType is accounting_storage/slurmdbd"
)


class AccountingError(ValueError):
    """sacct could not be run or printed something unreadable (one line)."""


# sacct(1) field names, in this order, for --parsable2.
PARSABLE_FIELDS = (
    "JobID",
    "User",
    "Account",
    "Partition",
    "Cluster",
    "NodeList",
    "ElapsedRaw",
    "Start",
    "End",
    "AllocTRES",
    "State",
)


@dataclass(frozen=True)
class JobRecord:
    """One run of one job as slurmdbd recorded it. ``end`` is None while it runs; times are
    UTC epoch seconds; ``gpus`` is the job's allocated ``gres/gpu`` over all its nodes."""

    job_id: str
    user: str
    account: str
    partition: str
    cluster: str
    nodes: tuple[str, ...]
    gpus: int
    start: int
    end: int | None
    state: str

    def span(self, now: int) -> tuple[int, int]:
        return self.start, self.end if self.end is not None else max(self.start, now)

    def seconds(self, since: int, until: int, now: int) -> int:
        """Seconds of this run inside [since, until)."""
        start, end = self.span(now)
        return max(0, min(end, until) - max(start, since))

    def gpu_seconds(self, since: int, until: int, now: int) -> int:
        """Allocated GPU-seconds inside [since, until): GPUs x elapsed, clipped to the window."""
        return self.gpus * self.seconds(since, until, now)

    @property
    def gpus_per_node(self) -> Fraction:
        """GPUs on each node (a multi-node job's GPUs split evenly: sacct keeps the job's
        total, not a per-node count)."""
        return Fraction(self.gpus, len(self.nodes)) if self.nodes else Fraction(0)


def _num(value: Any, what: str) -> int | None:
    """An integer as either layout prints it: plain, or ``{"set", "infinite", "number"}``
    (data_parser v0.0.39 on). None for unset or infinite."""
    if isinstance(value, dict):
        if not value.get("set", False) or value.get("infinite", False):
            return None
        value = value.get("number")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise AccountingError(f"sacct --json: {what} is {value!r}, not a number")
    return int(value)


def _obj(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def _nodes(hostlist: str, job: str) -> tuple[str, ...]:
    text = hostlist.strip()
    if not text or text.lower() in ("none assigned", "(null)", "none"):
        return ()
    try:
        return tuple(expand(text))
    except HostlistError as exc:
        raise AccountingError(f"job {job}: node list {text!r} unreadable ({exc})") from None


def gpu_count(items: Sequence[tuple[str, int]]) -> int:
    """``gres/gpu`` from (name, count) pairs; without the untyped count, the typed ones
    (``gres/gpu:h100``) summed. A job with no GPU TRES has 0."""
    untyped = [c for name, c in items if name == "gres/gpu"]
    if untyped:
        return untyped[0]
    return sum(c for name, c in items if name.startswith("gres/gpu:"))


def decode_output(raw: bytes | str, what: str) -> str:
    if isinstance(raw, str):
        return raw
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise AccountingError(
            f"{what}: bytes that are not UTF-8 at offset {exc.start}; check the names in "
            "Slurm's database (users, accounts) and the locale sacct runs in"
        ) from None


def parse_sacct_json(raw: bytes | str, now: int) -> list[JobRecord]:
    """Job records from ``sacct --json`` (22.05's dbv0.0.38 layout or the data_parser
    layouts of 23.02 on); raises :class:`AccountingError` naming what is wrong."""
    try:
        doc = json.loads(decode_output(raw, "sacct --json"))
    except json.JSONDecodeError as exc:
        raise AccountingError(f"sacct --json: not JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(doc, dict):
        raise AccountingError("sacct --json: its output is not a JSON object")
    errors = [e for e in doc.get("errors") or [] if e]
    if errors:
        first = errors[0]
        text = first.get("description") or first.get("error") if isinstance(first, dict) else first
        raise AccountingError(f"sacct --json reported an error: {text}")
    if not isinstance(doc.get("jobs"), list):
        raise AccountingError("sacct --json: no 'jobs' list in its output")
    out = []
    for j in doc["jobs"]:
        if not isinstance(j, dict):
            raise AccountingError("sacct --json: a job entry is not an object")
        job_id = _num(j.get("job_id"), "job_id")
        if job_id is None:
            raise AccountingError("sacct --json: a job without job_id")
        array = _obj(j.get("array"))
        task = _num(array.get("task_id"), "array.task_id")
        array_job = _num(array.get("job_id"), "array.job_id") or 0
        shown = f"{array_job}_{task}" if array_job and task is not None else str(job_id)
        t = _obj(j.get("time"))
        elapsed = _num(t.get("elapsed"), f"job {shown} time.elapsed") or 0
        end = _num(t.get("end"), f"job {shown} time.end") or 0
        state_v = _obj(j.get("state")).get("current")
        state = " ".join(state_v) if isinstance(state_v, list) else _text(state_v)
        tres = _obj(j.get("tres"))
        pairs = []
        for item in tres.get("allocated") or []:
            if not isinstance(item, dict):
                raise AccountingError(f"job {shown}: tres.allocated entry is not an object")
            count = _num(item.get("count"), f"job {shown} TRES count") or 0
            name = _text(item.get("type")) + ("/" + item["name"] if item.get("name") else "")
            pairs.append((name, count))
        nodes = _nodes(_text(j.get("nodes")), shown)
        running = end <= 0
        stop = now if running else end
        out.append(
            JobRecord(
                job_id=shown,
                user=_text(j.get("user")),
                account=_text(j.get("account")),
                partition=_text(j.get("partition")),
                cluster=_text(j.get("cluster")),
                nodes=nodes,
                gpus=gpu_count(pairs),
                start=stop - elapsed,
                end=None if running else end,
                state=state,
            )
        )
    return out


def parse_sacct_parsable(raw: bytes | str, now: int) -> list[JobRecord]:
    """Job records from ``sacct --parsable2 --noheader --format=`` :data:`PARSABLE_FIELDS`
    run with ``SLURM_TIME_FORMAT=%s``."""
    out = []
    for n, line in enumerate(decode_output(raw, "sacct --parsable2").splitlines(), 1):
        if not line.strip():
            continue
        cols = line.split("|")
        if len(cols) != len(PARSABLE_FIELDS):
            raise AccountingError(
                f"sacct --parsable2 line {n}: {len(cols)} fields, expected "
                f"{len(PARSABLE_FIELDS)} ({','.join(PARSABLE_FIELDS)})"
            )
        job, user, account, partition, cluster, nodelist, elapsed_s, _start, end_s, tres, st = cols
        try:
            elapsed = int(elapsed_s or 0)
            end = 0 if end_s in ("", "Unknown", "None") else int(end_s)
        except ValueError:
            raise AccountingError(
                f"sacct --parsable2 line {n}: ElapsedRaw {elapsed_s!r} / End {end_s!r} are not "
                "seconds; run sacct with SLURM_TIME_FORMAT=%s"
            ) from None
        pairs = []
        for part in filter(None, tres.split(",")):
            name, _, count = part.partition("=")
            if name.startswith("gres/gpu"):
                try:
                    pairs.append((name, int(count)))
                except ValueError:
                    raise AccountingError(
                        f"sacct --parsable2 line {n}: AllocTRES {part!r} is not a count"
                    ) from None
        running = end <= 0
        stop = now if running else end
        out.append(
            JobRecord(
                job_id=job,
                user=user,
                account=account,
                partition=partition,
                cluster=cluster,
                nodes=_nodes(nodelist, job),
                gpus=gpu_count(pairs),
                start=stop - elapsed,
                end=None if running else end,
                state=st.split(" ")[0],
            )
        )
    return out


def slurm_time(epoch: int) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%S")


def sacct_args(since: int, until: int, layout: str) -> list[str]:
    """The sacct command for every job run (all users, requeued runs too) between ``since``
    and ``until`` (UTC; sacct is run with TZ=UTC)."""
    base = [
        "sacct",
        "--allusers",
        "--duplicates",
        "--allocations",
        f"--starttime={slurm_time(since)}",
        f"--endtime={slurm_time(until)}",
    ]
    if layout == "json":
        return [*base, "--json"]
    return [*base, "--parsable2", "--noheader", f"--format={','.join(PARSABLE_FIELDS)}"]


def read_jobs(
    since: int,
    until: int,
    now: int,
    *,
    env: dict[str, str] | None = None,
    run: Runner = subprocess.run,
    timeout_s: float = 120,
) -> tuple[list[JobRecord], str]:
    """Every job run in the window from slurmdbd, and which layout was read. Tries
    ``--json``; a sacct that refuses it (built without the JSON serializer) is asked for
    ``--parsable2``. Raises :class:`AccountingError` (one line) when neither works."""
    base = {k: v for k, v in (env if env is not None else os.environ).items()}
    base.pop("SLURM_TIME_FORMAT", None)  # 22.05's --json cannot parse its own times with it
    errors = []
    for layout in ("json", "parsable2"):
        cmd = sacct_args(since, until, layout)
        run_env = {**base, "TZ": "UTC"}
        if layout == "parsable2":
            run_env["SLURM_TIME_FORMAT"] = "%s"
        try:
            done = call(
                *cmd, env=run_env, timeout_s=timeout_s, run=run, hint=SACCT_HINT,
                timeout_hint="is slurmdbd up?",
            )  # fmt: skip
        except SlurmError as exc:
            raise AccountingError(str(exc)) from None
        if done.returncode == 0:
            parse = parse_sacct_json if layout == "json" else parse_sacct_parsable
            return parse(done.stdout, now), f"sacct --{layout}"
        errors.append(done.said or f"exit {done.returncode}")
    said = errors[0] if errors[0] == errors[1] else f"--json: {errors[0]}; --parsable2: {errors[1]}"
    raise AccountingError(
        f"sacct failed ({said}); check SLURM_CONF names a slurm.conf whose "
        "AccountingStorageType is accounting_storage/slurmdbd and that slurmdbd is up"
    )
