"""coreburst's notes on a Slurm job's AdminComment, merged with what is already there.

A job's ``AdminComment`` is one free-text field that only an administrator can set
(``scontrol update jobid=N AdminComment=...`` replaces all of it); a site may keep its own
text there, and coreburst writes several kinds of note over a job's life (why it was requeued,
what it costs while bursting, why it was moved to the on-demand partition). :func:`merge`
keeps the site's text as it is, first, then one note per kind, the newest first, each
segment separated by :data:`SEP`. A note is ``coreburst: <text>``; its kind is told from the
start of its text (:data:`KINDS`), so what Slurm shows stays readable as it always was.

    >>> first = merge("site: project X", "requeue", "coreburst: burst launch for od-1 failed")
    >>> first
    'site: project X | coreburst: burst launch for od-1 failed'
    >>> merge(first, "burst", "coreburst: bursting on od-2").split(SEP)
    ['site: project X', 'coreburst: bursting on od-2', 'coreburst: burst launch for od-1 failed']

Limits (Slurm's source, ``src/slurmctld/job_mgr.c``): slurmctld checks no length for
``admin_comment`` (it is not among the fields ``_test_job_desc_fields`` bounds), and slurmdbd
keeps it in a MySQL ``text`` column (``accounting_storage_mysql.c``: 65,535 bytes), so the
whole value is held under :data:`MAX_BYTES`: coreburst's oldest notes go first, the site's text
is never cut. scontrol takes everything after the first ``=`` of the ``AdminComment=``
argument as the value (``src/scontrol/update_job.c``), so an argv element needs no quoting; a
tag ending in ``+``/``-`` would append or be refused, which ``AdminComment=`` never is.

Reading it back: from ``squeue --json --states=all`` (:func:`read_jobs`), where every job's
``admin_comment`` and ``comment`` are JSON strings; never from ``scontrol show job`` text. That
text has no quoting: ``-o`` prints ``AdminComment=<value>`` and then the other fields, the
user's own ``Comment=`` among them, separated by spaces, so where the value ends could only be
guessed from the layout. Up to 25.05 ``-o`` left two spaces after it (``src/api/job_info.c``:
``"AdminComment=%s "`` and a one-space ``line_end``); Slurm 25.11 dropped one ("Remove extra
space with --oneliner", its NEWS), and the reader that relied on the two took the user's
Comment and the rest of the line for the AdminComment and wrote all of it back (the 26.05
recording, ``tests/fixtures/slurm/scontrol-o-show-job-26.05-recorded.txt``, shows that layout).
``scontrol --json`` would be exact, but 22.05's scontrol has none ("unrecognized option
'--json'"); ``squeue --json`` has ``admin_comment`` in every job object from 22.05
(openapi/v0.0.38) to 26.05 (data_parser v0.0.45), as the recordings
``tests/fixtures/slurm/squeue-jobs-*-recorded.json`` show, so it is the one read on every
release. ``--states=all`` keeps a job that just ended listed. A job object without
``admin_comment`` has an unreadable comment (None) and coreburst leaves it alone; output that is
not that JSON is one :class:`~coreburst.common.slurmcmd.SlurmError` line and nothing is written.

    >>> job = parse_jobs('{"jobs": [{"job_id": 7, "user_name": "ann", "account": "ml", '
    ...     '"time_limit": 90, "admin_comment": "site", "comment": "x AdminComment=y"}]}')["7"]
    >>> job.admin_comment, job.comment, job.minutes
    ('site', 'x AdminComment=y', 90)
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from coreburst.common.slurmcmd import SlurmError, slurm_minutes, slurm_number

SEP = " | "
PREFIX = "coreburst: "
MAX_BYTES = 65535
NOTE_MAX = 900  # one note's characters, as before

# kind -> the starts of its notes' text (after "coreburst: "); the first match wins. A note of
# a kind named here replaces the job's previous note of that kind.
KINDS: dict[str, tuple[str, ...]] = {
    # the job's burst state: launched (and what it costs), held by the spend gate, paused
    "burst": ("bursting on ", "held by the burst spend gate", "burst paused"),
    # why the job was interrupted or requeued: a launch, a health check, a spot warning
    "requeue": ("burst launch for ", "burst node ", "spot ", "requeued "),
    # why it waits in the on-demand partition too (guardrails burst-reconcile)
    "fallback": ("pending ",),
}

# The one read of every job: squeue(1) ``--json`` (every release coreburst runs on has it), all
# states (a job that just ended is still listed, so it is not taken for one Slurm forgot).
READ = ("--json", "--states=all")


def kind_of(segment: str) -> str | None:
    """The kind of a coreburst note (``"other"``: ours, of no kind named here); None: not
    coreburst's."""
    if not segment.startswith(PREFIX):
        return None
    text = segment[len(PREFIX) :]
    return next((k for k, starts in KINDS.items() if text.startswith(starts)), "other")


