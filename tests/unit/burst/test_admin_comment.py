"""coreburst's notes merged into a job's AdminComment (coreburst/burst/admin_comment.py), read
from ``squeue --json --states=all`` and written back with ``scontrol update``.

Every Slurm output here is real: the same three held jobs recorded on Slurm 22.05, 24.11 and
26.05 (tests/fixtures/slurm/README.md says how; tests/helpers/record_slurm_jobs.py submitted
them): job 1 has a site's AdminComment holding two spaces and ``Partition=`` and a user's
Comment that reads like the rest of a ``scontrol -o`` line, job 2 no AdminComment, job 3 a
site's text and two coreburst notes. The length limit is the one Slurm's source gives
(slurmdbd's ``text`` column; slurmctld checks none).
"""

from __future__ import annotations

import json
import logging
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from coreburst.burst.admin_comment import (
    KINDS,
    MAX_BYTES,
    SEP,
    comments,
    kind_of,
    merge,
    merged_for,
    parse_jobs,
    read_jobs,
)
from coreburst.burst.config import BurstStack
from coreburst.burst.slurm_side import SlurmSide
from coreburst.burst.slurmconf import node_set_of
from coreburst.common.slurmcmd import SlurmError
from tests.helpers.slurm_fakes import RELEASES, SLURM_FIXTURES, recorded_squeue

ROOT = Path(__file__).resolve().parents[3]
# What tests/helpers/record_slurm_jobs.py set on the recorded jobs.
SITE_1 = "site: project=alpha  Partition=fake | ops"
USER_1 = "x y Comment=user note: keep me StdErr= StdIn=/dev/null"
USER_2 = "just a note  with two spaces"
SITE_3 = "site: ticket #42"
BURST_3 = "coreburst: bursting on od-1 (1 x p5.48xlarge, $55.04/h)"
PENDING_3 = "coreburst: pending 0:10:00 for spot (more than 0:05:00): burst added; a=b"
NOTES_3 = SEP.join([SITE_3, BURST_3, PENDING_3])
# A fallback note (the kind of job 3's "pending" note) and a burst note, as the writers word them
FALLBACK = "coreburst: pending 0:20:00 for spot (more than 0:10:00): burst added"
BURST = "coreburst: bursting on od-2 (1 x p5.48xlarge on-demand): $55.04/h"


class Recorded:
    """Slurm as a release recorded it: ``squeue --json --states=all`` answers the recording,
    kept current as each ``scontrol update jobid=N AdminComment=<value>`` sets the value (as
    slurmctld stores it: what follows the first ``=``, src/scontrol/update_job.c); every call
    is recorded. ``out``: what squeue prints instead of the recording."""

    def __init__(self, release: str, out: str | None = None) -> None:
        self.doc = recorded_squeue(release)
        self.out = out
        self.calls: list[tuple[str, ...]] = []

    def job(self, job_id: int) -> dict[str, Any]:
        (j,) = [j for j in self.doc["jobs"] if j["job_id"] == job_id]
        return j

    def squeue(self, *args: str) -> str:
        self.calls.append(("squeue", *args))
        return json.dumps(self.doc) if self.out is None else self.out

    def scontrol(self, *args: str) -> str:
        self.calls.append(("scontrol", *args))
        if args[0] == "update" and args[2].startswith("AdminComment="):
            value = args[2].partition("=")[2]
            self.job(int(args[1].removeprefix("jobid=")))["admin_comment"] = value
        return ""

    def written(self) -> dict[str, str]:
        """job id -> the AdminComment= value each update wrote."""
        return {
            c[2].removeprefix("jobid="): c[3].removeprefix("AdminComment=")
            for c in self.calls
            if c[:2] == ("scontrol", "update")
        }


def _side(stack: BurstStack, slurm: Recorded) -> SlurmSide:
    """The power programs' Slurm side (its notes: SlurmSide.note_jobs) for one run."""
    return SlurmSide(
        stack, slurm, lambda *a, **k: None, now=lambda: datetime(2026, 12, 5, tzinfo=UTC),
        nodes_of=node_set_of(stack), claims=lambda: pytest.fail("no claims here"),
        choices=lambda ns: ([], {}), release=lambda *a, **k: None,
    )  # fmt: skip


