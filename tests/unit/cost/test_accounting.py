"""Reading Slurm's job records (coreburst/cost/accounting.py) from sacct's layouts: a real
22.05 recording (JSON and --parsable2 of the same jobs) and the 23.11 data_parser layout made
up from SchedMD's parsers.c (tests/fixtures/slurm/sacct-fixtures.md says which is which)."""

from __future__ import annotations

import itertools
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from coreburst.cost.accounting import (
    AccountingError,
    JobRecord,
    JobStream,
    bad_records_note,
    parse_sacct_json,
    parse_sacct_parsable,
    read_jobs,
)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "slurm"
REC_JSON = (FIXTURES / "sacct-22.05-recorded.json").read_bytes()
REC_PARSABLE = (FIXTURES / "sacct-22.05-recorded.parsable2").read_bytes()
V40 = (FIXTURES / "sacct-23.11-v0.0.40.json").read_bytes()
NOW = 1796346600  # a minute after the recorded jobs ended


def _by_id(jobs: list[JobRecord]) -> dict[str, list[JobRecord]]:
    out: dict[str, list[JobRecord]] = {}
    for j in jobs:
        out.setdefault(j.job_id, []).append(j)
    return out


def test_recorded_22_05_json() -> None:
    jobs = {j.job_id: j for j in parse_sacct_json(REC_JSON, NOW)}
    assert set(jobs) == {"1", "2", "3"}
    one, two, three = jobs["1"], jobs["2"], jobs["3"]
    assert (one.account, one.partition, one.nodes, one.gpus) == ("ml", "core", ("core1",), 8)
    assert (two.account, two.nodes, two.gpus, two.user) == ("research", ("od-1",), 4, "root")
    assert (three.start, three.end, three.state) == (1796346554, 1796346559, "COMPLETED")
    assert one.gpu_seconds(0, NOW, NOW) == 8 * 3
    assert one.cluster == "burstlab"


def test_parsable2_and_json_of_the_same_jobs_agree() -> None:
    assert parse_sacct_parsable(REC_PARSABLE, NOW) == parse_sacct_json(REC_JSON, NOW)


def test_23_11_layout_reads_as_22_05_did() -> None:
    """Jobs 1-3 re-shaped into v0.0.40 give the same records (time.start there is the
    eligible time, not the run's start; the typed gres/gpu:h100 TRES is not counted twice)."""
    v40 = _by_id(parse_sacct_json(V40, NOW))
    for rec in parse_sacct_json(REC_JSON, NOW):
        assert v40[rec.job_id] == [rec]


def test_23_11_requeued_running_and_never_ran() -> None:
    jobs = _by_id(parse_sacct_json(V40, NOW))
    first, second = jobs["4_2"]  # array task 2 of job 4, both runs
    assert (first.start, first.end, first.state) == (
        1796340000 - 600,
        1796340000,
        "NODE_FAIL REQUEUED",
    )
    assert (second.nodes, second.gpus, second.gpus_per_node) == (("core1", "core2"), 16, 8)
    assert second.gpu_seconds(0, NOW, NOW) == 16 * 1200
    (running,) = jobs["5"]
    assert running.end is None and running.start == NOW - 900
    assert running.span(NOW + 100) == (NOW - 900, NOW + 100)
    (cancelled,) = jobs["6"]
    assert cancelled.nodes == () and cancelled.gpu_seconds(0, NOW, NOW) == 0


def test_window_clips_each_run() -> None:
    (j,) = [x for x in parse_sacct_json(REC_JSON, NOW) if x.job_id == "3"]  # 1796346554..559
    assert j.gpu_seconds(1796346556, 1796346558, NOW) == 4 * 2
    assert j.gpu_seconds(1796346559, NOW, NOW) == 0
    assert j.gpu_seconds(0, 1796346554, NOW) == 0


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"{not json", "sacct --json: not JSON"),
        (b'{"jobs": 3}', "no 'jobs' list"),
        (b"[]", "not a JSON object"),
        (
            b'{"errors": [{"description": "Unable to parse time format", "error_number": 9000}]}',
            "reported an error: Unable to parse time format",
        ),
        (b'{"jobs": [{"job_id": "x"}]}', "job_id is 'x', not a number"),
        (b'{"jobs": [{"job_id": 1, "nodes": "od-[1-"}]}', "node list 'od-[1-' unreadable"),
        (b'{"jobs": [{"job_id": 1, "user": "\xff"}]}', "not UTF-8 at offset"),
        (
            b'{"jobs": [{"job_id": 1, "tres": {"allocated": [{"type": "gres", "count": "8"}]}}]}',
            "TRES count is '8', not a number",
        ),
    ],
)
def test_malformed_json_is_one_line(raw: bytes, message: str) -> None:
    with pytest.raises(AccountingError, match=None) as err:
        parse_sacct_json(raw, NOW)
    assert message in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"1|root|ml|core\n", "4 fields, expected 11"),
        (
            b"1|root|ml|core|c|core1|3|x|2026-12-04T00:00:00|gres/gpu=8|COMPLETED\n",
            "SLURM_TIME_FORMAT=%s",
        ),
        (b"1|root|ml|core|c|core1|3|1|5|gres/gpu=eight|COMPLETED\n", "AllocTRES 'gres/gpu=eight'"),
    ],
)  # fmt: skip
def test_malformed_parsable_is_one_line(raw: bytes, message: str) -> None:
    with pytest.raises(AccountingError) as err:
        parse_sacct_parsable(raw, NOW)
    assert message in str(err.value)


