"""The resume program's per-instance EC2 calls (coreburst/burst/ec2io.py) against moto server
behind coreburst/sandbox/ec2faults.py, which throttles as the EC2 Developer Guide's "Request
throttling for the Amazon EC2 API" describes (``RequestLimitExceeded``, HTTP 503, the error
shape of the EC2 API reference's "Error codes for the Amazon EC2 API") and hides fresh
instances as "Eventual consistency in the Amazon EC2 API" describes (an unknown id, then no
``PrivateIpAddress`` for a while). One moto server and one proxy for the module.

The stacks are made up here; keys follow infra/config.py and coreburst/burst/config.py."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.config import Config
from botocore.exceptions import ClientError, EndpointConnectionError, ParamValidationError

from coreburst.burst import ec2io
from coreburst.burst.config import parse_burst
from coreburst.burst.launch import FLEET_BATCH, LAUNCH_TAG_KEY
from coreburst.burst.power import Audit, Power
from coreburst.sandbox.ec2faults import Ec2Faults, TokenBucket, bucket_for
from coreburst.sandbox.emulator import AMI, MotoProcess, fake_session
from tests.helpers.burst import stack_map
from tests.helpers.slurm_fakes import squeue_json

NODE_TAG = "coreburst-slurm-node"


class RecordingSlurm:
    """Records scontrol argv (no Slurm here; tests/integration/burst runs them for real);
    squeue lists no job."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, ...]] = []

    def scontrol(self, *args: str) -> str:
        self.calls.append(args)
        return ""

    def squeue(self, *args: str) -> str:
        return squeue_json()

    def addresses(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for c in self.calls:
            if len(c) > 2 and c[2].startswith("nodeaddr="):
                names = c[1].removeprefix("nodename=").split(",")
                addrs = c[2].removeprefix("nodeaddr=").split(",")
                out.update(zip(names, addrs, strict=True))
        return out


@pytest.fixture(scope="module")
def moto() -> Iterator[MotoProcess]:
    server = MotoProcess().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def proxy(moto: MotoProcess) -> Iterator[Ec2Faults]:
    faults = Ec2Faults(moto.url).start()
    yield faults
    faults.stop()


@pytest.fixture
def faults(moto: MotoProcess, proxy: Ec2Faults) -> Ec2Faults:
    """A clean EC2 (moto reset) behind a proxy that, until the test says otherwise, neither
    throttles nor hides."""
    moto.reset()
    proxy.reset()
    proxy.throttle, proxy.limits, proxy.hide_s, proxy.no_ip_s = False, {}, 0.0, 0.0
    proxy.no_ip_reads = 0
    return proxy


def _client(url: str, config: Config | None = None) -> Any:
    return fake_session().client("ec2", endpoint_url=url, config=config)


def _template(ec2: Any, stack: str = "t") -> str:
    lt = ec2.create_launch_template(
        LaunchTemplateName="od-lt-a1b2c3d",
        LaunchTemplateData={"ImageId": AMI, "InstanceType": "p5.48xlarge"},
        TagSpecifications=[
            {
                "ResourceType": "launch-template",
                "Tags": [{"Key": "coreburst-stack", "Value": stack}],
            }
        ],
    )
    return str(lt["LaunchTemplate"]["LaunchTemplateId"])


def _launch(ec2: Any, n: int) -> list[str]:
    lt = _template(ec2)
    resp = ec2.create_fleet(
        Type="instant",
        LaunchTemplateConfigs=[
            {"LaunchTemplateSpecification": {"LaunchTemplateId": lt, "Version": "$Latest"}}
        ],
        TargetCapacitySpecification={
            "TotalTargetCapacity": n,
            "DefaultTargetCapacityType": "on-demand",
            "OnDemandTargetCapacity": n,
        },
    )
    return [i for item in resp["Instances"] for i in item["InstanceIds"]]


def _truth(moto: MotoProcess) -> dict[str, dict[str, Any]]:
    """Every instance as moto itself holds it (no proxy in between)."""
    resp = _client(moto.url).describe_instances()
    return {i["InstanceId"]: i for r in resp["Reservations"] for i in r["Instances"]}


def _power(tmp_path: Path, url: str, n: int, resume_timeout: int = 1800) -> Power:
    burst = {
        "auditLog": str(tmp_path / "audit.jsonl"),
        "logFile": str(tmp_path / "power.log"),
        "resumeTimeout": resume_timeout,
    }
    cluster = {"name": "od", "instanceType": "p5.48xlarge", "nodes": n}
    stack = parse_burst("t", stack_map([{**cluster, "capacity": {"model": "on-demand"}}], burst))
    ec2 = _client(url, ec2io.client_config())
    return Power(stack, ec2, RecordingSlurm(), Audit(tmp_path / "audit.jsonl"))


def _events(tmp_path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (tmp_path / "audit.jsonl").read_text().splitlines()]


def test_without_retries_a_fresh_nodes_address_is_missing(
    faults: Ec2Faults, moto: MotoProcess
) -> None:
    """Read once right after launch (what resume did): the instances are unknown, then known
    without a private IP; read with retries: every address, as moto holds it."""
    faults.hide_s, faults.no_ip_s = 0.6, 1.6
    ec2 = _client(faults.url)
    ids = _launch(ec2, 6)
    nodes = {f"od-{k}": iid for k, iid in enumerate(ids, 1)}
    with pytest.raises(ClientError) as err:  # naming a fresh id fails the whole call
        ec2.describe_instances(InstanceIds=ids)
    assert err.value.response["Error"]["Code"] == "InvalidInstanceID.NotFound"
    once = ec2io.read_addresses(ec2, nodes, deadline_s=0)
    assert once.rounds == 1 and once.found == {}
    assert once.missing == dict.fromkeys(nodes, ec2io.NOT_VISIBLE)
    time.sleep(0.7)  # visible now, but not yet with an address
    once = ec2io.read_addresses(ec2, nodes, deadline_s=0)
    assert once.found == {} and once.missing == dict.fromkeys(nodes, ec2io.NO_ADDRESS)

    told: list[str] = []
    res = ec2io.read_addresses(ec2, nodes, deadline_s=20, report=told.extend)
    truth = _truth(moto)
    assert res.missing == {} and res.rounds > 1 and sorted(told) == sorted(nodes)
    for node, iid in nodes.items():
        assert res.found[node] == (truth[iid]["PrivateIpAddress"], truth[iid]["PrivateDnsName"])


def test_throttled_calls_are_retried(faults: Ec2Faults, moto: MotoProcess) -> None:
    """CreateTags on a small bucket: a client without retries is refused with EC2's
    RequestLimitExceeded; ec2io.tag_nodes, even over that client, tags every instance."""
    ids = _launch(_client(faults.url), 12)
    faults.throttle, faults.limits = True, {"CreateTags": (3.0, 0.5)}
    bare = _client(faults.url, Config(retries={"mode": "standard", "max_attempts": 1}))
    codes = []
    for iid in ids[:6]:
        try:
            bare.create_tags(Resources=[iid], Tags=[{"Key": "probe", "Value": "x"}])
            codes.append("ok")
        except ClientError as exc:
            codes.append(exc.response["Error"]["Code"])
            assert exc.response["ResponseMetadata"]["HTTPStatusCode"] == 503
    assert codes[:3] == ["ok"] * 3 and "RequestLimitExceeded" in codes

    # A refill slower than 12 calls on 8 threads can go, however loaded the machine.
    faults.limits = {"CreateTags": (3.0, 1.0)}
    nodes = {f"od-{k}": iid for k, iid in enumerate(ids, 1)}
    res = ec2io.tag_nodes(bare, nodes, NODE_TAG, deadline_s=30, workers=8)
    assert res.failed == {} and res.tagged == nodes
    assert res.counts.throttled > 0 and res.counts.calls == len(nodes) + res.counts.throttled
    truth = _truth(moto)
    for node, iid in nodes.items():
        assert {t["Key"]: t["Value"] for t in truth[iid]["Tags"]}[NODE_TAG] == node


def test_resume_under_throttling_and_delay_sets_every_address(
    faults: Ec2Faults, moto: MotoProcess, tmp_path: Path
) -> None:
    """The resume program end to end: one CreateFleet (<= ceil(n/500)), every instance tagged
    with its node, every node's address told to Slurm, though CreateTags and DescribeInstances
    are throttled and instances are hidden, then address-less, for a while."""
    n = 12
    power = _power(tmp_path, faults.url, n)
    _template(_client(moto.url))
    faults.throttle = True
    faults.limits = {"CreateTags": (3.0, 20.0), "DescribeInstances": (3.0, 4.0)}
    faults.hide_s, faults.no_ip_reads = 1.0, 2
    result = power.resume(f"od-[1-{n}]", None)
    assert len(result.launched) == n and not result.failed
    assert faults.calls["CreateFleet"] == 1 <= math.ceil(n / FLEET_BATCH)
    assert faults.throttled["CreateTags"] > 0 and faults.hidden["CreateTags"] > 0
    assert faults.hidden["DescribeInstances"] >= 2  # two reads without the addresses
    truth = _truth(moto)
    slurm = power.slurm
    assert isinstance(slurm, RecordingSlurm)
    told = slurm.addresses()
    assert sorted(told) == sorted(result.launched)
    for node, iid in result.launched.items():
        assert told[node] == truth[iid]["PrivateIpAddress"]
        assert {t["Key"]: t["Value"] for t in truth[iid]["Tags"]}[NODE_TAG] == node
    assert not any("state=down" in c for c in slurm.calls)


def test_address_missing_at_the_deadline_fails_the_node(
    faults: Ec2Faults, moto: MotoProcess, tmp_path: Path
) -> None:
    """EC2 shows the instances but never their private IP within the deadline (ResumeTimeout
    3 s -> 1 s): the nodes go DOWN with the reason, are powered down, audited, and their
    instances are terminated; nothing is left with no address and no word."""
    power = _power(tmp_path, faults.url, 2, resume_timeout=3)
    _template(_client(moto.url))
    faults.no_ip_s = 60.0
    result = power.resume("od-[1-2]", None)
    slurm = power.slurm
    assert isinstance(slurm, RecordingSlurm)
    assert slurm.addresses() == {}
    down = (
        "update",
        "nodename=od-[1-2]",
        "state=down",
        "reason=(Code:NoPrivateIpAddress)Failure when resuming nodes",
    )
    assert down in slurm.calls  # then powered down: the job requeues now
    i = slurm.calls.index(down)
    assert slurm.calls[i + 1] == ("update", "nodename=od-[1-2]", "state=power_down_force")
    (ev,) = [e for e in _events(tmp_path) if e["event"] == "resume.no_address"]
    assert ev["nodes"] == "od-[1-2]" and ev["reasons"] == ["NoPrivateIpAddress"]
    truth = _truth(moto)
    assert {truth[i]["State"]["Name"] for i in result.launched.values()} <= {
        "shutting-down",
        "terminated",
    }
    assert power.claims.rows() == []


def test_tag_never_landing_fails_the_node_and_leaves_an_orphan_to_the_reconciler(
    faults: Ec2Faults, moto: MotoProcess, tmp_path: Path
) -> None:
    """EC2 does not know the fresh instance for longer than the tag deadline: the node is
    failed with the CreateTags code, never counted launched, its claim dropped; the instance
    (TerminateInstances is refused too) keeps only its launch tag, which the burst-reconcile
    rule ends once past orphan_timeout."""
    power = _power(tmp_path, faults.url, 1, resume_timeout=3)
    _template(_client(moto.url))
    faults.hide_s = 60.0
    result = power.resume("od-1", None)
    assert result.launched == {}
    slurm = power.slurm
    assert isinstance(slurm, RecordingSlurm)
    reason = "reason=(Code:CreateTags:InvalidInstanceID.NotFound)Failure when resuming nodes"
    assert ("update", "nodename=od-1", "state=down", reason) in slurm.calls
    assert ("update", "nodename=od-1", "state=power_down_force") in slurm.calls
    events = [e["event"] for e in _events(tmp_path)]
    # (The address was never read either: the tags are written while addresses are read.)
    assert events[-2:] == ["resume.untagged", "resume.failed"]
    (inst,) = _truth(moto).values()
    tags = {t["Key"]: t["Value"] for t in inst["Tags"]}
    assert NODE_TAG not in tags and tags[LAUNCH_TAG_KEY].startswith("coreburst-")
    assert power.claims.rows() == []


def test_documented_buckets() -> None:
    """The throttling guide's categories, and its DescribeHosts example: 100 requests at
    once, then 20 a second."""
    assert bucket_for("CreateTags", {}) == ("CreateTags", (100.0, 10.0))
    assert bucket_for("DescribeInstances", {}) == ("DescribeInstances (unfiltered)", (50.0, 10.0))
    assert bucket_for("DescribeInstances", {"Filter.1.Name": ["instance-id"]})[1] == (100.0, 20.0)
    assert bucket_for("DescribeHosts", {}) == ("DescribeHosts", (100.0, 20.0))
    assert bucket_for("CreateFleet", {}) == ("CreateFleet", (50.0, 5.0))
    b = TokenBucket(100, 20, 100, 0.0)
    assert sum(b.take(0.0) for _ in range(150)) == 100
    assert sum(b.take(1.0) for _ in range(50)) == 20


def test_deadlines_fit_the_documented_refill_and_resume_timeout() -> None:
    """Tags get at least twice what CreateTags' refill (10/s) needs, within 300..600 s, and
    never more than a third of ResumeTimeout."""
    assert ec2io.deadline("tags", 1000, 1800) == 300.0
    assert ec2io.deadline("tags", 2000, 1800) == 400.0
    assert ec2io.deadline("tags", 5000, 3600) == 600.0
    assert ec2io.deadline("tags", 1000, 300) == 100.0
    assert ec2io.deadline("addresses", 1000, 1800) == 300.0


def test_what_is_retried() -> None:
    """Throttling, 5xx, an id not visible yet and a dropped connection are retried; an error
    that would repeat (a denied call, a request botocore refuses) is not."""

    def err(code: str, status: int) -> ClientError:
        resp: Any = {"Error": {"Code": code}, "ResponseMetadata": {"HTTPStatusCode": status}}
        return ClientError(resp, "CreateTags")

    assert ec2io.retryable(err("RequestLimitExceeded", 503))
    assert ec2io.retryable(err("InvalidInstanceID.NotFound", 400))
    assert ec2io.retryable(err("InternalError", 500))
    assert ec2io.retryable(EndpointConnectionError(endpoint_url="http://127.0.0.1:1"))
    assert not ec2io.retryable(err("UnauthorizedOperation", 403))
    assert not ec2io.retryable(ParamValidationError(report="Resources: missing"))


def test_backoff_is_bounded_by_the_deadline() -> None:
    now = [0.0]
    waits: list[float] = []

    def sleep(s: float) -> None:
        waits.append(s)
        now[0] += s

    b = ec2io.Backoff(10.0, clock=lambda: now[0], sleep=sleep)
    while b.wait():
        pass
    assert now[0] == pytest.approx(10.0) and max(waits) <= ec2io.MAX_WAIT_S
    assert all(w > 0 for w in waits)


def test_the_power_programs_client_retries_adaptively(
    stack_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The EC2 client the power programs build (coreburst/burst/cli.py) slows down after a
    throttle (botocore's adaptive retry mode) and pools a connection per tagging thread."""
    from coreburst.burst.cli import _power as build

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    power = build("t", stack_dir, "suspend")
    cfg = power.ec2.meta.config
    assert cfg.retries["mode"] == "adaptive"
    assert cfg.retries["total_max_attempts"] == ec2io.MAX_ATTEMPTS
    assert cfg.max_pool_connections >= ec2io.TAG_WORKERS
    # Issue 33 item 6: per-try timeouts and a deadline from the stack's SuspendTimeout.
    limits = ec2io.budget("suspend", 1800, power.stack.settings.suspend_timeout)
    assert (cfg.connect_timeout, cfg.read_timeout) == (limits.connect_s, limits.read_s)
    assert power.deadline is not None and power.deadline.limits == limits


def test_the_reconciler_never_takes_an_instance_still_being_named_for_an_orphan() -> None:
    """burst-reconcile's shortest ``orphan_timeout`` outlasts the longest the resume program
    may spend tagging a fresh instance with its node (an instance launched but not yet named
    must not be terminated as an orphan)."""
    from coreburst.burst.reconcile import BurstReconcileConfig

    (bounds,) = [
        m for m in BurstReconcileConfig.model_fields["orphan_timeout"].metadata if hasattr(m, "min")
    ]
    assert bounds.min.total_seconds() > ec2io.TAG_DEADLINE_MAX_S
    assert ec2io.deadline("tags", 100_000, 100_000) == ec2io.TAG_DEADLINE_MAX_S


# -- issue 33 item 6: deadlines that fit Slurm's ------------------------------------------
def test_each_program_gets_a_share_of_its_slurm_limit_and_per_try_timeouts() -> None:
    r = ec2io.budget("resume", 1800, 120)
    s = ec2io.budget("suspend", 1800, 120)
    assert (r.total_s, r.connect_s, r.read_s) == (900, 10, 60)
    assert (s.total_s, s.connect_s, s.read_s) == (96, 9.6, 32)
    assert ec2io.budget("resume-fail", 1800, 120) == s
    # Worst case, the last try still fits: total = deadline, one try = connect + read.
    cfg = ec2io.client_config(limits=s)
    assert (cfg.connect_timeout, cfg.read_timeout) == (9.6, 32)


def test_a_spent_deadline_sends_no_try_and_says_why_in_one_line() -> None:
    """Nothing listens on port 1: had the try been sent, the error would be a connection
    error, not the deadline."""
    ec2 = _client("http://127.0.0.1:1", ec2io.client_config())
    limits = ec2io.budget("suspend", 1800, 120)
    d = ec2io.Deadline(limits, started_s_ago=limits.total_s)
    assert d.install(ec2) is ec2
    with pytest.raises(ec2io.DeadlineExceeded) as err:
        ec2.describe_instances()
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("EC2 (127.0.0.1:1) gave no answer within")
    assert "deadline of 96 s (80% of SuspendTimeout=120 s; 9.6 s to connect" in msg
    assert d.tries == 0 and d.spent == msg
    assert ec2io.process_age_s() > 0  # this test process started before now
