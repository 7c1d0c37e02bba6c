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

import gc
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from fractions import Fraction
from functools import lru_cache
from typing import Any

from coreburst.burst.hostlist import HostlistError, expand
from coreburst.common.slurmcmd import Runner, SlurmError, call

# orjson (in the guardrails extra, which the controller installs) decodes sacct's JSON in a
# fraction of the standard library's time (benchmarks/cost_report.py prints the figure); the
# base install reads the same documents with json, to the same figures.
_json_loads: Callable[[str], Any]
try:
    from orjson import loads as _json_loads
except ImportError:  # pragma: no cover - the base install
    _json_loads = json.loads

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


def _num(value: Any, what: str, job: str = "") -> int | None:
    """An integer as either layout prints it: plain, or ``{"set", "infinite", "number"}``
    (data_parser v0.0.39 on). None for unset or infinite. (``what`` and ``job`` are joined
    only for the error: a million records' messages built in advance cost seconds.)"""
    if type(value) is int:
        return value
    if isinstance(value, dict):
        if not value.get("set", False) or value.get("infinite", False):
            return None
        value = value.get("number")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        where = f"job {job} {what}" if job else what
        raise AccountingError(f"sacct --json: {where} is {value!r}, not a number")
    return int(value)


def _obj(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def _nodes(hostlist: str, job: str) -> tuple[str, ...]:
    try:
        return _expand_cached(hostlist)
    except HostlistError as exc:
        raise AccountingError(
            f"job {job}: node list {hostlist.strip()!r} unreadable ({exc})"
        ) from None


@lru_cache(maxsize=1 << 16)
def _expand_cached(hostlist: str) -> tuple[str, ...]:
    """A node list's names; the same lists recur across a million records."""
    text = hostlist.strip()
    if not text or text.lower() in ("none assigned", "(null)", "none"):
        return ()
    return tuple(expand(text))


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


@contextmanager
def _no_gc() -> Iterator[None]:
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _bad_times(elapsed: int, end: int, start: int | None) -> str:
    """Why a record's times cannot be, or "". ``start``: the run's start (None: unset)."""
    if elapsed < 0:
        return "a negative elapsed time (ElapsedRaw)"
    if end < 0:
        return "a negative end time"
    if end > 0 and elapsed > end:
        return "an elapsed time longer than the epoch to its end"
    if start is not None and 0 < end < start:
        return "an end before its start"
    return ""


def bad_records_note(bad: dict[str, list[str]]) -> str | None:
    """One note for the records left out, by reason, naming up to five jobs each."""
    if not bad:
        return None
    parts = []
    # a record sacct lists in more than one time slice is named once
    bad = {why: sorted(set(jobs), key=lambda j: (len(j), j)) for why, jobs in bad.items()}
    for why, jobs in sorted(bad.items()):
        more = f" and {len(jobs) - 5:,} more" if len(jobs) > 5 else ""
        parts.append(f"{len(jobs):,} with {why} (job {', '.join(jobs[:5])}{more})")
    n = sum(len(v) for v in bad.values())
    return (
        f"{n:,} sacct record(s) left out, their times cannot be: {'; '.join(parts)}; "
        "check them with sacct -j JOBID and fix slurmdbd's job table"
    )


def parse_sacct_json(
    raw: bytes | str, now: int, bad: dict[str, list[str]] | None = None
) -> list[JobRecord]:
    """Job records from ``sacct --json`` (22.05's dbv0.0.38 layout or the data_parser
    layouts of 23.02 on); raises :class:`AccountingError` naming what is wrong. A record
    whose times cannot be (negative elapsed, an end before its start) is left out and its
    job named in ``bad`` (reason -> job ids; :func:`bad_records_note`)."""
    # A window of records is millions of containers made at once, none of them garbage: the
    # cycle collector walking them again and again took most of the time.
    with _no_gc():
        try:
            doc = _json_loads(decode_output(raw, "sacct --json"))
        except json.JSONDecodeError as exc:  # orjson's JSONDecodeError is a subclass
            raise AccountingError(
                f"sacct --json: not JSON ({exc.msg} at line {exc.lineno})"
            ) from None
        out = _json_jobs(doc, now, {} if bad is None else bad)
        del doc  # freed before the collector is back
    return out


def _json_jobs(doc: Any, now: int, bad: dict[str, list[str]]) -> list[JobRecord]:
    if not isinstance(doc, dict):
        raise AccountingError("sacct --json: its output is not a JSON object")
    errors = [e for e in doc.get("errors") or [] if e]
    if errors:
        first = errors[0]
        text = first.get("description") or first.get("error") if isinstance(first, dict) else first
        raise AccountingError(f"sacct --json reported an error: {text}")
    if not isinstance(doc.get("jobs"), list):
        raise AccountingError("sacct --json: no 'jobs' list in its output")
    out: list[JobRecord] = []
    append = out.append
    for j in doc["jobs"]:
        # (hot loop: a million records; plain values are taken as they are, anything else
        # goes through the checks of _num/_text/_obj)
        if type(j) is not dict:
            raise AccountingError("sacct --json: a job entry is not an object")
        job_id = _num(j.get("job_id"), "job_id")
        if job_id is None:
            raise AccountingError("sacct --json: a job without job_id")
        array = _obj(j.get("array"))
        task = _num(array.get("task_id"), "array.task_id")
        array_job = _num(array.get("job_id"), "array.job_id") or 0
        shown = f"{array_job}_{task}" if array_job and task is not None else str(job_id)
        t = _obj(j.get("time"))
        elapsed = _num(t.get("elapsed"), "time.elapsed", shown) or 0
        end = _num(t.get("end"), "time.end", shown) or 0
        start = _num(t.get("start"), "time.start", shown)  # the run's start (every layout)
        if elapsed < 0 or end < 0 or (end and elapsed > end) or (start and 0 < end < start):
            bad.setdefault(_bad_times(elapsed, end, start), []).append(shown)
            continue
        state_v = _obj(j.get("state")).get("current")
        state = " ".join(state_v) if type(state_v) is list else _text(state_v)
        gpus = 0
        items = _obj(j.get("tres")).get("allocated") or []
        if items:
            pairs = []
            for item in items:
                if type(item) is not dict:
                    raise AccountingError(f"job {shown}: tres.allocated entry is not an object")
                if item.get("type") != "gres":  # only gres/gpu is read (cpu, mem, node...)
                    continue
                count = _num(item.get("count"), "TRES count", shown) or 0
                pairs.append(("gres/" + _text(item.get("name")), count))
            gpus = gpu_count(pairs)
        v = j.get("nodes")
        nodes = _nodes(v if type(v) is str else _text(v), shown)
        running = end <= 0
        stop = now if running else end
        user, account = j.get("user"), j.get("account")
        partition, cluster = j.get("partition"), j.get("cluster")
        append(
            JobRecord(
                shown,
                user if type(user) is str else _text(user),
                account if type(account) is str else _text(account),
                partition if type(partition) is str else _text(partition),
                cluster if type(cluster) is str else _text(cluster),
                nodes,
                gpus,
                stop - elapsed,
                None if running else end,
                state,
            )
        )
    return out


def parse_sacct_parsable(
    raw: bytes | str, now: int, bad: dict[str, list[str]] | None = None
) -> list[JobRecord]:
    """Job records from ``sacct --parsable2 --noheader --format=`` :data:`PARSABLE_FIELDS`
    run with ``SLURM_TIME_FORMAT=%s``; records with impossible times go to ``bad`` as in
    :func:`parse_sacct_json`."""
    bad = {} if bad is None else bad
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
        job, user, account, partition, cluster, nodelist, elapsed_s, start_s, end_s, tres, st = cols
        unset = ("", "Unknown", "None")
        try:
            elapsed = int(elapsed_s or 0)
            end = 0 if end_s in unset else int(end_s)
            start = None if start_s in unset else int(start_s)
        except ValueError:
            raise AccountingError(
                f"sacct --parsable2 line {n}: ElapsedRaw {elapsed_s!r} / Start {start_s!r} / "
                f"End {end_s!r} are not seconds; run sacct with SLURM_TIME_FORMAT=%s"
            ) from None
        why = _bad_times(elapsed, end, start)
        if why:
            bad.setdefault(why, []).append(job)
            continue
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


# How much of slurmdbd's answer one sacct call may bring: a call over this much JSON is asked
# again as two halves, so the records parsed at once stay a few hundred MB of objects
# whatever the site's rate. sacct --json prints about 1.8-4 kB per job run.
SLICE_MAX_BYTES = 48 << 20
SLICE_FIRST_S = 86400  # the first slice; later ones grow while answers stay small
SLICE_MIN_S = 60


def owner_time(job: JobRecord, since: int, until: int) -> int:
    """The instant that decides which time slice of [since, until) counts a run: its end,
    or the window's last second for a run still going or ending after it. sacct lists a run
    in every slice it overlaps (SchedMD/slurm ``as_mysql_jobacct_process.c``: eligible before
    the slice's end, and ended at or after its start or not at all), so each is counted in
    one: a run's end only changes after the report's ``now``, past ``until``, so its owner is
    the same in every slice that lists it."""
    if job.end is None:
        return until - 1
    return min(max(job.end, since), until - 1)


class JobStream:
    """Every job run in [since, until) from slurmdbd, read in time slices, one sacct call
    (with its own deadline) per slice, and given out one slice at a time, so that memory is
    bounded by a slice, not the window. Iterate once. ``source`` names the layout read;
    ``bad`` the records left out (:func:`bad_records_note`).

    >>> stream = JobStream(since, until, now)  # doctest: +SKIP
    >>> sum(j.gpu_seconds(since, until, now) for j in stream), stream.source  # doctest: +SKIP
    """

    def __init__(
        self,
        since: int,
        until: int,
        now: int,
        *,
        env: dict[str, str] | None = None,
        run: Runner = subprocess.run,
        timeout_s: float = 120,
        slice_s: int | None = None,
        max_bytes: int | None = None,
        progress: Callable[[int, int, int], None] | None = None,
    ) -> None:
        self.since, self.until, self.now = since, until, now
        self.env = {k: v for k, v in (env if env is not None else os.environ).items()}
        self.env.pop("SLURM_TIME_FORMAT", None)  # 22.05's --json cannot parse its own times
        self.run, self.timeout_s = run, timeout_s
        # (None: the module's figures, read now, so a test can set them)
        self.slice_s = max(SLICE_MIN_S, SLICE_FIRST_S if slice_s is None else slice_s)
        self.max_bytes = SLICE_MAX_BYTES if max_bytes is None else max_bytes
        self.progress = progress
        self.layout: str | None = None
        self.bad: dict[str, list[str]] = {}
        self.calls = 0
        self.runs = 0

    @property
    def source(self) -> str:
        return f"sacct --{self.layout or 'json'}"

    def _call(self, since: int, until: int, layout: str) -> tuple[int, bytes | str, str]:
        run_env = {**self.env, "TZ": "UTC"}
        if layout == "parsable2":
            run_env["SLURM_TIME_FORMAT"] = "%s"
        try:
            done = call(
                *sacct_args(since, until, layout), env=run_env, timeout_s=self.timeout_s,
                run=self.run, hint=SACCT_HINT, timeout_hint="is slurmdbd up?",
            )  # fmt: skip
        except SlurmError as exc:
            raise AccountingError(str(exc)) from None
        self.calls += 1
        return done.returncode, done.stdout, done.said or f"exit {done.returncode}"

    def _slice(self, since: int, until: int) -> bytes | str:
        """One slice's output; the first call picks the layout (``--json``; a sacct built
        without the JSON serializer refuses it and is asked for ``--parsable2``)."""
        if self.layout is not None:
            code, out, said = self._call(since, until, self.layout)
            if code != 0:
                raise AccountingError(
                    f"sacct failed ({said}) for {slurm_time(since)}..{slurm_time(until)}; "
                    "check that slurmdbd is up"
                )
            return out
        errors = []
        for layout in ("json", "parsable2"):
            code, out, said = self._call(since, until, layout)
            if code == 0:
                self.layout = layout
                return out
            errors.append(said)
        said = (
            errors[0]
            if errors[0] == errors[1]
            else f"--json: {errors[0]}; --parsable2: {errors[1]}"
        )
        raise AccountingError(
            f"sacct failed ({said}); check SLURM_CONF names a slurm.conf whose "
            "AccountingStorageType is accounting_storage/slurmdbd and that slurmdbd is up"
        )

    def _parse(self, out: bytes | str) -> list[JobRecord]:
        parse = parse_sacct_json if self.layout == "json" else parse_sacct_parsable
        return parse(out, self.now, self.bad)

    def _next_step(self, span: int, size: int) -> int:
        """The next slice's length: aimed at half the cap from this slice's bytes per second
        (the next stretch may be busier), at most four times this one's."""
        if size <= 0:
            return span * 4
        return max(SLICE_MIN_S, min(span * 4, span * (self.max_bytes // 2) // size))

    def __iter__(self) -> Iterator[JobRecord]:
        # The next slice is asked for while this one is parsed: slurmdbd and sacct work
        # while we do, and memory holds one slice's objects and the next one's text.
        from concurrent.futures import ThreadPoolExecutor

        lo = self.since
        hi = min(self.until, lo + self.slice_s)
        out = self._slice(lo, hi)  # the first call picks the layout
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="sacct") as pool:
            while True:
                size = len(out)
                if size > self.max_bytes and hi - lo > SLICE_MIN_S:
                    del out  # too much at once (the objects are ~10x): ask for half
                    hi = lo + max(SLICE_MIN_S, (hi - lo) // 2)
                    out = self._slice(lo, hi)
                    continue
                ahead = None
                if hi < self.until:
                    next_lo, next_hi = hi, min(self.until, hi + self._next_step(hi - lo, size))
                    ahead = pool.submit(self._slice, next_lo, next_hi)
                records = self._parse(out)
                del out
                for job in records:
                    if lo <= owner_time(job, self.since, self.until) < hi:
                        self.runs += 1
                        yield job
                del records
                if self.progress is not None:
                    self.progress(hi - self.since, self.until - self.since, self.runs)
                if ahead is None:
                    return
                lo, hi = next_lo, next_hi
                out = ahead.result()


def read_jobs(
    since: int,
    until: int,
    now: int,
    *,
    env: dict[str, str] | None = None,
    run: Runner = subprocess.run,
    timeout_s: float = 120,
    slice_s: int | None = None,
) -> tuple[list[JobRecord], str]:
    """Every job run in the window from slurmdbd, and which layout was read (see
    :class:`JobStream`; ``slice_s`` None: the whole window in one call). Raises
    :class:`AccountingError` (one line) when sacct cannot answer."""
    stream = JobStream(
        since, until, now, env=env, run=run, timeout_s=timeout_s,
        slice_s=slice_s or max(SLICE_MIN_S, until - since), max_bytes=1 << 62,
    )  # fmt: skip
    jobs = list(stream)
    return jobs, stream.source


def terminal_progress(done_s: int, total_s: int, runs: int) -> None:
    """``reading sacct: 40% of the window, 123,456 job runs`` on stderr, when it is a
    terminal (a pipe or a log gets nothing)."""
    if not sys.stderr.isatty():
        return
    end = "\n" if done_s >= total_s else ""
    sys.stderr.write(
        f"\rreading sacct: {done_s / total_s:4.0%} of the window, {runs:,} job runs{end}"
    )
    sys.stderr.flush()