# -- the read ---------------------------------------------------------------------------------
@pytest.mark.parametrize("release", RELEASES)
def test_each_release_gives_every_comment_exactly(release: str) -> None:
    """The recorded JSON, whatever the release's layout (22.05: plain numbers, 24.11 and
    26.05: ``{"set", "infinite", "number"}``), gives each job's AdminComment and the user's
    Comment as they were set, two spaces and ``Key=`` text included."""
    jobs = read_jobs(Recorded(release).squeue)
    assert sorted(jobs) == ["1", "2", "3"]
    assert (jobs["1"].admin_comment, jobs["1"].comment) == (SITE_1, USER_1)
    assert (jobs["2"].admin_comment, jobs["2"].comment) == ("", USER_2)
    assert (jobs["3"].admin_comment, jobs["3"].comment) == (NOTES_3, "")
    assert [jobs[j].minutes for j in "123"] == [None, 90, None]  # -t 90; the others UNLIMITED
    assert {(j.user, j.account) for j in jobs.values()} == {("root", "")}  # no slurmdbd: none
    assert comments(jobs) == {"1": SITE_1, "2": "", "3": NOTES_3}


def test_the_text_recordings_show_why_the_comment_is_not_read_from_text() -> None:
    """The same job 1 in ``scontrol -o show job``: 22.05 and 24.11 put two spaces between the
    AdminComment and the user's Comment, 26.05 one (Slurm 25.11, "Remove extra space with
    --oneliner"), and the user's Comment itself holds ``Key=`` text: where the AdminComment
    ends cannot be told from the text, so coreburst reads the JSON above."""
    for release, gap in (("22.05", "  "), ("24.11", "  "), ("26.05", " ")):
        text = (SLURM_FIXTURES / f"scontrol-o-show-job-{release}-recorded.txt").read_text()
        (line,) = [x for x in text.splitlines() if x.startswith("JobId=1 ")]
        assert f" AdminComment={SITE_1}{gap}Comment={USER_1} " in line, release


def test_no_product_module_reads_a_comment_from_scontrol_text() -> None:
    """The text reader is gone: no product module captures an ``AdminComment=`` value with a
    regex, or reads every job's ``scontrol -o show job`` (a single job's read takes one-token
    fields only: TimeLimit, JobState, Restarts); every AdminComment read is admin_comment's
    JSON read."""
    offenders = []
    for top in ("coreburst", "guardrails"):
        for path in sorted((ROOT / top).rglob("*.py")):
            text = path.read_text(encoding="utf-8")
            rel = path.relative_to(ROOT)
            if re.search(r"AdminComment=\(|comment_of\(", text):
                offenders.append(f"{rel}: parses AdminComment from text")
            if re.search(r"""["']-o["'],\s*["']show["'],\s*["']job["']\s*\)""", text):
                offenders.append(f"{rel}: reads every job as scontrol text")
    assert offenders == []


def test_a_job_without_its_admin_comment_key_is_unreadable() -> None:
    doc = recorded_squeue("26.05")
    del doc["jobs"][0]["admin_comment"]
    jobs = parse_jobs(json.dumps(doc))
    assert jobs["1"].admin_comment is None and jobs["1"].comment == USER_1
    assert merged_for(comments(jobs), True, "1", "fallback", FALLBACK) is None  # not written
    assert merged_for(comments(jobs), True, "2", "fallback", FALLBACK) == FALLBACK


@pytest.mark.parametrize(
    ("out", "why"),
    [
        ("squeue: error: slurm_load_jobs error: Socket timed out", "output is not JSON"),
        ('{"jobs": [{"job_id": 1,', "output is not JSON"),  # cut short
        ('{"errors": []}', "no 'jobs' list in the output"),
        ('{"jobs": [{"admin_comment": "x"}]}', "a job without a job_id"),
        ('{"jobs": [{"job_id": {"set": false}}]}', "a job without a job_id"),
    ],
)
def test_output_that_is_not_the_json_is_one_error_line(out: str, why: str) -> None:
    with pytest.raises(SlurmError, match=re.escape(f"squeue --json --states=all: {why}")) as e:
        parse_jobs(out)
    assert "\n" not in str(e.value)


