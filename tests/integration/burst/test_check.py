"""``coreburst burst check`` against moto server on 127.0.0.1, behind the loopback proxy of
coreburst/sandbox/checkproxy.py where moto has no answer (DryRun, GetServiceQuota for EC2 codes,
SimulatePrincipalPolicy; each answered as the AWS document the proxy cites). The account is
what ``pulumi up`` leaves (tests/helpers/burst_check.py); each test breaks one thing and reads
the line a user would read, its fix and the exit status."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from coreburst.burst.cli import app
from coreburst.burst.config import load_burst_stack, load_stack_map
from coreburst.sandbox.checkproxy import CheckProxy
from coreburst.sandbox.emulator import AMI, MotoProcess
from tests.helpers.burst import stack_map, with_on_prem, write_stack
from tests.helpers.burst_check import World, client, seed

REPO = Path(__file__).resolve().parents[3]
# Enough for Pulumi.burst.yaml's pools at full size: 4 p5.48xlarge (192 vCPUs) on each market.
QUOTAS = {"L-417A185B": 768.0, "L-7212CCBC": 768.0}
runner = CliRunner()


@pytest.fixture(scope="module")
def moto_server() -> Iterator[MotoProcess]:
    m = MotoProcess().start()
    try:
        yield m
    finally:
        m.stop()


@pytest.fixture(scope="module")
def proxy_server(moto_server: MotoProcess) -> Iterator[CheckProxy]:
    p = CheckProxy(moto_server.url).start()
    try:
        yield p
    finally:
        p.stop()


@pytest.fixture
def proxy(
    moto_server: MotoProcess, proxy_server: CheckProxy, monkeypatch: pytest.MonkeyPatch
) -> CheckProxy:
    moto_server.reset()
    proxy_server.configure(quotas=QUOTAS)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy_server.url)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    return proxy_server


def check(stack_dir: Path, stack: str, *args: str) -> Any:
    return runner.invoke(
        app, ["check", "--stack", stack, "--stack-dir", str(stack_dir), "--skip", "slurm", *args]
    )


def burst_world(proxy: CheckProxy) -> World:
    """What ``pulumi up`` of Pulumi.burst.yaml leaves: it deploys no guardrails, so no
    spot-event queue or rules."""
    return seed(proxy.upstream, load_burst_stack("burst", REPO), spot_events=False)


def burst_with_guardrails(proxy: CheckProxy, root: Path) -> World:
    """Pulumi.burst.yaml with ``coreburst:guardrails.enabled`` (every rule, the spot one
    among them), written under ``root``, and what its ``pulumi up`` leaves."""
    cfg = load_stack_map("burst", REPO)
    cfg["coreburst:guardrails"] = {"enabled": True}
    write_stack(root, "burst", cfg)
    return seed(proxy.upstream, load_burst_stack("burst", root))


def lines(out: str, mark: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith(mark)]


def test_the_burst_example_stack_where_everything_holds_is_all_ticks(proxy: CheckProxy) -> None:
    burst_world(proxy)
    r = check(REPO, "burst")
    assert r.exit_code == 0, r.output
    body = r.output.splitlines()[:-1]
    assert body and all(line.startswith("✔ ") for line in body), r.output
    for what in (
        "offering        od: p5.48xlarge in us-east-1a: offered",
        "quota           Running On-Demand P instances (od): 768 vCPUs >= 768 needed "
        "(service-quotas:GetServiceQuota ec2/L-417A185B)",
        "quota           All P Spot Instance Requests (sp): 768 vCPUs >= 768 needed",
        "dry-run         sp: CreateFleet DryRun: allowed (DryRunOperation)",
        "permission      ec2:TerminateInstances",
    ):
        assert what in r.output
    assert "spot-events" not in r.output  # the stack declares none
    assert r.output.splitlines()[-1].endswith(f"0 ✘, 0 ? of {len(body)} checks")


def test_a_stack_with_guardrails_checks_its_spot_events(proxy: CheckProxy, tmp_path: Path) -> None:
    burst_with_guardrails(proxy, tmp_path)
    r = check(tmp_path, "burst")
    assert r.exit_code == 0, r.output
    assert [line.split(":")[0] for line in r.output.splitlines() if "spot-events" in line] == [
        "✔ spot-events     rule for 'EC2 Spot Instance Interruption Warning'",
        "✔ spot-events     rule for 'EC2 Instance Rebalance Recommendation'",
        "✔ spot-events     queue guardrails-spot-events-4f2a9c1",
    ]


def test_a_type_not_offered_in_a_zone_names_the_zones_it_is_offered_in(
    proxy: CheckProxy, tmp_path: Path
) -> None:
    # moto's offerings data (from EC2): p5en.48xlarge in us-east-1a and us-east-1c only.
    cfg = with_on_prem(
        stack_map(
            [
                {
                    "name": "sp",
                    "instanceType": "p5en.48xlarge",
                    "zones": ["us-east-1a", "us-east-1b"],
                    "nodes": 2,
                    "capacity": {"model": "on-demand"},
                }
            ],
            {"coreNodes": "dgx[01-02]"},
        )
    )
    cfg["coreburst:vpc"] = {
        "extraZones": [{"availabilityZone": "us-east-1b", "privateSubnetCidr": "10.64.64.0/18"}]
    }
    write_stack(tmp_path, "zones", cfg)
    seed(proxy.upstream, load_burst_stack("zones", tmp_path))
    r = check(tmp_path, "zones")
    assert r.exit_code == 1
    assert "✔ offering        sp: p5en.48xlarge in us-east-1a: offered" in r.output
    assert (
        "✘ offering        sp: p5en.48xlarge in us-east-1b: p5en.48xlarge is not offered in "
        "us-east-1b (ec2:DescribeInstanceTypeOfferings); fix: set the pool's zones to where it is "
        "(us-east-1a, us-east-1c) or drop p5en.48xlarge from its instance types"
    ) in r.output
    assert len(lines(r.output, "✘")) == 1, r.output


def test_a_new_account_with_no_p_quota_gets_the_increase_command(proxy: CheckProxy) -> None:
    burst_world(proxy)
    proxy.configure(quotas={"L-417A185B": 0, "L-7212CCBC": 768})
    r = check(REPO, "burst")
    assert r.exit_code == 1
    assert lines(r.output, "✘") == [
        "✘ quota           Running On-Demand P instances (od): 0 vCPUs < 768 the pools need at "
        "full size (service-quotas:GetServiceQuota ec2/L-417A185B); fix: aws service-quotas "
        "request-service-quota-increase --service-code ec2 --quota-code L-417A185B "
        "--desired-value 768 --region us-east-1"
    ]


def test_a_deleted_launch_template(proxy: CheckProxy) -> None:
    w = burst_world(proxy)
    client("ec2", proxy.upstream).delete_launch_template(LaunchTemplateId=w.templates["od"])
    r = check(REPO, "burst")
    assert r.exit_code == 1
    assert lines(r.output, "✘") == [
        "✘ launch-template od: no launch template od-lt-* tagged coreburst-stack=burst "
        "(ec2:DescribeLaunchTemplates); fix: pulumi up --stack burst declares it "
        "(infra/components/gpu_cluster.py)"
    ]


def test_a_template_whose_ami_was_deregistered(proxy: CheckProxy) -> None:
    w = burst_world(proxy)
    ec2 = client("ec2", proxy.upstream)
    v1 = ec2.describe_launch_template_versions(LaunchTemplateId=w.templates["sp"])
    data = v1["LaunchTemplateVersions"][0]["LaunchTemplateData"]
    ec2.create_launch_template_version(
        LaunchTemplateId=w.templates["sp"],
        LaunchTemplateData={**data, "ImageId": "ami-0123456789abcdef0"},
    )
    r = check(REPO, "burst")
    assert r.exit_code == 1
    bad = lines(r.output, "✘")
    assert len(bad) == 1 and bad[0].startswith(
        f"✘ ami             sp: image of {w.templates['sp']}: ami-0123456789abcdef0 does not exist"
    ), r.output
    assert "must name an available AMI" in bad[0]


def test_an_image_named_by_ssm_parameter_is_resolved_as_ec2_would(proxy: CheckProxy) -> None:
    w = burst_world(proxy)
    ec2 = client("ec2", proxy.upstream)
    ssm = client("ssm", proxy.upstream)
    ssm.put_parameter(Name="/coreburst/test/gpu-ami", Value=AMI, Type="String")
    v1 = ec2.describe_launch_template_versions(LaunchTemplateId=w.templates["od"])
    data = v1["LaunchTemplateVersions"][0]["LaunchTemplateData"]
    ec2.create_launch_template_version(
        LaunchTemplateId=w.templates["od"],
        LaunchTemplateData={**data, "ImageId": "resolve:ssm:/coreburst/test/gpu-ami"},
    )
    r = check(REPO, "burst")
    assert r.exit_code == 0, r.output
    assert f"✔ ami             od: image of {w.templates['od']}: {AMI} available" in r.output
    ssm.delete_parameter(Name="/coreburst/test/gpu-ami")
    r = check(REPO, "burst")
    assert r.exit_code == 1
    assert lines(r.output, "✘")[0].startswith(
        f"✘ ami             od: image of {w.templates['od']}: parameter /coreburst/test/gpu-ami: "
        "ParameterNotFound (ssm:GetParameter)"
    )


def test_a_zone_whose_subnet_lost_its_tag(proxy: CheckProxy, tmp_path: Path) -> None:
    cfg = with_on_prem(
        stack_map(
            [
                {
                    "name": "od",
                    "instanceType": "p5.48xlarge",
                    "zones": ["us-east-1a", "us-east-1b"],
                    "nodes": 2,
                    "capacity": {"model": "on-demand"},
                }
            ],
            {"coreNodes": "dgx[01-02]"},
        )
    )
    cfg["coreburst:vpc"] = {
        "extraZones": [{"availabilityZone": "us-east-1b", "privateSubnetCidr": "10.64.64.0/18"}]
    }
    write_stack(tmp_path, "zones", cfg)
    w = seed(proxy.upstream, load_burst_stack("zones", tmp_path))
    client("ec2", proxy.upstream).delete_tags(
        Resources=[w.subnets["us-east-1b"]], Tags=[{"Key": "coreburst-subnet"}]
    )
    r = check(tmp_path, "zones")
    assert r.exit_code == 1
    assert (
        f"✔ subnet          od: us-east-1a: {w.subnets['us-east-1a']} (tagged private)" in r.output
    )
    assert lines(r.output, "✘") == [
        "✘ subnet          od: us-east-1b: no subnet in us-east-1b tagged coreburst-stack=zones, "
        "coreburst-subnet=private (ec2:DescribeSubnets); fix: the stack's private subnet in each "
        "zone carries coreburst-stack=zones and coreburst-subnet=private "
        "(infra/components/network.py); pulumi up --stack zones declares one per zone of the pools"
    ]


def test_createfleet_refused_by_real_ec2s_reading_of_the_policy(proxy: CheckProxy) -> None:
    burst_world(proxy)
    proxy.configure(quotas=QUOTAS, refused={"ec2:CreateFleet"})
    r = check(REPO, "burst")
    assert r.exit_code == 1
    bad = lines(r.output, "✘")
    assert [b.split(":")[0] for b in bad] == ["✘ dry-run         od", "✘ dry-run         sp"]
    assert bad[0] == (
        "✘ dry-run         od: CreateFleet DryRun: refused (UnauthorizedOperation) "
        "(ec2:CreateFleet); fix: attach `coreburst burst iam-policy --stack burst --account <id>` "
        "to the controller's credentials; `aws sts decode-authorization-message` reads the reason"
    )


def test_terminate_denied_by_the_simulated_policy(proxy: CheckProxy) -> None:
    burst_world(proxy)
    proxy.configure(quotas=QUOTAS, refused={"ec2:TerminateInstances"})
    r = check(REPO, "burst")
    assert r.exit_code == 1
    assert lines(r.output, "✘") == [
        "✘ permission      ec2:TerminateInstances on instance/i-00000000000000000: implicitDeny "
        "for arn:aws:sts::123456789012:user/moto (iam:SimulatePrincipalPolicy); fix: attach "
        "`coreburst burst iam-policy --stack burst --account 123456789012` to "
        "arn:aws:sts::123456789012:user/moto"
    ]


def test_a_missing_spot_rule_and_queue(proxy: CheckProxy, tmp_path: Path) -> None:
    w = burst_with_guardrails(proxy, tmp_path)
    events = client("events", proxy.upstream)
    events.remove_targets(Rule=w.rules["rebalance"], Ids=["queue"])
    events.delete_rule(Name=w.rules["rebalance"])
    r = check(tmp_path, "burst")
    assert r.exit_code == 1
    assert lines(r.output, "✘") == [
        "✘ spot-events     rule for 'EC2 Instance Rebalance Recommendation': no EventBridge rule "
        "matches it (events:ListRules); fix: set coreburst:guardrails.enabled: true in the stack "
        "and pulumi up (it declares both rules and the queue guardrails-spot-events)"
    ]
    client("sqs", proxy.upstream).delete_queue(QueueUrl=w.queue_url)
    r = check(tmp_path, "burst")
    assert (
        "✘ spot-events     queue guardrails-spot-events-4f2a9c1: the rules' target does not exist"
        in r.output
    )


def test_credentials_that_may_not_ask_are_unknown_and_fail_only_under_strict(
    proxy: CheckProxy,
) -> None:
    burst_world(proxy)
    proxy.configure(quotas=QUOTAS, denied={"servicequotas:GetServiceQuota"})
    r = check(REPO, "burst")
    assert r.exit_code == 0, r.output
    unknown = lines(r.output, "?")
    assert unknown == [
        "? quota           Running On-Demand P instances (od): these credentials may not ask "
        "(AccessDeniedException) (service-quotas:GetServiceQuota ec2/L-417A185B); fix: grant "
        "servicequotas:GetServiceQuota to the credentials that run the check",
        "? quota           All P Spot Instance Requests (sp): these credentials may not ask "
        "(AccessDeniedException) (service-quotas:GetServiceQuota ec2/L-7212CCBC); fix: grant "
        "servicequotas:GetServiceQuota to the credentials that run the check",
    ]
    strict = check(REPO, "burst", "--strict", "--format", "json")
    assert strict.exit_code == 1
    doc = json.loads(strict.output)
    assert doc["ok"] is False and doc["stack"] == "burst"
    quota = [c for c in doc["checks"] if c["check"] == "quota"]
    assert {c["status"] for c in quota} == {"unknown"} and {c["mark"] for c in quota} == {"?"}
    assert (
        quota[0]["fix"]
        == "grant servicequotas:GetServiceQuota to the credentials that run the check"
    )


def test_a_principal_named_for_ci_is_simulated_and_no_dry_run_is_sent(proxy: CheckProxy) -> None:
    burst_world(proxy)
    role = "arn:aws:iam::123456789012:role/burst-controller"
    r = check(REPO, "burst", "--principal", role)
    assert r.exit_code == 0, r.output
    assert "dry-run" not in r.output
    assert proxy.calls["ec2:CreateFleet"] == 0 and proxy.calls["ec2:RunInstances"] == 0
    assert "✔ permission      iam:PassRole on role/od-node-role-0000000: allowed" in r.output


def test_no_endpoint_is_one_unknown_line_not_a_traceback(
    proxy: CheckProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # discard: nothing listens
    r = check(REPO, "burst", "--strict")
    assert r.exit_code == 1
    assert r.output.splitlines()[0].startswith(
        "? identity        credentials: no answer (EndpointConnectionError"
    )
    assert len(r.output.splitlines()) == 2 and "Traceback" not in r.output
