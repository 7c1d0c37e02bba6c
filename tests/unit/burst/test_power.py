"""The power programs on moto (in process). The scontrol commands they issue are recorded here
and run for real against slurmctld in tests/integration/burst."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import boto3
import botocore.session
import pytest
import yaml
from botocore.validate import ParamValidator
from moto import mock_aws

from coreburst.burst.config import BurstStack, SpendGate, gate_limits, load_burst_stack, parse_burst
from coreburst.burst.cost import slurm_hours
from coreburst.burst.gate import parse_spend_holds, releasable
from coreburst.burst.launch import FLEET_BATCH, launch_groups
from coreburst.burst.power import Audit, Power, PowerInputError, read_resume_file
from coreburst.burst.slurmconf import node_sets
from coreburst.common.catalog import load_catalog
from coreburst.common.pricing import instance_rate
from guardrails.stores.sqlite import State
from infra.config import StackConfigError
from tests.helpers.aws import fake_aws_env
from tests.helpers.burst import _templates, stack_map
from tests.helpers.slurm_fakes import RELEASES, RecordingSlurm, recorded_squeue

FIXTURES = Path(__file__).parents[2] / "fixtures" / "slurm"


@pytest.fixture
def ec2(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    fake_aws_env(monkeypatch)
    with mock_aws():
        yield boto3.client("ec2", region_name="us-east-2")


@pytest.fixture
def power(ec2: Any, stack: BurstStack, tmp_path: Path) -> Power:
    _templates(ec2, "t", ["od", "sp", "trn"])
    return Power(stack, ec2, RecordingSlurm(), Audit(tmp_path / "audit.jsonl"))


def _live(ec2: Any, node: str | None = None) -> list[dict[str, Any]]:
    filters = [{"Name": "instance-state-name", "Values": ["pending", "running"]}]
    if node:
        filters.append({"Name": "tag:coreburst-slurm-node", "Values": [node]})
    resp = ec2.describe_instances(Filters=filters)
    return [i for r in resp["Reservations"] for i in r["Instances"]]


def _tags(inst: dict[str, Any]) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in inst.get("Tags", [])}


def _resume_file(tmp_path: Path, jobs: list[dict[str, Any]]) -> str:
    """SLURM_RESUME_FILE as slurm.conf(5) (22.05, ResumeProgram) describes it."""
    p = tmp_path / "resume.json"
    p.write_text(json.dumps({"all_nodes": "x", "jobs": jobs}))
    return str(p)


@pytest.mark.parametrize("cluster", ["od", "sp", "trn"])
def test_fleet_request_matches_botocore_model(power: Power, cluster: str) -> None:
    """The CreateFleet request validates against botocore's ec2 model (EC2 API reference,
    CreateFleet), is instant, all-or-nothing via MinTargetCapacity when asked."""
    ns = next(s for s in node_sets(power.stack) if s.cluster == cluster)
    req = power.fleet_request(ns, "lt-0123", 3, strict=True)
    model = botocore.session.get_session().get_service_model("ec2")
    report = ParamValidator().validate(req, model.operation_model("CreateFleet").input_shape)
    assert not report.has_errors(), report.generate_report()
    assert req["Type"] == "instant"
    opts = req.get("SpotOptions") or req["OnDemandOptions"]
    assert opts["MinTargetCapacity"] == 3 and opts["SingleInstanceType"] is True
    tags = {t["Key"]: t["Value"] for t in req["TagSpecifications"][0]["Tags"]}
    assert tags["coreburst-stack"] == "t" and tags["coreburst-cluster"] == cluster
    assert "MinTargetCapacity" not in (
        power.fleet_request(ns, "lt-0123", 3, strict=False).get("SpotOptions")
        or power.fleet_request(ns, "lt-0123", 3, strict=False)["OnDemandOptions"]
    )


def test_resume_launches_tags_and_tells_slurm(power: Power, ec2: Any, tmp_path: Path) -> None:
    f = _resume_file(tmp_path, [{"job_id": 7, "nodes": "od-[1-2]"}, {"job_id": 8, "nodes": "sp-1"}])
    result = power.resume("od-[1-2],sp-1", f)
    assert sorted(result.launched) == ["od-1", "od-2", "sp-1"] and not result.failed
    for node, iid in result.launched.items():
        (inst,) = _live(ec2, node)
        assert inst["InstanceId"] == iid
        assert _tags(inst)["coreburst-stack"] == "t"
        assert _tags(inst)["coreburst-cluster"] == node.split("-")[0]
        assert _tags(inst)["team"] == "ml"
    (spot,) = _live(ec2, "sp-1")
    assert spot.get("InstanceLifecycle") == "spot"
    slurm = power.slurm
    assert isinstance(slurm, RecordingSlurm)
    # One read of the jobs' owners (instance tags), one address update, then each job is
    # told what it costs. Slurm shows neither job here, so each counts the partition's MaxTime.
    assert slurm.squeue_calls == [("--json", "--states=all")]
    update, *notes = slurm.calls
    assert [n[:2] for n in notes] == [("update", "jobid=7"), ("update", "jobid=8")]
    assert notes[0][2].startswith(
        "AdminComment=coreburst: bursting on od-[1-2] (2 x p5.48xlarge on-demand): $"
    )
    assert notes[1][2].startswith("AdminComment=coreburst: bursting on sp-1 (1 x ")
    assert "spot): $" in notes[1][2] and " h limit" in notes[1][2]
    names = update[1].removeprefix("nodename=").split(",")
    addrs = update[2].removeprefix("nodeaddr=").split(",")
    for n, a in zip(names, addrs, strict=True):
        assert _live(ec2, n)[0]["PrivateIpAddress"] == a
    assert update[3].startswith("nodehostname=ip-")
    events = [json.loads(x)["event"] for x in (tmp_path / "audit.jsonl").read_text().splitlines()]
    assert events == ["resume.request", "resume.launched"]


def test_resume_twice_launches_once(power: Power, ec2: Any) -> None:
    first = power.resume("od-1", None)
    second = power.resume("od-[1-2]", None)
    assert list(second.already) == ["od-1"] and second.already["od-1"] == first.launched["od-1"]
    assert list(second.launched) == ["od-2"]
    assert len(_live(ec2, "od-1")) == 1 and len(_live(ec2)) == 2


def _inject(ec2: Any, op: str, status: int, parsed: dict[str, Any]) -> None:
    """Answer ``op`` without moto (moto never runs out of capacity): botocore's before-call
    hook short-circuits the request; a status >= 300 raises ClientError as from AWS."""

    def hook(**_: Any) -> tuple[Any, dict[str, Any]]:
        return SimpleNamespace(status_code=status, headers={}), parsed

    ec2.meta.events.register(f"before-call.ec2.{op}", hook)


def test_ec2_error_sets_nodes_down_and_powers_them_down(power: Power, ec2: Any) -> None:
    _inject(
        ec2,
        "CreateFleet",
        400,
        {
            "Error": {"Code": "InsufficientInstanceCapacity", "Message": "no capacity"},
            "ResponseMetadata": {"HTTPStatusCode": 400},
        },
    )
    result = power.resume("od-[1-2]", None)
    assert result.failed == {
        "od-1": "InsufficientInstanceCapacity",
        "od-2": "InsufficientInstanceCapacity",
    }
    assert isinstance(power.slurm, RecordingSlurm)
    assert power.slurm.calls[:2] == [
        (
            "update",
            "nodename=od-[1-2]",
            "state=down",
            "reason=(Code:InsufficientInstanceCapacity)Failure when resuming nodes",
        ),
        ("update", "nodename=od-[1-2]", "state=power_down_force"),
    ]
    # The pool's one choice is backed off, so the pool is held for capacityBackoffS too.
    assert power.slurm.calls[2][:2] == ("create", "reservation")
    assert power.slurm.calls[2][2].startswith("ReservationName=coreburst-backoff-od-")
    assert "Duration=10" in power.slurm.calls[2]
    assert _live(ec2) == []


def test_all_or_nothing_job_launches_nothing_on_partial_fleet(
    power: Power, ec2: Any, tmp_path: Path
) -> None:
    """An instant fleet may return fewer instances plus Errors (CreateFleet response): a
    multi-node job then gets none (the partial launch is terminated), single nodes keep theirs."""
    real = ec2.create_fleet

    def partial(**req: Any) -> dict[str, Any]:
        resp = real(**req)
        if req["TargetCapacitySpecification"]["TotalTargetCapacity"] > 1:
            resp["Instances"] = resp["Instances"][:1]
            resp["Errors"] = [
                {"ErrorCode": "InsufficientInstanceCapacity", "ErrorMessage": "partial"}
            ]
        return resp

    ec2.create_fleet = partial
    f = _resume_file(tmp_path, [{"job_id": 1, "nodes": "od-[1-2]"}, {"job_id": 2, "nodes": "sp-1"}])
    result = power.resume("od-[1-2],sp-1", f)
    assert set(result.failed) == {"od-1", "od-2"}
    assert list(result.launched) == ["sp-1"]
    assert [
        _tags(i).get("coreburst-slurm-node")
        for i in _live(ec2)
        if _tags(i).get("coreburst-slurm-node")
    ] == ["sp-1"]


def test_missing_launch_template_fails_the_nodes(
    ec2: Any, stack: BurstStack, tmp_path: Path
) -> None:
    _templates(ec2, "other-stack", ["od"])
    p = Power(stack, ec2, RecordingSlurm(), Audit(tmp_path / "a.jsonl"))
    assert p.resume("od-1", None).failed == {"od-1": "LaunchTemplateNotFound"}
    assert _live(ec2) == []


def test_batches_of_at_most_500(ec2: Any, tmp_path: Path) -> None:
    """600 best-effort nodes: ceil(600 / 500) CreateFleet calls, one instance per node."""
    s = parse_burst(
        "big",
        stack_map(
            [
                {
                    "name": "p",
                    "instanceType": "p5.48xlarge",
                    "nodes": 600,
                    "capacity": {"model": "on-demand"},
                }
            ],
            {"auditLog": str(tmp_path / "a.jsonl")},
        ),
    )
    s = s.model_copy(update={"config": s.config.model_copy(update={"region": "us-east-2"})})
    _templates(ec2, "big", ["p"])
    sizes: list[int] = []
    real = ec2.create_fleet

    def counting(**req: Any) -> dict[str, Any]:
        sizes.append(req["TargetCapacitySpecification"]["TotalTargetCapacity"])
        return real(**req)

    ec2.create_fleet = counting
    p = Power(s, ec2, RecordingSlurm(), Audit(tmp_path / "a.jsonl"))
    result = p.resume("p-[1-600]", None)
    assert len(result.launched) == 600 and result.fleet_calls == math.ceil(600 / FLEET_BATCH)
    assert sizes == [500, 100]


def test_suspend_terminates_only_that_nodes_instances(power: Power, ec2: Any) -> None:
    power.resume("od-[1-2]", None)
    keep = _live(ec2, "od-2")[0]["InstanceId"]
    gone = power.terminate("od-1", "suspend")
    assert len(gone) == 1 and _live(ec2, "od-1") == []
    assert [i["InstanceId"] for i in _live(ec2)] == [keep]
    assert power.terminate("od-1", "suspend") == []  # idempotent


@pytest.mark.parametrize(
    ("hostlist", "needle"),
    [("od-[1-", "hostlist"), ("zz-1", "not burst nodes"), ("od-9", "not burst nodes")],
)
def test_bad_hostlist_launches_nothing(power: Power, ec2: Any, hostlist: str, needle: str) -> None:
    with pytest.raises(PowerInputError, match=needle):
        power.resume(hostlist, None)
    assert _live(ec2) == []


def test_resume_file_formats(tmp_path: Path) -> None:
    p = tmp_path / "r.json"
    # 22.05 (slurm.conf(5) of that release) and 23.02 key names
    p.write_text(
        json.dumps({"all_nodes": "od-[1-2]", "jobs": [{"job_id": 5, "nodes": "od-[1-2]"}]})
    )
    assert read_resume_file(str(p)) == [("5", ["od-1", "od-2"])]
    p.write_text(
        json.dumps(
            {
                "all_nodes_resume": "od-1",
                "jobs": [{"job_id": 6, "nodes_alloc": "od-[1-2]", "nodes_resume": "od-1"}],
            }
        )
    )
    assert read_resume_file(str(p)) == [("6", ["od-1", "od-2"])]
    for bad in ("{", "[]", '{"jobs": [{"job_id": 1}]}', '{"jobs": [{"job_id": 1, "nodes": "a["}]}'):
        p.write_text(bad)
        with pytest.raises(PowerInputError, match="SLURM_RESUME_FILE"):
            read_resume_file(str(p))


def test_launch_groups() -> None:
    groups = launch_groups(
        ["a-1", "a-2", "a-3", "b-1"],
        [("1", ["a-1", "a-2"]), ("2", ["a-3"]), ("3", ["a-2", "b-1"])],
    )
    assert [(g.label, g.nodes, g.all_or_nothing) for g in groups] == [
        ("job 1", ["a-1", "a-2"], True),
        ("job 3", ["b-1"], True),
        ("best-effort", ["a-3"], False),
    ]


def test_repo_stack_loads(tmp_path: Path) -> None:
    assert load_burst_stack("dev").settings.node_address == "private-ip"


# -- spend gate ---------------------------------------------------------------------------
NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)


# A real ``scontrol -o show job`` line of Slurm 22.05.8 (tests/fixtures/slurm/README.md), for a
# job with no AdminComment: the fakes below answer with it, JobId and TimeLimit replaced.
SHOW_JOB = (FIXTURES / "scontrol-show-job-22.05-recorded.txt").read_text().splitlines()


def job_line(job: str, limit: str = "UNLIMITED") -> str:
    line = next(x for x in SHOW_JOB if x.startswith("JobId=2 "))
    return line.replace("JobId=2 ", f"JobId={job} ", 1).replace(
        "TimeLimit=UNLIMITED", f"TimeLimit={limit}", 1
    )


class AnsweringSlurm(RecordingSlurm):
    """Records argv and answers ``-o show job N`` / ``-o show reservation`` in scontrol's
    one-line format (job lines: :func:`job_line`, from a real 22.05 recording; reservations
    made up, in the format tests/integration/burst/test_spend_gate.py reads from the real
    scontrol); squeue lists no job."""

    def __init__(self, limits: dict[str, str], reservations: list[str] | None = None) -> None:
        super().__init__()
        self.limits = limits
        self.reservations = reservations or []

    def scontrol(self, *args: str) -> str:
        self.calls.append(args)
        if args[:3] == ("-o", "show", "job"):
            limit = self.limits.get(args[3])
            if limit is None:
                raise RuntimeError("scontrol -o show failed (1): Invalid job id specified")
            return job_line(args[3], limit) + "\n"
        if args[:3] == ("-o", "show", "reservation"):
            return "".join(f"{r}\n" for r in self.reservations) or "No reservations in the system\n"
        return ""


def _guardrails_yaml(tmp_path: Path, scope: str = "account", **limits: Any) -> Path:
    """The guardrails daemon's config (guardrails/config.py): the gate's one source of its
    scope, limits, state path and snapshot age."""
    path = tmp_path / "guardrails.yaml"
    scope_doc = {"name": scope, **limits}
    path.write_text(
        yaml.safe_dump(
            {
                "state": {"path": str(tmp_path / "state.sqlite")},
                "spend": {"scopes": [scope_doc]},
                "burst_reconcile": {"spend_scope": scope},
            }
        )
    )
    return path


def _gate_stack(tmp_path: Path, **gate: Any) -> BurstStack:
    limits = {
        snake: gate.pop(camel)
        for camel, snake in (
            ("dailyLimitUsd", "daily_limit_usd"),
            ("monthlyLimitUsd", "monthly_limit_usd"),
        )
        if camel in gate
    }
    s = parse_burst(
        "t",
        stack_map(
            [
                {
                    "name": "od",
                    "instanceType": "p5.48xlarge",
                    "nodes": 4,
                    "capacity": {"model": "on-demand"},
                },
            ],
            {
                "auditLog": str(tmp_path / "a.jsonl"),
                "spendGate": {
                    "guardrailsConfig": str(_guardrails_yaml(tmp_path, **limits)),
                    **gate,
                },
            },
        ),
    )
    return s.model_copy(update={"config": s.config.model_copy(update={"region": "us-east-2"})})


def _spent(tmp_path: Path, today: float, mtd: float, at: datetime = NOW) -> None:
    """A spend snapshot as the guardrails daemon writes it (guardrails.stores.sqlite.State, the
    daemon's own SQLite store; rules/spend_limit.py calls add_spend each cycle)."""
    store = State(tmp_path / "state.sqlite")
    store.add_spend(at, "account", burn=0.0, today=today, mtd=mtd, proj=mtd * 2)
    store.db.close()


def _rate() -> float:
    return instance_rate(load_catalog(), "p5.48xlarge", "us-east-2", "on-demand")[0]


def _gate_power(ec2: Any, tmp_path: Path, slurm: RecordingSlurm, **gate: Any) -> Power:
    if not ec2.describe_launch_templates()["LaunchTemplates"]:
        _templates(ec2, "t", ["od"])
    return Power(
        _gate_stack(tmp_path, **gate), ec2, slurm, Audit(tmp_path / "a.jsonl"), now=lambda: NOW
    )


@pytest.mark.parametrize(
    ("value", "hours"),
    [
        ("90", 1.5),  # minutes
        ("90:30", 1.5 + 30 / 3600),  # minutes:seconds
        ("01:30:00", 1.5),  # hours:minutes:seconds
        ("2-3", 51.0),  # days-hours
        ("2-03:30", 51.5),  # days-hours:minutes
        ("7-00:00:00", 168.0),  # days-hours:minutes:seconds
        ("UNLIMITED", None),
        ("Partition_Limit", None),
    ],
)
def test_slurm_hours_reads_sbatch_time_formats(value: str, hours: float | None) -> None:
    """The acceptable time formats of sbatch(1) --time, and scontrol's no-limit words."""
    assert slurm_hours(value) == (pytest.approx(hours) if hours is not None else None)


def test_gate_over_the_daily_limit_launches_nothing_and_holds(ec2: Any, tmp_path: Path) -> None:
    """2 nodes x $/h x 2 h of job 7 > what is left today: no CreateFleet, a MAINT
    reservation on the nodes (named with the cost), DOWN with the gate's reason, power down."""
    rate = _rate()
    _spent(tmp_path, today=1000.0, mtd=5000.0)
    slurm = AnsweringSlurm({"7": "02:00:00"})
    power = _gate_power(ec2, tmp_path, slurm, dailyLimitUsd=1000.0 + 4 * rate - 1)
    result = power.resume("od-[1-2]", _resume_file(tmp_path, [{"job_id": 7, "nodes": "od-[1-2]"}]))
    assert result.held == ["od-1", "od-2"] and not result.launched and not result.failed
    assert _live(ec2) == []
    create, down, off, note = slurm.calls[1:]
    # The job says why it waits, with its projected cost, in one line (scontrol show job).
    assert note[:2] == ("update", "jobid=7")
    assert note[2].startswith(
        f"AdminComment=coreburst: held by the burst spend gate, projected ${4 * rate:,.2f}"
    )
    assert "left today" in note[2] and "\n" not in note[2]
    assert create[:5] == (
        "create",
        "reservation",
        f"ReservationName=coreburst-spend-{math.ceil(4 * rate)}usd-{int(NOW.timestamp() * 1000)}-"
        f"{os.getpid()}",
        "Nodes=od-[1-2]",
        "Users=root",
    )
    assert "Flags=MAINT,IGNORE_JOBS" in create
    assert down[:3] == ("update", "nodename=od-[1-2]", "state=down")
    assert down[3].startswith("reason=coreburst: spend gate: $") and "left today" in down[3]
    assert off == ("update", "nodename=od-[1-2]", "state=power_down_force")
    held = [json.loads(x) for x in (tmp_path / "a.jsonl").read_text().splitlines()][-1]
    assert held["event"] == "resume.held" and held["cost_usd"] == pytest.approx(4 * rate, 0.01)


def test_gate_under_the_limit_launches(ec2: Any, tmp_path: Path) -> None:
    rate = _rate()
    _spent(tmp_path, today=1000.0, mtd=5000.0)
    slurm = AnsweringSlurm({"7": "02:00:00"})
    power = _gate_power(
        ec2, tmp_path, slurm, dailyLimitUsd=1000.0 + 4 * rate + 1, monthlyLimitUsd=90000.0
    )
    result = power.resume("od-[1-2]", _resume_file(tmp_path, [{"job_id": 7, "nodes": "od-[1-2]"}]))
    assert sorted(result.launched) == ["od-1", "od-2"] and not result.held
    assert not any(c[0] == "create" for c in slurm.calls)
    # The bursting job's user sees what it costs (scontrol show job: AdminComment), one line,
    # with the time limit read once for the gate and the note.
    notes = [c for c in slurm.calls if c[:2] == ("update", "jobid=7")]
    assert notes == [
        (
            "update",
            "jobid=7",
            "AdminComment=coreburst: bursting on od-[1-2] (2 x p5.48xlarge on-demand): "
            f"${2 * rate:,.2f}/h, projected ${4 * rate:,.2f} over its 2 h limit",
        )
    ]
    assert [c for c in slurm.calls if c[:3] == ("-o", "show", "job") and len(c) > 3] == [
        ("-o", "show", "job", "7")
    ]


def test_gate_monthly_limit_and_default_hours(ec2: Any, tmp_path: Path) -> None:
    """A node resumed without a job counts ``defaultHours``; the monthly limit binds too."""
    rate = _rate()
    _spent(tmp_path, today=0.0, mtd=10_000.0)
    slurm = AnsweringSlurm({})
    power = _gate_power(ec2, tmp_path, slurm, monthlyLimitUsd=10_000.0 + 2.5 * rate, defaultHours=3)
    result = power.resume("od-1", None)
    assert result.held == ["od-1"]
    assert "left this month (account)" in slurm.calls[1][3]


def test_gate_unlimited_job_counts_the_burst_max_time(ec2: Any, tmp_path: Path) -> None:
    """No time limit (or a job scontrol no longer knows): the burst partition's MaxTime,
    a week by default, the most it may run there."""
    rate = _rate()
    _spent(tmp_path, today=0.0, mtd=0.0)
    for limits in ({"7": "UNLIMITED"}, {}):
        slurm = AnsweringSlurm(limits)
        power = _gate_power(ec2, tmp_path, slurm, monthlyLimitUsd=168 * rate - 1)
        result = power.resume("od-3", _resume_file(tmp_path, [{"job_id": 7, "nodes": "od-3"}]))
        assert result.held == ["od-3"]


@pytest.mark.parametrize(
    ("setup", "needle"),
    [
        ("none", "unreadable (FileNotFoundError)"),
        ("other-scope", "no spend snapshot for scope account"),
        ("stale", "min old"),
    ],
)
def test_gate_fails_closed(ec2: Any, tmp_path: Path, setup: str, needle: str) -> None:
    """No state file, no snapshot for the scope, or a snapshot older than maxSnapshotAgeS:
    nothing launches (the daemon is not measuring spend)."""
    if setup == "other-scope":
        store = State(tmp_path / "state.sqlite")
        store.add_spend(NOW, "team-ml", burn=0.0, today=0.0, mtd=0.0, proj=0.0)
        store.db.close()
    elif setup == "stale":
        _spent(tmp_path, 0.0, 0.0, at=NOW - timedelta(hours=2))
    slurm = AnsweringSlurm({})
    power = _gate_power(ec2, tmp_path, slurm, dailyLimitUsd=1e9)
    result = power.resume("od-1", None)
    assert result.held == ["od-1"] and _live(ec2) == []
    assert needle in slurm.calls[1][3]
    assert not (tmp_path / "state.sqlite").exists() or setup != "none"


def test_release_plan_fits_holds_cheapest_first() -> None:
    """The rule's release plan (coreburst.burst.gate.releasable) over holds parsed from
    ``scontrol -o show reservation`` lines (format as AnsweringSlurm above)."""
    text = "\n".join(
        [
            "ReservationName=coreburst-spend-300usd-1-1 StartTime=2026-12-03T11:00:00 "
            "Nodes=od-[1-2] NodeCnt=2 Flags=MAINT,IGNORE_JOBS,SPEC_NODES Users=root",
            "ReservationName=coreburst-spend-80usd-2-2 StartTime=2026-12-03T11:00:00 "
            "Nodes=od-3 NodeCnt=1 Flags=MAINT,IGNORE_JOBS,SPEC_NODES Users=root",
            "ReservationName=coreburst-spend-50usd-3-3 StartTime=2026-12-03T11:00:00 "
            "Nodes=od-4 NodeCnt=1 Flags=MAINT,IGNORE_JOBS,SPEC_NODES Users=root",
            "ReservationName=coreburst-hold-cb StartTime=2026-12-03T11:00:00 "
            "Nodes=cb-1 NodeCnt=1 Flags=MAINT,IGNORE_JOBS,SPEC_NODES Users=root",
        ]
    )
    holds = parse_spend_holds(text)
    assert [h.name for h in holds] == [
        "coreburst-spend-300usd-1-1",
        "coreburst-spend-80usd-2-2",
        "coreburst-spend-50usd-3-3",
    ]
    release, keep = releasable(holds, {"today": 100.0, "this month": 5000.0})
    assert [h.nodes for h in release] == ["od-4"]  # 50 fits; then 80 > 50 left; 300 > 50
    assert [h.cost_usd for h, _ in keep] == [80.0, 300.0]
    assert releasable(holds, {"today": 0.0}) == (
        [],
        [
            (h, f"${h.cost_usd:,.0f} projected > $0 left")
            for h in sorted(holds, key=lambda h: h.cost_usd)
        ],
    )


@pytest.mark.parametrize(
    ("doc", "needle"),
    [
        (
            {"spend": {"scopes": [{"name": "team-ml", "daily_limit_usd": 5}]},
             "burst_reconcile": {"spend_scope": "team-ml"}},
            None,
        ),
        (
            {"spend": {"scopes": [{"name": "team-ml", "daily_limit_usd": 5}]},
             "burst_reconcile": {"spend_scope": "account"}},
            "spend scope 'account' (burst_reconcile.spend_scope in",
        ),
        (
            {"spend": {"scopes": [{"name": "account"}]}},
            "has no daily_limit_usd or monthly_limit_usd",
        ),
        ({"burst_reconcile": {"spend_scope": None}}, "sets burst_reconcile.spend_scope to null"),
        ("missing", "spendGate.guardrailsConfig: "),
        ({"spend": {"scopes": "nope"}}, "spendGate.guardrailsConfig: "),
    ],
)  # fmt: skip
def test_gate_limits_come_from_the_guardrails_config_only(
    tmp_path: Path, doc: Any, needle: str | None
) -> None:
    """Scope, limits, state path and snapshot age are the guardrails config's; a scope it
    does not define (or without limits) is one line naming the file and the fix."""
    path = tmp_path / "guardrails.yaml"
    if doc != "missing":
        path.write_text(yaml.safe_dump({"state": {"path": str(tmp_path / "g.db")}, **doc}))
    gate = SpendGate(guardrails_config=path)
    if needle is None:
        limits = gate_limits(gate)
        assert (limits.scope, limits.daily_limit_usd, limits.monthly_limit_usd) == (
            "team-ml",
            5,
            None,
        )
        assert limits.state_path == tmp_path / "g.db"
        assert limits.max_snapshot_age == timedelta(hours=1)
        return
    with pytest.raises(StackConfigError) as err:
        gate_limits(gate)
    msg = str(err.value)
    assert needle in msg and "\n" not in msg and msg.startswith("coreburst:burst.spendGate")


def test_gate_with_a_scope_the_guardrails_lack_holds(ec2: Any, tmp_path: Path) -> None:
    """A gate whose guardrails config names no usable scope never launches unchecked."""
    _spent(tmp_path, today=0.0, mtd=0.0)
    slurm = AnsweringSlurm({})
    power = _gate_power(ec2, tmp_path, slurm, dailyLimitUsd=1e9)
    _guardrails_yaml(tmp_path, scope="account")  # limits removed: no usable scope
    result = power.resume("od-1", None)
    assert result.held == ["od-1"] and _live(ec2) == []
    assert "has no daily_limit_usd or monthly_limit_usd" in slurm.calls[1][3]


# -- the job's AdminComment -----------------------------------------------------------------
class CommentedSlurm(RecordingSlurm):
    """Answers the one read of every job (``squeue --json --states=all``) with the release's
    real recording (tests/fixtures/slurm/README.md): job 1's AdminComment holds a site's own
    text, its Comment a user's text that reads like Slurm fields; then keeps what each
    ``update jobid=1 AdminComment=`` sets, as slurmctld does."""

    def __init__(self, release: str) -> None:
        super().__init__()
        self.doc = recorded_squeue(release)
        (self.job,) = [j for j in self.doc["jobs"] if j["job_id"] == 1]
        self.user_comment = self.job["comment"]

    @property
    def comment(self) -> str:
        got = self.job["admin_comment"]
        assert isinstance(got, str)
        return got

    def squeue(self, *args: str) -> str:
        self.squeue_calls.append(args)
        return json.dumps(self.doc)

    def scontrol(self, *args: str) -> str:
        self.calls.append(args)
        if args[:2] == ("update", "jobid=1") and args[2].startswith("AdminComment="):
            self.job["admin_comment"] = args[2].removeprefix("AdminComment=")
        return ""


def _comment_now(slurm: CommentedSlurm) -> str:
    assert slurm.job["comment"] == slurm.user_comment  # the user's own is never touched
    return slurm.comment


@pytest.mark.parametrize("release", RELEASES)
def test_a_sites_comment_survives_and_two_kinds_of_note_coexist(
    ec2: Any, stack: BurstStack, tmp_path: Path, release: str
) -> None:
    """A launch that fails for job 1 says why (requeue), then one that works says what it
    costs (burst): both notes stand, newest first, after the site's own text (with its two
    spaces and ``Partition=``), nothing of the user's Comment; the job's comment is read once
    per run, with the owners."""
    _templates(ec2, "t", ["od", "sp", "trn"])
    site = "site: project=alpha  Partition=fake | ops"
    slurm = CommentedSlurm(release)
    assert _comment_now(slurm) == site
    f = _resume_file(tmp_path, [{"job_id": 1, "nodes": "od-1"}])

    failing = Power(stack, ec2, slurm, Audit(tmp_path / "a.jsonl"))
    no_capacity = {
        "Error": {"Code": "InsufficientInstanceCapacity", "Message": "no capacity"},
        "ResponseMetadata": {"HTTPStatusCode": 400},
    }

    def refuse(**_: Any) -> tuple[Any, dict[str, Any]]:  # as _inject, undone after
        return SimpleNamespace(status_code=400, headers={}), no_capacity

    ec2.meta.events.register("before-call.ec2.CreateFleet", refuse)
    assert failing.resume("od-1", f).failed == {"od-1": "InsufficientInstanceCapacity"}
    ec2.meta.events.unregister("before-call.ec2.CreateFleet", refuse)
    after_fail = _comment_now(slurm)
    assert after_fail.startswith(
        f"{site} | coreburst: burst launch for od-1 failed (InsufficientInstanceCapacity: "
    )

    ok = Power(stack, ec2, slurm, Audit(tmp_path / "a.jsonl"))
    ok.claims.forgive("od")  # capacity is back (the backoff would keep od out meanwhile)
    assert list(ok.resume("od-1", f).launched) == ["od-1"]
    parts = _comment_now(slurm).split(" | ")
    assert parts[:2] == ["site: project=alpha  Partition=fake", "ops"]
    assert parts[2].startswith("coreburst: bursting on od-1 (1 x p5.48xlarge on-demand): $")
    assert parts[3] == after_fail.split(" | ")[2]  # the launch failure is still said
    assert len(parts) == 4
    assert "keep me" not in _comment_now(slurm)
    # each run read every job once (owners, comments), and wrote each note once; the failed
    # one read them once more for the job's requeue hold (coreburst/burst/requeue_hold.py:
    # this job, as recorded, is pending held by its user, not requeued, so nothing is lifted)
    notes = [c for c in slurm.calls if c[:2] == ("update", "jobid=1")]
    assert slurm.squeue_calls == [("--json", "--states=all")] * 3 and len(notes) == 2


def test_a_comment_that_cannot_be_read_is_not_overwritten(
    ec2: Any, stack: BurstStack, tmp_path: Path
) -> None:
    """Slurm cannot list the jobs: the launch goes on, but no AdminComment is written
    (it would replace a site's text unseen)."""

    class Failing(RecordingSlurm):
        def scontrol(self, *args: str) -> str:
            self.calls.append(args)
            if args[:3] == ("-o", "show", "job"):
                raise RuntimeError(
                    "scontrol -o show failed (1): Unable to contact slurm controller"
                )
            return ""

        def squeue(self, *args: str) -> str:
            self.squeue_calls.append(args)
            raise RuntimeError("squeue --json --states=all failed (1): Unable to contact slurm")

    _templates(ec2, "t", ["od", "sp", "trn"])
    slurm = Failing()
    power = Power(stack, ec2, slurm, Audit(tmp_path / "a.jsonl"))
    f = _resume_file(tmp_path, [{"job_id": 1, "nodes": "od-1"}])
    assert list(power.resume("od-1", f).launched) == ["od-1"]
    assert not [c for c in slurm.calls if c[:2] == ("update", "jobid=1")]
