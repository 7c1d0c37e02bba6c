"""The core's capacity (coreburst/cost/capacity.py): GPUs per node from scontrol, out-of-service
spans from slurmdbd's node events.

Fixtures beside this file, **recorded** (not made up) on the lab of coreburst/sandbox/slurmlab.py
with coreburst/sandbox/slurmdb.py (Debian 12's Slurm 22.05.8, slurmdbd on MariaDB 10.11):

* ``scontrol-show-node-22.05-recorded.txt``: ``scontrol -o show node`` (22.05's scontrol has no
  ``--json``: "unrecognized option '--json'"). Unchanged.
* ``sacctmgr-events-22.05-recorded.txt``: ``sacctmgr -P -n list event start=2026-12-04T00:00:00
  end=2026-12-05T00:00:00 format=Cluster,NodeName,TimeStart,TimeEnd,State,Event,Reason`` with
  ``TZ=UTC SLURM_TIME_FORMAT=%s``, after ``scontrol update nodename=core2 state=drain
  reason="fan swap"`` (resumed 2 s later) and ``nodename=core1 state=down reason=psu`` (resumed
  1 s later). Unchanged.

The ``scontrol --json show node`` document below is **made up** in the shape Slurm 23.02 on
prints (``nodes[]`` with ``name``, ``gres``, ``tres``; SchedMD/slurm data_parser ``PARSER_ARRAY
(NODE)``), with only those fields.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from coreburst.cost.accounting import AccountingError
from coreburst.cost.capacity import (
    CapacityUnavailableError,
    gpus_from_gres,
    parse_events,
    parse_scontrol_json,
    parse_scontrol_nodes,
    read_core_capacity,
)

HERE = Path(__file__).resolve().parent
NODES = (HERE / "scontrol-show-node-22.05-recorded.txt").read_bytes()
EVENTS = (HERE / "sacctmgr-events-22.05-recorded.txt").read_bytes()
UNTIL = 1796428800  # 2026-12-05T00:00:00Z, the recording's end= option
BURST = {"od-1", "od-2", "sp-1", "cb-1"}


def test_recorded_scontrol_nodes() -> None:
    gpus, why = parse_scontrol_nodes(NODES)
    assert gpus == {"cb-1": 8, "core1": 8, "core2": 8, "od-1": 8, "od-2": 8, "sp-1": 8}
    assert why == {}


@pytest.mark.parametrize(
    ("gres", "gpus"),
    [
        ("gpu:h100:8", 8),
        ("gpu:h100:8(S:0-1)", 8),
        ("gpu:8", 8),
        ("gpu:a100:2,gpu:h100:4(S:0,1)", 6),
        ("gpu", 1),
        ("(null)", 0),
        ("nic:2,gpu:h100:4", 4),
        ("gpu:h100:eight", None),
        ("gpu:h100:8:extra", None),
    ],
)
def test_gres_counts(gres: str, gpus: int | None) -> None:
    assert gpus_from_gres(gres) == gpus


def test_tres_first_then_gres_and_unreadable_is_unknown() -> None:
    lines = (
        "NodeName=a Gres=gpu:h100:4 CfgTRES=cpu=2,gres/gpu=8\n"  # Slurm's TRES wins
        "NodeName=b Gres=gpu:h100:4 CfgTRES=cpu=2\n"
        "NodeName=c Gres=gpu:h100:lots CfgTRES=cpu=2\n"
        "NodeName=d Gres=(null) CfgTRES=cpu=2\n"
        "NodeName=e Reason=ran out of Gres=gpu:x:1 CfgTRES=cpu=2,gres/gpu:h100=2,gres/gpu:a100=1\n"
    )
    gpus, why = parse_scontrol_nodes(lines)
    assert gpus == {"a": 8, "b": 4, "c": None, "d": 0, "e": 3}
    assert why == {"c": "node c: GRES 'gpu:h100:lots' unreadable"}


def test_made_up_23_02_json() -> None:
    doc = {
        "nodes": [
            {"name": "core1", "gres": "gpu:h100:8(S:0-1)", "tres": "cpu=2,gres/gpu=8"},
            {"name": "core3", "gres": "gpu:h100:x", "tres": "cpu=2"},
        ]
    }
    gpus, why = parse_scontrol_json(json.dumps(doc))
    assert gpus == {"core1": 8, "core3": None} and "core3" in why


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"garbage\n", "line 1: not 'NodeName=... Gres=...'"),
        (b"", "printed no nodes"),
        (b"NodeName=core1 Gres=gpu:8\nNode \xff\n", "not UTF-8 at offset"),
    ],
)
def test_malformed_scontrol_is_one_line(raw: bytes, message: str) -> None:
    with pytest.raises(AccountingError) as err:
        parse_scontrol_nodes(raw)
    assert message in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("raw", "message"),
    [(b"{", "not JSON"), (b"[]", "no 'nodes' list"), (b'{"nodes": [{"gres": "gpu:8"}]}', "name")],
)
def test_malformed_scontrol_json_is_one_line(raw: bytes, message: str) -> None:
    with pytest.raises(AccountingError, match=message):
        parse_scontrol_json(raw)


def test_recorded_events() -> None:
    ev = parse_events(EVENTS, UNTIL)
    assert ev.recorded_from == 1796367706  # "Cluster Registered TRES"
    assert ev.out_of_service["core1"] == [(1796367802, 1796367803)]  # DOWN psu
    assert ev.out_of_service["core2"] == [(1796367800, 1796367802)]  # DRAIN fan swap
    assert ev.out_of_service["od-1"] == [(1796367706, UNTIL)]  # still powered down: to the end


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"burstlab|core1|1|2\n", "line 1: 4 fields, expected 7"),
        (b"c|core1|2026-12-04T07:03:22|Unknown|DOWN|Node|psu\n", "SLURM_TIME_FORMAT=%s"),
        (b"c|core1|1|2|DOWN|Rack|psu\n", "neither a Cluster nor a Node event"),
        (b"c|core1|1|2|DOWN|Node|\xfe\n", "not UTF-8"),
    ],
)
def test_malformed_events_are_one_line(raw: bytes, message: str) -> None:
    with pytest.raises(AccountingError) as err:
        parse_events(raw, UNTIL)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_reason_with_the_delimiter() -> None:
    ev = parse_events(b"c|core1|10|20|DRAIN|Node|bad | flaky IB\n", UNTIL)
    assert ev.out_of_service == {"core1": [(10, 20)]}


class FakeSlurm:
    """Plays scontrol and sacctmgr: answers by the command's first words; records argv, env."""

    def __init__(self, answers: dict[str, tuple[int, bytes, bytes]]) -> None:
        self.answers = answers
        self.calls: list[tuple[list[str], dict[str, str]]] = []

    def __call__(self, cmd: list[str], **kw: Any) -> subprocess.CompletedProcess[bytes]:
        self.calls.append((cmd, kw["env"]))
        key = " ".join(cmd[:2])
        if key not in self.answers:
            raise FileNotFoundError(cmd[0])
        rc, out, err = self.answers[key]
        return subprocess.CompletedProcess(cmd, rc, out, err)