def note(text: str) -> str:
    """One note: one line, at most :data:`NOTE_MAX` characters."""
    return " ".join(text.split())[:NOTE_MAX]


def merge(current: str, kind: str, text: str) -> str | None:
    """``current`` with ``text`` (a ``coreburst: ...`` note of ``kind``) in place of the
    previous note of that kind; None when even the site's text and this note alone do not fit
    (then nothing is written)."""
    assert kind in KINDS and kind_of(note(text)) == kind, (kind, text)
    site: list[str] = []
    ours: list[str] = []
    seen = {kind}
    for seg in current.split(SEP) if current else []:
        k = kind_of(seg)
        if k is None:
            site.append(seg)
        elif k not in seen:  # the newest of each kind is the first one met
            seen.add(k)
            ours.append(seg)
    ours.insert(0, note(text))
    while ours:
        value = SEP.join(site + ours)
        if len(value.encode("utf-8")) <= MAX_BYTES:
            return value
        if len(ours) == 1:
            return None
        ours.pop()  # the oldest of coreburst's notes goes first
    return None


def merged_for(
    comments: Mapping[str, str | None], listed: bool, job: str, kind: str, text: str
) -> str | None:
    """The AdminComment to write on ``job``: :func:`merge` of its current comment (from
    :func:`comments`) and ``text``. A job the read did not list has no comment when the read
    answered (``listed``); when it did not, or the job's comment could not be read, or even the
    note alone does not fit: None, and nothing is written (a comment is never overwritten
    blind).

    >>> merged_for({"7": "site"}, True, "7", "burst", "coreburst: bursting on od-1")
    'site | coreburst: bursting on od-1'
    >>> merged_for({}, True, "8", "burst", "coreburst: bursting on od-1")
    'coreburst: bursting on od-1'
    >>> merged_for({}, False, "8", "burst", "coreburst: bursting on od-1") is None
    True
    """
    have = comments.get(job, "" if listed else None)
    return None if have is None else merge(have, kind, text)


@dataclass(frozen=True)
class Job:
    """One job as ``squeue --json`` lists it: what coreburst reads of it."""

    user: str  # "" when not shown
    account: str  # "" when it has none
    minutes: int | None  # its time limit; None: no limit of its own
    admin_comment: str | None  # None: unreadable, so never written
    comment: str | None  # the user's own (--comment); None: not shown


def _text(v: object) -> str | None:
    return v if isinstance(v, str) else None


def job_records(out: str) -> list[Any]:
    """The ``jobs`` list of ``squeue --json`` output (every release's layout has one); output
    that is not JSON or has no such list is one :class:`SlurmError` line."""
    try:
        doc = json.loads(out)
    except ValueError:
        raise SlurmError(f"squeue {' '.join(READ)}: output is not JSON") from None
    jobs = doc.get("jobs") if isinstance(doc, dict) else None
    if not isinstance(jobs, list):
        raise SlurmError(f"squeue {' '.join(READ)}: no 'jobs' list in the output")
    return jobs


def parse_jobs(out: str) -> dict[str, Job]:
    """Job id -> :class:`Job` for every job in ``squeue --json`` output (module docstring).
    Output that is not JSON, has no ``jobs`` list or a job without a readable ``job_id`` is one
    :class:`SlurmError` line: a read that may have missed a job is not a read (a job it does
    not list is noted from an empty comment)."""
    found: dict[str, Job] = {}
    for j in job_records(out):
        jid = slurm_number(j.get("job_id")) if isinstance(j, dict) else None
        if not isinstance(j, dict) or jid is None:
            raise SlurmError(f"squeue {' '.join(READ)}: a job without a job_id: {j!r:.80}")
        found[str(jid)] = Job(
            user=_text(j.get("user_name")) or "",
            account=_text(j.get("account")) or "",
            minutes=slurm_minutes(j.get("time_limit")),
            admin_comment=_text(j.get("admin_comment")),
            comment=_text(j.get("comment")),
        )
    return found


def read_jobs(squeue: Callable[..., str]) -> dict[str, Job]:
    """Every job Slurm lists, from one ``squeue --json --states=all`` through ``squeue`` (the
    caller's runner: ``SlurmTools.squeue`` or a stand-in); a failure is one :class:`SlurmError`
    line (a RuntimeError).

        >>> read_jobs(SlurmTools(timeout_s=10).squeue)["7"].admin_comment  # doctest: +SKIP
        'site: project X | coreburst: bursting on od-1 (...)'
    """
    return parse_jobs(squeue(*READ))


def comments(jobs: Mapping[str, Job]) -> dict[str, str | None]:
    """Job id -> AdminComment (None: unreadable), for :func:`merged_for`."""
    return {job: j.admin_comment for job, j in jobs.items()}
