"""A three-account organization scanned on the emulator (moto server, real HTTP), with one
account's role denied: the other two are scanned, the denied one is reported."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto.server import ThreadedMotoServer

from coreburst.common.catalog import load_catalog
from coreburst.sandbox.emulator import free_port
from guardrails.adapters.aws import inventory
from guardrails.org import AccountTarget, assume_role_session, discover_accounts, scan

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    port = free_port()
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


# -- `coreburst guardrails org-scan`, the command a user runs -------------------------------------
STS_ACCESS_DENIED = """<ErrorResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
  <Error>
    <Type>Sender</Type>
    <Code>AccessDenied</Code>
    <Message>User: arn:aws:iam::{home}:user/scanner is not authorized to perform: \
sts:AssumeRole on resource: {role}</Message>
  </Error>
  <RequestId>00000000-0000-0000-0000-000000000000</RequestId>
</ErrorResponse>"""


class DenyingProxy:
    """A loopback proxy in front of the emulator that answers STS AssumeRole into one account
    with 403 AccessDenied, as AWS does when the member account's role does not trust the
    caller; moto does not evaluate trust policies. Made up by us, following the STS API
    reference (https://docs.aws.amazon.com/STS/latest/APIReference/API_AssumeRole.html, Errors;
    CommonErrors) for the status and the XML error shape. Everything else is passed through."""

    def __init__(self, upstream: str, denied_account: str, home: str) -> None:
        import threading
        import urllib.error
        import urllib.parse
        import urllib.request
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        outer = self
        self.denied: list[str] = []

        class Handler(BaseHTTPRequestHandler):
            def _forward(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                form = urllib.parse.parse_qs(body.decode(errors="replace"))
                role = (form.get("RoleArn") or [""])[0]
                if form.get("Action") == ["AssumeRole"] and f"::{denied_account}:" in role:
                    outer.denied.append(role)
                    answer = STS_ACCESS_DENIED.format(home=home, role=role).encode()
                    self.send_response(403)
                    self.send_header("Content-Type", "text/xml")
                    self.send_header("Content-Length", str(len(answer)))
                    self.end_headers()
                    self.wfile.write(answer)
                    return
                headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
                req = urllib.request.Request(
                    upstream + self.path, data=body or None, headers=headers, method=self.command
                )
                try:
                    with urllib.request.urlopen(req, timeout=30) as r:
                        status, rh, data = r.status, r.headers, r.read()
                except urllib.error.HTTPError as e:
                    status, rh, data = e.code, e.headers, e.read()
                self.send_response(status)
                for k, v in rh.items():
                    if k.lower() not in ("content-length", "transfer-encoding", "connection"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                self._forward()

            def do_POST(self) -> None:
                self._forward()

            def log_message(self, *args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_org_scan_cli_reports_each_account_and_a_denied_one(
    endpoint: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real command in a subprocess: accounts discovered through Organizations plus one
    listed in config, roles assumed through STS, p5 nodes found per account; the account whose
    role is denied is reported with AccessDenied, the others still scanned; exit 1."""
    import json
    import os
    import subprocess
    import sys

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    org = _client("organizations", endpoint)
    with contextlib.suppress(ClientError):  # the module's server may already have one
        org.create_organization(FeatureSet="ALL")
    ids = {
        name: org.create_account(Email=f"{name}@example.com", AccountName=name)[
            "CreateAccountStatus"
        ]["AccountId"]
        for name in ("cli-research", "cli-prod", "cli-denied")
    }
    home = _client("sts", endpoint).get_caller_identity()["Account"]
    sts = _client("sts", endpoint)
    for name, count in (("cli-research", 2), ("cli-prod", 1)):
        sess = assume_role_session(
            sts, AccountTarget(ids[name], f"arn:aws:iam::{ids[name]}:role/coreburst-scan")
        )
        _client("ec2", endpoint, sess).run_instances(
            ImageId="ami-12c6146b", InstanceType="p5.48xlarge", MinCount=count, MaxCount=count
        )
    proxy = DenyingProxy(endpoint, ids["cli-denied"], home)
    cfg = tmp_path / "g.yaml"
    listed = "123456789099"  # not in the organization: listed in config, scanned all the same
    cfg.write_text(
        f"""
regions: [us-east-1]
aws: {{endpoint_url: "{proxy.url}", max_attempts: 1}}
org: {{role_name: coreburst-scan, discover: true, accounts: ["{listed}"], max_concurrency: 2}}
state: {{path: "{tmp_path}/s.db", audit_log: "{tmp_path}/a.jsonl"}}
metrics_endpoint: {{enabled: false}}
"""
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COREBURST_", "AWS_"))}
    env.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing")
    try:
        r = subprocess.run(
            [sys.executable, "-m", "guardrails", "org-scan", "--config", str(cfg), "--json"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    finally:
        proxy.stop()
    assert r.returncode == 1, r.stderr
    rows = {row["account"]: row for row in map(json.loads, r.stdout.splitlines())}
    assert rows[ids["cli-research"]]["nodes"] == 2 and rows[ids["cli-research"]]["error"] is None
    assert rows[ids["cli-prod"]]["nodes"] == 1 and rows[ids["cli-prod"]]["error"] is None
    # No utilization data published: blind, never called idle; priced from the catalog.
    assert rows[ids["cli-prod"]]["blind"] == 1 and rows[ids["cli-prod"]]["idle"] == 0
    assert rows[ids["cli-prod"]]["usd_per_hour"] > 0
    assert rows[ids["cli-prod"]]["name"] == "cli-prod"
    assert "AccessDenied" in rows[ids["cli-denied"]]["error"]
    assert rows[listed]["error"] is None and rows[listed]["nodes"] == 0
    assert rows[home]["error"] is None  # the home account: its own credentials
    assert proxy.denied == [f"arn:aws:iam::{ids['cli-denied']}:role/coreburst-scan"]
    assert "Traceback" not in r.stderr


def test_org_scan_without_org_config_is_one_line(tmp_path: Any) -> None:
    import subprocess
    import sys

    cfg = tmp_path / "g.yaml"
    cfg.write_text("regions: [us-east-1]\n")
    r = subprocess.run(
        [sys.executable, "-m", "guardrails", "org-scan", "--config", str(cfg)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        "error: org is not set in the config: add org: {accounts: [...]} or {discover: true}"
    ]