class FakeSacct:
    """Plays sacct: one (returncode, stdout, stderr) per call, recording argv and env."""

    def __init__(self, *answers: tuple[int, bytes, bytes]) -> None:
        self.answers = list(answers)
        self.calls: list[tuple[list[str], dict[str, str]]] = []

    def __call__(self, cmd: list[str], **kw: Any) -> subprocess.CompletedProcess[bytes]:
        self.calls.append((cmd, kw["env"]))
        rc, out, err = self.answers.pop(0)
        return subprocess.CompletedProcess(cmd, rc, out, err)


def test_read_jobs_asks_for_json_for_the_window_in_utc() -> None:
    fake = FakeSacct((0, REC_JSON, b""))
    jobs, source = read_jobs(1796342400, 1796428800, NOW, env={"SLURM_TIME_FORMAT": "%c"}, run=fake)
    assert len(jobs) == 3 and source == "sacct --json"
    cmd, env = fake.calls[0]
    assert "--starttime=2026-12-04T00:00:00" in cmd and "--endtime=2026-12-05T00:00:00" in cmd
    assert {"--allusers", "--duplicates", "--json"} <= set(cmd)
    # 22.05's --json cannot parse its own time options under a custom SLURM_TIME_FORMAT
    assert env["TZ"] == "UTC" and "SLURM_TIME_FORMAT" not in env


def test_read_jobs_falls_back_to_parsable2() -> None:
    fake = FakeSacct(
        (1, b"", b"sacct: error: unrecognized option '--json'"), (0, REC_PARSABLE, b"")
    )
    jobs, source = read_jobs(0, NOW, NOW, env={}, run=fake)
    assert source == "sacct --parsable2" and len(jobs) == 3
    cmd, env = fake.calls[1]
    assert env["SLURM_TIME_FORMAT"] == "%s"
    assert (
        "--format=JobID,User,Account,Partition,Cluster,NodeList,ElapsedRaw,Start,End,AllocTRES,State"
        in cmd
    )


def test_read_jobs_errors_are_one_line() -> None:
    down = (1, b"", b"sacct: error: Problem talking to the database: Connection refused\n")
    with pytest.raises(AccountingError, match="Connection refused") as err:
        read_jobs(0, NOW, NOW, env={}, run=FakeSacct(down, down))
    assert "\n" not in str(err.value)

    def missing(cmd: list[str], **kw: Any) -> subprocess.CompletedProcess[bytes]:
        raise FileNotFoundError("sacct")

    with pytest.raises(AccountingError, match="install slurm-client"):
        read_jobs(0, NOW, NOW, env={}, run=missing)


def test_fixture_provenance_is_stated() -> None:
    for raw in (REC_JSON, V40):
        note = json.loads(raw)["_coreburst_fixture"]
        assert ("Recorded" in note) != ("Made up" in note)


# -- records whose times cannot be ------------------------------------------------------------


