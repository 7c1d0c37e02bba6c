"""``coreburst cost report`` end to end on the recorded 22.05 lab (its saved ``sacct --json``
and burst audit log, tests/fixtures/slurm/sacct-fixtures.md; ``scontrol -o show node`` as
recorded there, test_capacity.py): table, CSV, JSON and PNG agree; bad input is one line and
exit 2.

``scontrol`` and ``sacctmgr`` are stand-ins on PATH that print those files. The node events
(``EVENTS`` in tests/helpers/cost_report.py) are **made up** in the recorded layout
(sacctmgr-events-22.05-recorded.txt) at the recorded jobs' times: the cluster's records start
at 01:06:40, core2 drained a minute.
"""

from __future__ import annotations

import csv
import io
import json
import re
from datetime import UTC, datetime
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import pytest
from typer.testing import CliRunner

from coreburst.common.catalog import load_catalog
from coreburst.cost.report import app
from coreburst.tco.cli import build_scenario
from coreburst.tco.model import scenario_gpu_hour_price
from tests.helpers.cost_report import NODES, SACCT, WINDOW, slurm_bin_fixture, stack_dir_fixture

__all__ = ["slurm_bin_fixture", "stack_dir_fixture"]  # the CLI's stack and Slurm stand-ins

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
AUDIT = HERE / "burst-audit-recorded.jsonl"
# core1: 8 GPUs x 3,200 s in records less job 1's 24 GPU-s; core2: 8 x (3,200 - 60 s drained)
IDLE_CORE_GPU_S = (8 * 3200 - 24) + 8 * 3140


SCENARIO = REPO / "coreburst" / "tco" / "examples" / "team8_85pct.yaml"


def _run(stack_dir: Path, *args: str) -> tuple[int, str, str]:
    res = CliRunner().invoke(
        app,
        ["report", *WINDOW, "--stack", "lab", "--stack-dir", str(stack_dir),
         "--sacct-json", str(SACCT), "--audit-log", str(AUDIT), *args],
    )  # fmt: skip
    return res.exit_code, res.stdout, res.stderr