# -- the round trip through the product's note path ------------------------------------------
@pytest.mark.parametrize("release", RELEASES)
def test_each_releases_jobs_round_trip_exactly(stack: BurstStack, release: str) -> None:
    """Each release's recorded jobs, noted by the power programs' Slurm side: job 1 gets the
    site's text as it was, then the note, and nothing of the user's Comment; job 2 the note
    only; job 3 keeps the site's text and its burst note, and the new note replaces its note
    of the same kind. Read back in the next run, each value is exactly what was written, and
    the users' Comments are untouched."""
    slurm = Recorded(release)
    _side(stack, slurm).note_jobs(["1", "2", "3"], "fallback", FALLBACK)
    assert slurm.written() == {
        "1": f"{SITE_1} | {FALLBACK}",
        "2": FALLBACK,
        "3": f"{SITE_3} | {FALLBACK} | {BURST_3}",
    }
    assert not [v for v in slurm.written().values() if "keep me" in v or "two spaces" in v]
    assert slurm.calls[0] == ("squeue", "--json", "--states=all")  # one read, then the writes
    assert [c[0] for c in slurm.calls[1:]] == ["scontrol"] * 3

    slurm.calls.clear()  # the next run reads what the first wrote
    _side(stack, slurm).note_jobs(["1"], "burst", BURST)
    assert slurm.written() == {"1": f"{SITE_1} | {BURST} | {FALLBACK}"}
    assert [slurm.job(j)["comment"] for j in (1, 2, 3)] == [USER_1, USER_2, ""]


@pytest.mark.parametrize("release", RELEASES)
def test_a_job_whose_comment_key_is_missing_is_not_written(stack: BurstStack, release: str) -> None:
    slurm = Recorded(release)
    del slurm.job(1)["admin_comment"]
    _side(stack, slurm).note_jobs(["1", "2"], "fallback", FALLBACK)
    assert slurm.written() == {"2": FALLBACK}


def test_output_that_is_not_json_writes_nothing(
    stack: BurstStack, caplog: pytest.LogCaptureFixture
) -> None:
    """squeue printed something other than its JSON: one warning line, no job touched."""
    slurm = Recorded("26.05", out="<html>502 Bad Gateway</html>")
    with caplog.at_level(logging.WARNING, "coreburst.burst.power"):
        _side(stack, slurm).note_jobs(["1", "2"], "fallback", FALLBACK)
    assert [c for c in slurm.calls if c[0] == "scontrol"] == []
    why = "squeue --json --states=all: output is not JSON"
    assert f"cannot read the jobs (squeue --json): {why}" in caplog.text
    assert all("\n" not in r.getMessage() for r in caplog.records)


# -- merging ------------------------------------------------------------------------------------
def test_the_sites_text_stays_first_and_each_kind_keeps_its_newest_note() -> None:
    got = merge(SITE_1, "requeue", "coreburst: burst launch for od-1 failed (ICE); requeued")
    assert got == f"{SITE_1}{SEP}coreburst: burst launch for od-1 failed (ICE); requeued"
    got = merge(got or "", "burst", "coreburst: bursting on od-2 (1 x p5.48xlarge): $55.04/h")
    got = merge(got or "", "requeue", "coreburst: burst node od-2 failed its health check (x)")
    assert got is not None
    assert got.split(SEP) == [
        "site: project=alpha  Partition=fake",
        "ops",  # the site's own " | " is kept as it was
        "coreburst: burst node od-2 failed its health check (x)",
        "coreburst: bursting on od-2 (1 x p5.48xlarge): $55.04/h",
    ]
    assert got.startswith(SITE_1 + SEP)


def test_the_recorded_comment_takes_a_new_note_of_one_kind_and_keeps_the_other() -> None:
    """Job 3 as recorded, and the 22.05 recording of coreburst's notes written with
    ``scontrol update`` (tests/fixtures/slurm/scontrol-show-job-22.05-updated-recorded.txt):
    the value, ``|``, ``$``, ``:``, ``;`` and a second ``=`` included, is stored as given."""
    updated = (SLURM_FIXTURES / "scontrol-show-job-22.05-updated-recorded.txt").read_text()
    assert f" | {PENDING_3}  Comment=" in updated
    got = merge(NOTES_3, "burst", "coreburst: held by the burst spend gate, projected $9")
    assert (
        got == f"{SITE_3}{SEP}coreburst: held by the burst spend gate, projected $9{SEP}{PENDING_3}"
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
