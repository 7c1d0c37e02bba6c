"""coreburst's notes merged into a job's AdminComment (coreburst/burst/admin_comment.py).

The ``scontrol -o show job`` lines are real: Slurm 22.05.8 (Debian's slurm-wlm), recorded in
tests/fixtures/slurm/ (README.md there says how); the length limit is the one Slurm's source
gives (slurmdbd's ``text`` column; slurmctld checks none).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from coreburst.burst.admin_comment import (
    KINDS,
    MAX_BYTES,
    SEP,
    comment_of,
    comments,
    kind_of,
    merge,
)

FIX = Path(__file__).parents[2] / "fixtures" / "slurm"
RECORDED = (FIX / "scontrol-show-job-22.05-recorded.txt").read_text()
UPDATED = (FIX / "scontrol-show-job-22.05-updated-recorded.txt").read_text()
SITE = "site: project=alpha; ticket #42 | ops"  # what the recording set by hand


def test_reads_the_comment_scontrol_prints_and_none_where_there_is_none() -> None:
    # job 1 also has a user's Comment that reads like "AdminComment=...  Power=x": not it
    assert comments(RECORDED) == {"1": SITE, "2": ""}
    (after,) = comments(UPDATED).values()
    assert after is not None and after.startswith(SITE + SEP + "coreburst: bursting on od-1 ")
    assert after.endswith(
        "coreburst: pending 0:10:00 for spot (more than 0:05:00): burst added; a=b"
    )


def test_a_users_comment_is_never_read_as_the_admin_comment() -> None:
    """Job 2 of the recording (no AdminComment) given job 1's user Comment, which holds the
    text ``AdminComment=not-the-admin's``: the job has no AdminComment."""
    job1 = next(x for x in RECORDED.splitlines() if x.startswith("JobId=1 "))
    user = job1[job1.index("Comment=user") : job1.index("StdErr=")]
    job2 = next(x for x in RECORDED.splitlines() if x.startswith("JobId=2 "))
    line = job2.replace("StdErr=", user + "StdErr=", 1)
    assert "AdminComment=not-the-admin's" in line and comment_of(line) == ""


def test_a_line_without_workdir_is_unreadable() -> None:
    assert comment_of("JobId=7 JobName=wrap TimeLimit=02:00:00") is None


def test_the_sites_text_stays_first_and_each_kind_keeps_its_newest_note() -> None:
    got = merge(SITE, "requeue", "coreburst: burst launch for od-1 failed (ICE); requeued")
    assert got == f"{SITE}{SEP}coreburst: burst launch for od-1 failed (ICE); requeued"
    got = merge(got or "", "burst", "coreburst: bursting on od-2 (1 x p5.48xlarge): $55.04/h")
    got = merge(got or "", "requeue", "coreburst: burst node od-2 failed its health check (x)")
    assert got is not None
    assert got.split(SEP) == [
        "site: project=alpha; ticket #42",
        "ops",  # the site's own " | " is kept as it was
        "coreburst: burst node od-2 failed its health check (x)",
        "coreburst: bursting on od-2 (1 x p5.48xlarge): $55.04/h",
    ]
    assert got.startswith(SITE + SEP)


def test_the_recorded_comment_takes_a_new_note_of_one_kind_and_keeps_the_other() -> None:
    (after,) = comments(UPDATED).values()
    got = merge(after or "", "burst", "coreburst: held by the burst spend gate, projected $9")
    assert got == (
        f"{SITE}{SEP}coreburst: held by the burst spend gate, projected $9{SEP}"
        "coreburst: pending 0:10:00 for spot (more than 0:05:00): burst added; a=b"
    )


def test_notes_are_one_line_and_kinds_are_told_from_their_text() -> None:
    got = merge("", "fallback", "coreburst: pending 1:00:00\nfor spot")
    assert got == "coreburst: pending 1:00:00 for spot"
    assert kind_of("coreburst: something new") == "other"
    assert kind_of("project X") is None
    for kind, starts in KINDS.items():
        for start in starts:
            assert kind_of(f"coreburst: {start}x") == kind
    with pytest.raises(AssertionError):  # a writer's text must be of the kind it says
        merge("", "burst", "coreburst: pending 1:00:00 for spot")


def test_within_slurmdbds_text_column_the_oldest_of_ours_goes_first() -> None:
    site = "s" * (MAX_BYTES - 1000)
    got = merge(site, "fallback", "coreburst: pending " + "p" * 500)
    got = merge(got or "", "requeue", "coreburst: requeued " + "r" * 500)
    assert got is not None and len(got.encode()) <= MAX_BYTES
    assert got.startswith(site) and "coreburst: requeued" in got and "pending" not in got
    assert merge("s" * MAX_BYTES, "burst", "coreburst: bursting on od-1") is None