def test_json_csv_and_table_agree(stack_dir: Path, tmp_path: Path) -> None:
    code, out, err = _run(stack_dir, "--gpu-hour-usd", "2.35", "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    rows = {r["group"]: r for r in doc["rows"]}
    assert rows["ml"]["core_usd"] == 0.02 and rows["ml"]["jobs"] == 2
    assert doc["idle"]["burst_gpu_h"] == round(288 / 3600, 3)
    assert doc["total"]["burst_usd"] == 0.61  # 40 s of p5.48xlarge at $55.04/h
    idle_core = doc["idle_core"]
    assert idle_core["core_gpu_h"] == round(IDLE_CORE_GPU_S / 3600, 3)
    exact = Decimal(IDLE_CORE_GPU_S) * Decimal("2.35") / 3600  # $33.0932
    assert (
        Decimal(str(idle_core["core_usd"])) == exact.quantize(Decimal("0.01")) == Decimal("33.09")
    )
    assert set(idle_core["nodes"]) == {"core1", "core2"} and idle_core["unknown_nodes"] == {}
    assert any("only from 2026-12-04 01:06 UTC" in n for n in doc["notes"])
    for col in ("core_usd", "burst_usd", "total_usd"):
        assert sum(round(r[col] * 100) for r in [*doc["rows"], idle_core, doc["idle"]]) == round(
            doc["total"][col] * 100
        )
    code, csv_out, _ = _run(stack_dir, "--gpu-hour-usd", "2.35", "--format", "csv")
    lines = [line.split(",") for line in csv_out.splitlines()]
    assert lines[0][0] == "team" and lines[-1][0] == "total"
    total_col = lines[0].index("total_usd")
    assert Fraction(lines[-1][total_col]) == Fraction(str(doc["total"]["total_usd"]))
    # without --prometheus, GPU active is n/a in every job row, never 0
    active_col = lines[0].index("gpu_active")
    assert {line[active_col] for line in lines[1:3]} == {"n/a"}
    plot = tmp_path / "cost.png"
    code, table, _ = _run(stack_dir, "--gpu-hour-usd", "2.35", "--plot", str(plot))
    assert code == 0
    assert "(idle burst instances)" in table and "$0.61" in table and f"plot: {plot}" in table
    idle_line = next(line for line in table.splitlines() if "(idle core GPUs)" in line)
    assert "2 nodes" in idle_line and "14.082" in idle_line and "$33.09" in idle_line
    assert lines[-3][0] == "(idle core GPUs)" and lines[-3][3] == "33.09"
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_owned_rate_from_the_tco_scenario(stack_dir: Path) -> None:
    import yaml

    code, out, err = _run(stack_dir, "--scenario", str(SCENARIO), "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    model = scenario_gpu_hour_price(build_scenario(yaml.safe_load(SCENARIO.read_text()), {}))
    assert Decimal(doc["owned_usd_per_gpu_hour"]) == Decimal(repr(model))
    assert doc["owned_price_source"] == f"TCO scenario {SCENARIO}"


# What the owned rate of team8_85pct rests on: the TCO defaults (all unverified estimates) and
# the catalog's p5 power draw, each cited as `source as_of unverified`.
OWNED_CITES = (
    "reseller-quotes 2026-11 unverified; estimate 2026-11 unverified; nvidia-dgx 2026-11 "
    "unverified; uptime-survey 2026-11 unverified; eia 2026-11 unverified"
)


def test_every_dollar_says_what_it_was_priced_from(stack_dir: Path) -> None:
    """Issue 32 item 5: the footer names each price's source key, date and `unverified`; the
    CSV and JSON carry the same per row; each key cited resolves (docs/sources.md)."""
    code, table, err = _run(stack_dir, "--scenario", str(SCENARIO))
    assert code == 0, err
    lines = table.splitlines()
    core = next(line for line in lines if line.startswith("core: "))
    assert core.startswith("core: $2.5242/GPU-h (unverified) from TCO scenario ")
    assert core.endswith(f"priced from {OWNED_CITES}")
    figures = next(line for line in lines if line.startswith("  core figures: "))
    assert "hardware_usd_per_node=350000 (reseller-quotes, 2026-11, unverified)" in figures
    assert "power_kw[p5.48xlarge]=10.2 (nvidia-dgx, 2026-11, unverified)" in figures
    burst = next(line for line in lines if line.startswith("burst: "))
    assert "od p5.48xlarge on-demand $55.040/h (ref 2025-06)" in burst
    assert "sp p5.48xlarge spot $24.768/h (ref 2025-06; estimate 2026-11 unverified)" in burst
    assert "cb p5.48xlarge capacity-block $39.330/h (ref 2025-06 unverified)" in burst
    legend = next(line for line in lines if line.startswith("sources: "))
    assert "ref = docs/sources.md#ref" in legend
    assert "eia = https://www.eia.gov/electricity/monthly/ (read 2026-11)" in legend
    # the rows: core dollars rest on unverified figures, the on-demand burst ones do not
    ml = next(line for line in lines if line.startswith("│ ml "))
    assert ml.rstrip("│ ").endswith("core")
    idle_burst = next(line for line in lines if "(idle burst instances)" in line)
    assert idle_burst.split("│")[-2].strip() == ""  # $0.00 core, on-demand burst: verified

    code, out, _ = _run(stack_dir, "--scenario", str(SCENARIO), "--format", "json")
    doc = json.loads(out)
    assert doc["owned_price_cites"] == OWNED_CITES and doc["owned_price_unverified"] is True
    assert {f["name"] for f in doc["owned_price_figures"]} >= {"hardware_usd_per_node", "pue"}
    assert all(f["as_of"] and f["unverified"] for f in doc["owned_price_figures"])
    pools = {p["cluster"]: p for p in doc["burst_prices"]}
    assert pools["od"]["price_source"] == "ref 2025-06" and not pools["od"]["unverified"]
    assert pools["sp"]["unverified"] and pools["cb"]["unverified"]
    assert doc["price_sources"]["ref"]["file"] == "docs/sources.md#ref"
    assert (REPO / "docs" / "sources.md").is_file()
    rows = {r["group"]: r for r in doc["rows"]}
    assert rows["ml"]["core_price_source"] == OWNED_CITES
    assert rows["ml"]["burst_price_source"] == "ref 2025-06"
    assert rows["ml"]["unverified"] == ["core_usd", "total_usd"]
    assert doc["idle"]["unverified"] == [] and doc["idle"]["burst_price_source"] == "ref 2025-06"

    code, csv_out, _ = _run(stack_dir, "--scenario", str(SCENARIO), "--format", "csv")
    by_group = {r["team"]: r for r in csv.DictReader(io.StringIO(csv_out))}
    assert by_group["ml"]["core_price_source"] == OWNED_CITES
    assert by_group["ml"]["burst_price_source"] == "ref 2025-06"
    assert by_group["ml"]["unverified"] == "core_usd total_usd"
    assert by_group["total"]["unverified"] == "core_usd total_usd"


def test_a_rate_the_user_gives_is_theirs_not_unverified(stack_dir: Path) -> None:
    code, table, _ = _run(stack_dir, "--gpu-hour-usd", "2.35")
    assert code == 0
    assert "core: $2.3500/GPU-h from --gpu-hour-usd (your figure; no catalog source)" in table
    code, out, _ = _run(stack_dir, "--gpu-hour-usd", "2.35", "--format", "json")
    doc = json.loads(out)
    assert doc["owned_price_figures"] == [] and doc["owned_price_unverified"] is False
    assert doc["total"]["core_price_source"] == "--gpu-hour-usd"
    assert doc["total"]["unverified"] == []
    assert "--gpu-hour-usd" not in doc["price_sources"]


def test_without_an_owned_price_core_is_unpriced(stack_dir: Path) -> None:
    code, out, _ = _run(stack_dir, "--format", "json")
    doc = json.loads(out)
    assert code == 0 and doc["total"]["core_usd"] is None and doc["total"]["total_usd"] is None
    code, table, _ = _run(stack_dir)
    assert "unpriced" in table and "$0.00 " not in table.split("total")[-1].split("\n")[0]
    code, csv_out, _ = _run(stack_dir, "--format", "csv")
    total = list(csv.DictReader(io.StringIO(csv_out)))[-1]
    assert total["team"] == "total"
    assert total["total_usd"] == "unpriced" and total["core_usd"] == "unpriced"


def test_teams_file(stack_dir: Path, tmp_path: Path) -> None:
    teams = tmp_path / "teams.yaml"
    teams.write_text("ml: vision\nresearch: vision\n")
    _, out, _ = _run(stack_dir, "--teams", str(teams), "--format", "json")
    assert [r["group"] for r in json.loads(out)["rows"]] == ["vision"]


def test_unreadable_gpu_count_is_unknown_not_idle(
    stack_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # core1's GRES unreadable and its TRES without gres/gpu: no count to trust
    lines = [
        line.replace("Gres=gpu:h100:8", "Gres=gpu:h100:eight").replace(",gres/gpu=8", "")
        if line.startswith("NodeName=core1 ")
        else line
        for line in NODES.read_text().splitlines()
    ]
    (tmp_path / "nodes.txt").write_text("\n".join(lines) + "\n")
    monkeypatch.setenv("FAKE_NODES", str(tmp_path / "nodes.txt"))
    code, out, err = _run(stack_dir, "--gpu-hour-usd", "2.35", "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert set(doc["idle_core"]["nodes"]) == {"core2"}
    assert doc["idle_core"]["core_gpu_h"] == round(8 * 3140 / 3600, 3)
    assert "core1" in doc["idle_core"]["unknown_nodes"]
    assert any("GRES 'gpu:h100:eight' unreadable" in n for n in doc["notes"])


def test_slurm_unreachable_idle_core_is_unknown(
    stack_dir: Path, slurm_bin: Path, tmp_path: Path
) -> None:
    (slurm_bin / "scontrol").write_text(
        "#!/bin/sh\necho 'slurm_load_node error: Unable to contact slurm controller' >&2\nexit 1\n"
    )
    code, out, err = _run(stack_dir, "--gpu-hour-usd", "2.35", "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["idle_core"]["unknown"] is True and doc["idle_core"]["core_usd"] is None
    assert any("Unable to contact slurm controller" in n for n in doc["notes"])
    # the known rows still add up to the total
    assert doc["total"]["core_usd"] == sum(r["core_usd"] for r in doc["rows"])
    code, table, _ = _run(stack_dir, "--gpu-hour-usd", "2.35")
    idle_line = next(line for line in table.splitlines() if "(idle core GPUs)" in line)
    assert "unknown" in idle_line and "$0.00" not in idle_line
    _, csv_out, _ = _run(stack_dir, "--gpu-hour-usd", "2.35", "--format", "csv")
    assert "(idle core GPUs),0,unknown,unknown,unknown,unknown,0.0,unknown" in csv_out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--since", "soon"], "--since 'soon': give a duration"),
        (["--since", "2026-12-05", "--until", "2026-12-04"], "is not before --until"),
        (["--gpu-hour-usd", "abc"], "--gpu-hour-usd 'abc': give a number"),
        (["--gpu-hour-usd", "-1"], "from 0 to 1,000,000"),
        (["--plot", "cost.svg"], "ending in .png"),
        (["--stack", "nope"], "no stack 'nope'"),
        (["--teams", "__TMP__/teams.yaml"], "mapping of Slurm account to team"),
        (["--sacct-json", "__TMP__/bad.json"], "not UTF-8"),
        (["--audit-log", "__TMP__/audit.jsonl"], "line 1: not an audit record"),
        (["--scenario", "__TMP__/teams.yaml"], "--scenario"),
        (["FAKE_NODES=__TMP__/audit.jsonl"], "scontrol -o show node line 1: not 'NodeName="),
        (["FAKE_NODES=__TMP__/bad.json"], "scontrol show node: bytes that are not UTF-8"),
        (["FAKE_EVENTS=__TMP__/audit.jsonl"], "sacctmgr list event line 1: 1 fields"),
    ],
)
def test_bad_input_is_one_line_exit_2(
    stack_dir: Path, tmp_path: Path, args: list[str], message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "teams.yaml").write_text("- not a mapping\n")
    (tmp_path / "bad.json").write_bytes(b'{"jobs": [{"user": "\xff"}]}')
    (tmp_path / "audit.jsonl").write_text("{torn\n")
    args = [a.replace("__TMP__", str(tmp_path)) for a in args]
    for a in [a for a in args if a.startswith("FAKE_")]:  # what scontrol/sacctmgr print
        monkeypatch.setenv(*a.split("=", 1))
        args.remove(a)
    code, out, err = _run(stack_dir, *args)
    assert code == 2, (out, err)
    assert message in err and err.count("\n") == 1 and "Traceback" not in err
    assert out == ""


def test_one_total_whatever_by(stack_dir: Path) -> None:
    """Core cents are shared out like burst cents: every grouping reads the same totals."""
    seen = set()
    for by in ("team", "account", "user", "job", "partition"):
        code, out, err = _run(stack_dir, "--gpu-hour-usd", "2.35", "--by", by, "--format", "json")
        assert code == 0, err
        doc = json.loads(out)
        t = doc["total"]
        seen.add((t["core_usd"], t["burst_usd"], t["total_usd"]))
        for col in ("core_usd", "burst_usd", "total_usd"):
            rows = [*doc["rows"], doc["idle_core"], doc["idle"]]
            assert sum(round(r[col] * 100) for r in rows) == round(t[col] * 100), (by, col)
    assert len(seen) == 1, seen


def test_ec2_times_bound_the_instance_and_name_its_job(stack_dir: Path, tmp_path: Path) -> None:
    """The instance comes from moto (launched with the resume program's tags, then
    terminated) and is printed as ``aws ec2 describe-instances`` prints it (botocore's
    output, datetimes in ISO 8601). Its LaunchTime and the time in its StateTransitionReason
    are moto's clock; both are moved back by one offset to the recorded lab's hour, so that
    EC2 says od-1 lived 1796346555..557: 2 s of the 3 s and 5 s Slurm recorded for jobs 2, 3."""
    import boto3
    from moto import mock_aws

    from coreburst.sandbox.emulator import AMI

    with mock_aws():
        ec2 = boto3.client("ec2", region_name="us-east-1")
        tags = [
            {"Key": "coreburst-slurm-node", "Value": "od-1"},
            {"Key": "coreburst-job", "Value": "2"},
        ]
        iid = ec2.run_instances(
            ImageId=AMI, MinCount=1, MaxCount=1, InstanceType="p5.48xlarge",
            TagSpecifications=[{"ResourceType": "instance", "Tags": tags}],
        )["Instances"][0]["InstanceId"]  # fmt: skip
        ec2.terminate_instances(InstanceIds=[iid])
        resp = ec2.describe_instances(InstanceIds=[iid])
    resp.pop("ResponseMetadata")
    inst = resp["Reservations"][0]["Instances"][0]
    assert inst["State"]["Name"] == "terminated"
    launched = inst["LaunchTime"]
    offset = int(launched.timestamp()) - 1796346555
    inst["LaunchTime"] = datetime.fromtimestamp(1796346555, UTC)
    m = re.search(r"\((.+) (?:UTC|GMT)\)", inst["StateTransitionReason"])
    assert m is not None  # moto writes the time as EC2 does (its own zone name)
    ended = int(datetime.fromisoformat(m.group(1)).replace(tzinfo=UTC).timestamp()) - offset
    inst["StateTransitionReason"] = inst["StateTransitionReason"].replace(
        m.group(1),
        datetime.fromtimestamp(max(ended, 1796346557), UTC).strftime("%Y-%m-%d %H:%M:%S"),
    )
    path = tmp_path / "instances.json"
    path.write_text(json.dumps(resp, default=lambda d: d.isoformat()))
    code, out, err = _run(stack_dir, "--gpu-hour-usd", "2.35", "--ec2-instances", str(path),
                          "--format", "json")  # fmt: skip
    assert code == 0, err
    doc = json.loads(out)
    od1 = doc["burst_instances"]["od-1"]
    assert od1["instances"][0]["instance_id"] == iid
    assert od1["instances"][0]["launched_for_job"] == "2"
    assert od1["jobs"] == ["2", "3"]  # every job that ran on it
    assert od1["lifetime"] == [["2026-12-04T01:09:15Z", "2026-12-04T01:09:17Z"]]
    assert od1["clipped_s"] == {"2": 1, "3": 3}  # jobs 2 (554..557) and 3 (554..559)
    price = load_catalog().on_demand_price("p5.48xlarge", "us-east-1")
    billed = Fraction(2) * Fraction(repr(price)) / 3600
    assert round(doc["total"]["burst_usd"] * 100) == round(billed * 100)  # never more than EC2
    assert any("outside its instance's lifetime" in n and "EC2" in n for n in doc["notes"])


def test_teams_mapping_an_account_twice_is_refused(stack_dir: Path, tmp_path: Path) -> None:
    teams = tmp_path / "teams.yaml"
    teams.write_text("ml: vision\nresearch: nlp\nml: nlp\n")
    code, out, err = _run(stack_dir, "--teams", str(teams))
    assert code == 2 and out == ""
    assert (
        err
        == f"error: --teams {teams} line 3: account 'ml' is mapped twice; keep one team for it\n"
    )


def test_slices_read_the_same_report_as_one_whole_window(
    stack_dir: Path, slurm_bin: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Generated records in the recorded 22.05 layout (coreburst/sandbox/sacctgen.py) over a
    day: the report from one whole-window ``sacct --json`` (saved, --sacct-json: the read
    before time slices) and from a sacct stand-in on PATH answering each slice as slurmdbd
    selects are the same text, but for the line naming where the jobs came from."""
    import sys

    from coreburst.cost import accounting
    from coreburst.sandbox.sacctgen import Generated, answer

    # Three days of records to 2026-12-04T02:00, the report over the first: the runs still
    # going at the end (which started within its last 36 h) are after the report's window,
    # so its clock (later than the records') moves nothing in it.
    until = 1796349600
    gen = Generated.create(tmp_path / "recs", json.loads(SACCT.read_text()), n=300, days=3,
                           until=until)  # fmt: skip
    monkeypatch.setenv("SACCTGEN_NOW", str(until))
    whole = tmp_path / "whole.json"
    with whole.open("wb") as f:
        answer(gen.root, ["--json", "--starttime=2026-12-01T02:00:00",
                          "--endtime=2026-12-02T02:00:00"], f)  # fmt: skip
    (slurm_bin / "sacct").write_text(
        f'#!/bin/sh\nexec "{sys.executable}" -m coreburst.sandbox.sacctgen "{gen.root}" "$@"\n'
    )
    (slurm_bin / "sacct").chmod(0o755)
    monkeypatch.setattr(accounting, "SLICE_FIRST_S", 3600)
    monkeypatch.setattr(accounting, "SLICE_MAX_BYTES", 400_000)  # one slice asked again
    window = ["--since", "2026-12-01T02:00", "--until", "2026-12-02T02:00"]
    audit = gen.meta["audit_log"]
    for fmt in ("table",):  # (the JSON and CSV are the same document's; test_json_csv_...)
        common = ["report", *window, "--stack", "lab", "--stack-dir", str(stack_dir),
                  "--gpu-hour-usd", "2.35", "--audit-log", audit, "--format", fmt]  # fmt: skip
        one = CliRunner().invoke(app, [*common, "--sacct-json", str(whole)])
        sliced = CliRunner().invoke(app, common)
        assert one.exit_code == sliced.exit_code == 0, (one.stderr, sliced.stderr)
        strip = lambda text: [  # noqa: E731
            line
            for line in text.splitlines()
            if "jobs from" not in line and "jobs_source" not in line
        ]
        assert strip(one.stdout) == strip(sliced.stdout), fmt
        assert "$" in one.stdout or fmt != "table"
