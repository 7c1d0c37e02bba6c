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

Reading it back: ``scontrol -o show job`` prints ``WorkDir=<dir>`` then, when set,
``AdminComment=<value> `` and, before the next field, another space (``src/api/job_info.c``,
``line_end`` is one space with ``-o``), so the value is what follows ``WorkDir=<dir>
AdminComment=`` up to two spaces and the next ``Key=`` or the line's end. A site text holding
two spaces followed by ``Word=`` would be read short; a work directory with a space in it makes
the comment unreadable (:func:`comment_of` returns None) and coreburst then leaves it alone.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

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

_LINE = re.compile(r"\bWorkDir=\S* AdminComment=(.*?)(?:  \S+=.*| ?)$")
_WORKDIR = re.compile(r"\bWorkDir=\S*(?: |$)")


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


def comment_of(line: str) -> str | None:
    """A job's AdminComment from its ``scontrol -o show job`` line ("" when it has none);
    None when the line cannot be read for it (no ``WorkDir=`` token as Slurm prints it)."""
    m = _LINE.search(line)
    if m:
        return m.group(1)
    return "" if _WORKDIR.search(line) else None


def comments(out: str) -> dict[str, str | None]:
    """Job id -> AdminComment (None: unreadable) for every job of ``scontrol -o show job``."""
    found: dict[str, str | None] = {}
    for line in out.splitlines():
        m = re.match(r"JobId=(\S+)", line)
        if m:
            found[m.group(1)] = comment_of(line)
    return found