REFUSED = (1, b"", b"scontrol: unrecognized option '--json'\nTry \"scontrol --help\"\n")


def test_read_core_capacity_from_22_05() -> None:
    fake = FakeSlurm(
        {
            "scontrol --json": REFUSED,
            "scontrol -o": (0, NODES, b""),
            "sacctmgr --parsable2": (0, EVENTS, b""),
        }
    )
    cap = read_core_capacity(lambda n: n not in BURST, 1796342400, UNTIL, env={}, run=fake)
    assert cap.gpus == {"core1": 8, "core2": 8}  # burst nodes are not the core
    assert cap.out_of_service == {
        "core1": [(1796367802, 1796367803)],
        "core2": [(1796367800, 1796367802)],
    }
    assert cap.recorded_from == 1796367706
    assert cap.source == "scontrol -o show node, sacctmgr list event"
    cmd, env = fake.calls[-1]
    assert cmd[:5] == ["sacctmgr", "--parsable2", "--noheader", "list", "event"]
    assert "start=2026-12-04T00:00:00" in cmd and "end=2026-12-05T00:00:00" in cmd
    assert "format=Cluster,NodeName,TimeStart,TimeEnd,State,Event,Reason" in cmd
    assert env == {"TZ": "UTC", "SLURM_TIME_FORMAT": "%s"}


def test_slurm_that_cannot_answer_is_unavailable_not_idle() -> None:
    down = (
        1,
        b"",
        b"slurm_load_node error: Unable to contact slurm controller (connect failure)\n",
    )
    fake = FakeSlurm({"scontrol --json": down, "scontrol -o": down})
    with pytest.raises(CapacityUnavailableError, match="Unable to contact slurm controller"):
        read_core_capacity(lambda n: True, 0, UNTIL, env={}, run=fake)
    with pytest.raises(CapacityUnavailableError, match="scontrol not found"):
        read_core_capacity(lambda n: True, 0, UNTIL, env={}, run=FakeSlurm({}))
