"""Reading Slurm's job records (coreburst/cost/accounting.py) from sacct's layouts: a real
22.05 recording (JSON and --parsable2 of the same jobs) and the 23.11 data_parser layout made
up from SchedMD's parsers.c (tests/fixtures/slurm/sacct-fixtures.md says which is which)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from coreburst.cost.accounting import (
    AccountingError,
    JobRecord,
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