def test_negative_and_inverted_times_are_left_out_with_a_note() -> None:
    """Made-up corruptions of the recorded lines: job 2's ElapsedRaw negative, job 3's End
    before its Start (sacct(1) fields; what a damaged slurmdbd row would print)."""
    lines = REC_PARSABLE.decode().splitlines()
    cols2, cols3 = lines[1].split("|"), lines[2].split("|")
    cols2[6] = "-3"
    cols3[8] = str(int(cols3[7]) - 10)
    bad: dict[str, list[str]] = {}
    jobs = parse_sacct_parsable("\n".join([lines[0], "|".join(cols2), "|".join(cols3)]), NOW, bad)
    assert [j.job_id for j in jobs] == ["1"]
    assert bad == {"a negative elapsed time (ElapsedRaw)": ["2"], "an end before its start": ["3"]}
    note = bad_records_note(bad)
    assert note is not None and note.startswith("2 sacct record(s) left out")
    assert "(job 2)" in note and "(job 3)" in note and "\n" not in note
    doc = json.loads(REC_JSON)
    doc["jobs"][1]["time"]["elapsed"] = -3
    doc["jobs"][2]["time"]["start"] = doc["jobs"][2]["time"]["end"] + 5
    bad = {}
    assert [j.job_id for j in parse_sacct_json(json.dumps(doc), NOW, bad)] == ["1"]
    assert bad == {"a negative elapsed time (ElapsedRaw)": ["2"], "an end before its start": ["3"]}
    # the data_parser layouts: time.start is the run's start there too
    v40 = json.loads(V40)
    v40["jobs"][0]["time"]["start"] = v40["jobs"][0]["time"]["end"] + 5
    bad = {}
    assert len(parse_sacct_json(json.dumps(v40), NOW, bad)) == len(parse_sacct_json(V40, NOW)) - 1
    assert bad == {"an end before its start": ["1"]}


# -- time slices ---------------------------------------------------------------------------------


class Slurmdbd:
    """Plays sacct over generated records (coreburst/sandbox/sacctgen.py: the recorded
    22.05 layout, selected per window as slurmdbd's as_mysql_jobacct_process.c does)."""

    def __init__(self, root: Path, fail_on: int | None = None) -> None:
        self.root, self.fail_on, self.windows = root, fail_on, []  # type: ignore[var-annotated]

    def __call__(self, cmd: list[str], **kw: Any) -> subprocess.CompletedProcess[bytes]:
        import io

        from coreburst.sandbox.sacctgen import answer

        self.windows.append([a for a in cmd if a.startswith(("--starttime", "--endtime"))])
        if self.fail_on is not None and len(self.windows) == self.fail_on:
            raise subprocess.TimeoutExpired(cmd, kw["timeout"])
        buf = io.BytesIO()
        rc = answer(self.root, cmd[1:], buf, now=NOW)  # running jobs: elapsed until NOW
        return subprocess.CompletedProcess(cmd, rc, buf.getvalue(), b"")


@pytest.fixture(scope="module", name="generated")
def generated_fixture(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from coreburst.sandbox.sacctgen import Generated

    return Generated.create(
        tmp_path_factory.mktemp("recs"), json.loads(REC_JSON), n=1500, days=3, until=NOW - 60
    )


def test_slices_give_the_runs_of_one_whole_window_read(generated: Any) -> None:
    meta = generated.meta
    since, until = meta["since"], meta["until"]
    whole, source = read_jobs(since, until, NOW, env={}, run=Slurmdbd(generated.root))
    assert source == "sacct --json" and len(whole) > 1000
    # runs cross slice boundaries (some last 36 h), some still run (end 0 in the records)
    assert any(j.end is None for j in whole) and any(
        j.span(NOW)[1] - j.span(NOW)[0] > 86400 for j in whole
    )
    fake = Slurmdbd(generated.root)
    stream = JobStream(
        since, until, NOW, env={}, run=fake, slice_s=until - since, max_bytes=400_000
    )
    sliced = list(stream)
    assert sorted(sliced, key=repr) == sorted(whole, key=repr)  # each run once
    assert len(fake.windows) > 10 and stream.source == "sacct --json"
    # a slice over the cap was asked again as a half: every window asked fits the cap
    assert any(a == b for a, b in itertools.pairwise(w[0] for w in fake.windows))


def test_each_slice_has_its_own_deadline(generated: Any) -> None:
    meta = generated.meta
    fake = Slurmdbd(generated.root, fail_on=3)
    stream = JobStream(
        meta["since"], meta["until"], NOW, env={}, run=fake, slice_s=3600, timeout_s=7
    )
    with pytest.raises(AccountingError, match="timed out after 7s: is slurmdbd up") as err:
        list(stream)
    assert "\n" not in str(err.value)


def test_progress_shows_on_a_terminal_only(monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    from coreburst.cost.accounting import terminal_progress

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    for stream, shown in ((Tty(), True), (io.StringIO(), False)):
        monkeypatch.setattr("sys.stderr", stream)
        terminal_progress(3600, 4 * 3600, 123456)
        terminal_progress(4 * 3600, 4 * 3600, 200000)
        text = stream.getvalue()
        assert (text == "\rreading sacct:  25% of the window, 123,456 job runs"
                "\rreading sacct: 100% of the window, 200,000 job runs\n") == shown  # fmt: skip
        assert shown or text == ""
