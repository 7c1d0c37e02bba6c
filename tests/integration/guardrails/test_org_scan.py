"""A three-account organization scanned on the emulator (moto server, real HTTP), with one
account's role denied: the other two are scanned, the denied one is reported."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto.server import ThreadedMotoServer

from guardrails.aws import inventory
from guardrails.org import AccountTarget, assume_role_session, discover_accounts, scan
from infra.catalog import load_catalog

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    yield f"http://127.0.0.1:{port}"
    server.stop()


def _client(service: str, endpoint: str, session: boto3.session.Session | None = None) -> Any:
    return (session or boto3.session.Session()).client(
        service, region_name="us-east-1", endpoint_url=endpoint
    )


def test_three_accounts_one_denied(endpoint: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    org = _client("organizations", endpoint)
    org.create_organization(FeatureSet="ALL")
    for name in ("research", "prod", "sandbox"):
        org.create_account(Email=f"{name}@example.com", AccountName=name)
    home = _client("sts", endpoint).get_caller_identity()["Account"]
    members = ("research", "prod", "sandbox")
    discovered = discover_accounts(org, "coreburst-guardrails", home)
    assert any(t.role_arn is None for t in discovered)  # the home account: own credentials
    targets = [t for t in discovered if t.name in members]
    assert len(targets) == 3
    by_name = {t.name: t for t in targets}
    denied = by_name["sandbox"]

    sts = _client("sts", endpoint)

    def session_for(t: AccountTarget) -> boto3.session.Session:
        if t.account_id == denied.account_id:
            # The emulator does not evaluate trust policies; this is what AWS answers when the
            # member account's role does not trust the daemon.
            raise ClientError(
                {"Error": {"Code": "AccessDenied", "Message": "not authorized to assume"}},
                "AssumeRole",
            )
        return assume_role_session(sts, t)

    # Two p5 nodes in research, one in prod: launched with each account's assumed role.
    for name, count in (("research", 2), ("prod", 1)):
        ec2 = _client("ec2", endpoint, session_for(by_name[name]))
        ec2.run_instances(
            ImageId="ami-12c6146b", InstanceType="p5.48xlarge", MinCount=count, MaxCount=count
        )

    cat = load_catalog()

    def scan_one(sess: boto3.session.Session, t: AccountTarget, region: str) -> list[Any]:
        ec2 = sess.client("ec2", region_name=region, endpoint_url=endpoint)
        return inventory(ec2, region, ["p5.48xlarge", "trn2.48xlarge"], cat)

    results = scan(targets, ["us-east-1", "us-east-2"], session_for, scan_one, max_workers=3)
    assert len(results) == 6
    found = {(r.account_id, r.region): len(r.items) for r in results if r.ok}
    assert found == {
        (by_name["research"].account_id, "us-east-1"): 2,
        (by_name["research"].account_id, "us-east-2"): 0,
        (by_name["prod"].account_id, "us-east-1"): 1,
        (by_name["prod"].account_id, "us-east-2"): 0,
    }
    failed = [r for r in results if not r.ok]
    assert {r.account_id for r in failed} == {denied.account_id}
    assert all("AccessDenied" in (r.error or "") for r in failed)


def test_bound_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_workers"):
        scan([], ["us-east-1"], lambda t: boto3.session.Session(), lambda s, t, r: [], 0)
