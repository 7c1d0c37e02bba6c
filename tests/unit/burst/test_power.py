"""The power programs on moto (in process). The scontrol commands they issue are recorded here
and run for real against slurmctld in tests/integration/burst."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import boto3
import botocore.session
import pytest
from botocore.validate import ParamValidator
from moto import mock_aws

from burst.config import BurstStack, load_burst_stack, parse_burst
from burst.power import (
    FLEET_BATCH,
    Audit,
    Power,
    PowerInputError,
    launch_groups,
    read_resume_file,
)
from burst.slurmconf import node_sets
from tests.unit.burst.conftest import stack_map

AMI = "ami-12c6146b"  # one of moto's built-in images


class RecordingSlurm:
    """Records scontrol argv (no Slurm here; the integration suite runs these for real)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, ...]] = []

    def scontrol(self, *args: str) -> str:
        self.calls.append(args)
        return ""


@pytest.fixture
def ec2(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    for var in ("AWS_ENDPOINT_URL", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with mock_aws():
        yield boto3.client("ec2", region_name="us-east-2")


def _templates(ec2: Any, stack: str, clusters: list[str]) -> None:
    """As infra declares them: ``<cluster>-lt-<Pulumi suffix>``, tagged with the stack."""
    for c in clusters:
        ec2.create_launch_template(
            LaunchTemplateName=f"{c}-lt-0a1b2c3",
            LaunchTemplateData={"ImageId": AMI, "InstanceType": "p5.48xlarge"},
            TagSpecifications=[
                {
                    "ResourceType": "launch-template",
                    "Tags": [{"Key": "coreburst-stack", "Value": stack}],
                }
            ],
        )


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
    (update,) = slurm.calls
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
    assert power.slurm.calls == [
        (
            "update",
            "nodename=od-[1-2]",
            "state=down",
            "reason=(Code:InsufficientInstanceCapacity)Failure when resuming nodes",
        ),
        ("update", "nodename=od-[1-2]", "state=power_down_force"),
    ]
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
