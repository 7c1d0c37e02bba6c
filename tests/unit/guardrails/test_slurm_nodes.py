"""The nodes as ``Scontrol.nodes()`` reads them: ``scontrol --json show nodes`` where the
release has it (23.02 on), ``scontrol -o show nodes`` where it has not (22.05). Every Slurm
output here is **recorded** (tests/fixtures/slurm/README.md, "Nodes"): the sandbox lab on Slurm
22.05.8, 24.11.5 and 26.05.5 with a drained node whose Comment reads like the rest of a ``-o``
line, a DOWN node whose EC2-style Reason holds `` State=IDLE Partitions=x``, a Comment holding
``State=IDLE`` and a ``NodeAddr=`` on a powered-down CLOUD node. scontrol itself is a fake made
here (tests/helpers/slurm_fakes.py) that prints those recordings."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from guardrails.adapters.slurm import Scontrol, SlurmError, parse_nodes, parse_nodes_json
from tests.helpers.slurm_fakes import FakeSlurm

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "slurm"
POWERED_DOWN = {"IDLE", "CLOUD", "POWERED_DOWN"}
DOWN_REASON = (
    "(Code:InsufficientInstanceCapacity)We currently do not have sufficient p5.48xlarge "
    "capacity State=IDLE Partitions=x"
)
DRAIN_COMMENT = "ticket #7: back after reboot State=IDLE Reason=none"
OD2_COMMENT = "coreburst: EC2 instance-retirement State=IDLE NodeAddr=10.9.9.9 BootTime=None"
# node -> (states, Reason without its stamp, Comment, NodeAddr, BootTime): the same on every
# release (tests/helpers/record_slurm_nodes.py set them).
NODES = {
    "cb-1": (POWERED_DOWN, "", "", "cb-1", "None"),
    "core1": ({"IDLE"}, "", "", "127.0.0.1", "2026-12-05T03:15:53"),
    "core2": ({"IDLE", "DRAIN"}, "disk check", DRAIN_COMMENT, "127.0.0.1", "2026-12-05T03:15:53"),
    "od-1": ({"DOWN", "CLOUD", "POWERED_DOWN"}, DOWN_REASON, "", "od-1", "None"),
    "od-2": (POWERED_DOWN, "", OD2_COMMENT, "od-2", "None"),
    "sp-1": (POWERED_DOWN, "", "", "sp-1", "None"),
}
# When each recording set the reasons (scontrol prints it after the Reason, as [user@time]).
REASON_SET = {"22.05": "2026-12-05T03:37:07", "24.11": "2026-12-05T03:38:57"}
REASON_SET["26.05"] = "2026-12-05T03:39:02"
JSON_RELEASES = ("24.11", "26.05")


@pytest.fixture(autouse=True)
def utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The recordings ran in UTC; scontrol prints local time, and so does the JSON reader."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def recorded(release: str, ext: str) -> str:
    return (FIXTURES / f"scontrol-show-nodes-{release}-recorded.{ext}").read_text()


def assert_recorded_nodes(nodes: dict, release: str) -> None:
    assert set(nodes) == set(NODES)
    for name, (states, reason, comment, addr, boot) in NODES.items():
        n = nodes[name]
        stamped = f"{reason} [root@{REASON_SET[release]}]" if reason else ""
        got = (n.states, n.reason, n.comment, n.fields.get("NodeAddr"), n.boot_time)
        assert got == (states, stamped, comment, addr, boot), name
        assert n.fields.get("Reason", "") == stamped


@pytest.mark.parametrize("release", JSON_RELEASES)
def test_a_reason_or_comment_that_reads_like_fields_changes_nothing(
    tmp_path: Path, release: str
) -> None:
    """Where scontrol has --json, a node is what Slurm says, whatever its Reason and Comment
    hold (the text reader of before took core2's Comment ``State=IDLE`` as its State: the drain
    was lost; od-2's Comment as its NodeAddr)."""
    fake = FakeSlurm(tmp_path)
    fake.set_nodes(*recorded(release, "txt").splitlines())
    fake.set_nodes_json(recorded(release, "json"))
    nodes = Scontrol(tmp_path).nodes()
    assert nodes["core2"].states == {"IDLE", "DRAIN"}
    assert nodes["od-1"].states == {"DOWN", "CLOUD", "POWERED_DOWN"}
    assert nodes["od-2"].states == POWERED_DOWN and nodes["od-2"].powered_down
    assert nodes["od-2"].fields["NodeAddr"] == "od-2"
    assert_recorded_nodes(nodes, release)
    assert fake.calls() == [["--json", "show", "nodes"]]


@pytest.mark.parametrize("release", JSON_RELEASES)
def test_recorded_json_every_node(release: str) -> None:
    nodes = parse_nodes_json(recorded(release, "json"))
    assert_recorded_nodes(nodes, release)
    core1 = nodes["core1"]
    assert core1.fields["Partitions"] == "core" and core1.fields["OS"].startswith("Linux ")
    assert nodes["cb-1"].cloud and not nodes["core1"].cloud and not core1.busy


@pytest.mark.parametrize("release", ["22.05", *JSON_RELEASES])
def test_recorded_text_every_node(release: str) -> None:
    """22.05 is read as text: the fields scontrol fills come before Reason=, Comment= and
    Extra= (src/api/node_info.c), so their text is never taken for State or NodeAddr. The text
    of 24.11 and 26.05 (not read in production: they have --json) keeps that order."""
    assert_recorded_nodes(parse_nodes(recorded(release, "txt")), release)


def test_the_22_05_text_agrees_with_its_own_structured_dump() -> None:
    """``sinfo --json`` of the same 22.05 lab at the same moment (openapi/v0.0.38: one entry
    per node, lowercase base ``state``, ``state_flags``, plain ``reason``): the text reader
    gives each node the states, Reason and Comment Slurm itself gives."""
    text = parse_nodes(recorded("22.05", "txt"))
    dump = json.loads((FIXTURES / "sinfo-nodes-22.05-recorded.json").read_text())
    assert dump["errors"] == [] and len(dump["nodes"]) == len(text)
    for n in dump["nodes"]:
        got = text[n["name"]]
        assert got.states == {n["state"].upper(), *n["state_flags"]}, n["name"]
        assert got.reason.split(" [root@")[0] == n["reason"]
        assert got.comment == n["comment"] and got.fields["NodeAddr"] == n["address"]


def test_text_free_fields_as_slurm_orders_them() -> None:
    """Reason (then its ``[user@time]``), Comment, Extra: each runs to the next of the later
    ones, whatever ``Key=`` text it holds; the fields before them are Slurm's."""
    head = "NodeName=n1 Arch=x86_64 NodeAddr=10.0.0.1 State=IDLE+DRAIN BootTime=None"
    at = "[root@2026-12-05T03:37:07]"
    cases = {
        # a Reason holding " Comment=" before its stamp stays whole
        f"Reason=a Comment=b State=DOWN {at} Comment=c Extra=d": (
            f"a Comment=b State=DOWN {at}",
            "c",
            "d",
        ),
        f"Reason=x {at}": (f"x {at}", "", ""),
        "Comment=only State=DOWN NodeAddr=1.2.3.4": ("", "only State=DOWN NodeAddr=1.2.3.4", ""),
        # a Reason of two lines: the second after eight spaces
        f"Reason=one {at}        two Comment=c": (f"one {at}        two", "c", ""),
        "Extra=e State=DOWN": ("", "", "e State=DOWN"),
    }
    for tail, (reason, comment, extra) in cases.items():
        node = parse_nodes(f"{head} {tail}")["n1"]
        assert node.states == {"IDLE", "DRAIN"} and node.fields["NodeAddr"] == "10.0.0.1", tail
        assert node.boot_time == "None", tail
        assert (node.reason, node.comment, node.fields.get("Extra", "")) == (
            reason,
            comment,
            extra,
        ), tail


def test_22_05_is_detected_once_per_scontrol_then_read_as_text(tmp_path: Path) -> None:
    fake = FakeSlurm(tmp_path)  # no nodes.json: answers --json as 22.05 does
    fake.set_nodes(*recorded("22.05", "txt").splitlines())
    sc = Scontrol(tmp_path)
    assert_recorded_nodes(sc.nodes(), "22.05")
    assert_recorded_nodes(sc.nodes(), "22.05")
    assert fake.calls() == [
        ["--json", "show", "nodes"],
        ["-o", "show", "nodes"],
        ["-o", "show", "nodes"],
    ]
    Scontrol(tmp_path).nodes()  # another instance asks again
    assert fake.calls()[3:] == [["--json", "show", "nodes"], ["-o", "show", "nodes"]]


def script(tmp_path: Path, body: str) -> Path:
    exe = tmp_path / "scontrol"
    exe.write_text(f'#!/bin/sh\necho "$@" >> {tmp_path / "argv"}\n{body}\n')
    exe.chmod(0o755)
    return tmp_path


@pytest.mark.parametrize(
    ("body", "match"),
    [
        (
            "echo 'slurm_load_node error: Unable to contact slurm controller (connect failure)'"
            " >&2; exit 1",
            r"scontrol --json show nodes failed \(1\): slurm_load_node error: Unable to contact",
        ),
        ("echo 'not json'", "output is not JSON"),
        ('echo \'{"nodes": [{"name": "a", "state": "idle"}]}\'', "'state' is not a list"),
        ("echo '{\"meta\": {}}'", "no 'nodes' list"),
        (
            'echo \'{"nodes": [], "errors": [{"description": "boom", "error": '
            '"Unable to contact slurm controller"}]}\'',
            "Slurm reported an error: Unable to contact slurm controller",
        ),
    ],
)
def test_any_other_answer_to_json_is_an_error_not_a_reason_to_read_text(
    tmp_path: Path, body: str, match: str
) -> None:
    """Only "unrecognized option '--json'" means 22.05: a controller that is down (the real
    24.11 and 26.05 answer, recorded by hand) or output that is not the document is one line,
    and the text is not read instead."""
    with pytest.raises(SlurmError, match=match) as err:
        Scontrol(script(tmp_path, body)).nodes()
    assert "\n" not in str(err.value)
    assert (tmp_path / "argv").read_text().splitlines() == ["--json show nodes"]
