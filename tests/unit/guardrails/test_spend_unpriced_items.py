"""The spend rule reports every item it cannot price as unpriced (issue 23, item 5): a Lustre
file system or Direct Connect port the catalog has no price for is counted apart by what it is,
in the cycle report, the Slack alert and ``status`` -- never $0 and never silently skipped, as
``coreburst plan`` refuses to total it.

FSx DescribeFileSystems and Direct Connect DescribeConnections answer from moto in-process (the
shapes of botocore's service models); the daemon is the real one with an injected clock.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws
from typer.testing import CliRunner

from coreburst.common.catalog import load_catalog
from coreburst.sandbox.clocks import FakeClock
from coreburst.sandbox.emulator import fake_session
from guardrails.adapters.aws import Aws
from guardrails.cli import app
from guardrails.configfile import parse_config
from guardrails.daemon import Daemon
from guardrails.stores.sqlite import State

CAT = load_catalog()


def _config(tmp_path: Path) -> str:
    return f"""
regions: [us-east-1]
dry_run: true
idle: {{window: 10m, max_gap: 2m}}
safety: {{kill_switch_file: null}}
spend:
  cost_explorer: false
  include_lustre: true
  spot_price: catalog-estimate
  scopes:
    - {{name: ml, tag_key: team, tag_value: ml, daily_limit_usd: 0.01}}
egress: {{enabled: false}}
state: {{path: "{tmp_path}/s.db", audit_log: "{tmp_path}/a.jsonl"}}
metrics_endpoint: {{enabled: false}}
"""


@pytest.fixture
def cycle(tmp_path: Path) -> Iterator[Any]:
    with mock_aws():
        ec2 = boto3.client("ec2", region_name="us-east-1")
        vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
        subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.0.0/24")["Subnet"]["SubnetId"]
        fsx = boto3.client("fsx", region_name="us-east-1")
        team = [{"Key": "team", "Value": "ml"}]
        for deployment, throughput in (("PERSISTENT_2", 125), ("PERSISTENT_1", 50)):
            # PERSISTENT_1 at 50 MB/s/TiB: a real FSx for Lustre option the catalog lacks
            fsx.create_file_system(
                FileSystemType="LUSTRE",
                StorageCapacity=2400,
                SubnetIds=[subnet],
                LustreConfiguration={
                    "DeploymentType": deployment,
                    "PerUnitStorageThroughput": throughput,
                },
                Tags=team,
            )
        dx = boto3.client("directconnect", region_name="us-east-1")
        for bandwidth in ("10Gbps", "25Gbps"):  # 25Gbps: a hosted-connection speed, no price
            dx.create_connection(
                location="EqDC2",
                bandwidth=bandwidth,
                connectionName=f"dc-{bandwidth}",
                tags=[{"key": "team", "value": "ml"}],
            )
        text = _config(tmp_path)
        (tmp_path / "g.yaml").write_text(text)
        cfg = parse_config(text, "g.yaml")
        state = State(cfg.state.path)
        aws = Aws(cfg.aws, session=fake_session())
        d = Daemon(cfg, aws, state, clock=FakeClock(datetime.now(UTC) + timedelta(hours=1)))
        try:
            yield d.run_cycle(), state, tmp_path / "g.yaml"
        finally:
            d.close()
            state.close()


LUSTRE = "FSx for Lustre PERSISTENT_1, 50 MB/s/TiB (2400 GiB)"
DX = "Direct Connect port 25Gbps"


def test_unpriced_lustre_and_dx_are_counted_apart(cycle: Any) -> None:
    report, _, _ = cycle
    ml = report.spend["ml"]
    assert "fsx" not in " ".join(report.errors) and "directconnect" not in " ".join(report.errors)
    priced = 2400 * CAT.lustre_price("PERSISTENT_2", 125) / CAT.hours_per_month + CAT.dx_port_price(
        "10Gbps"
    )
    # only what has a price is in the burn; the rest is named, not $0
    assert ml["burn_usd_per_hour"] == pytest.approx(priced)
    assert ml["unpriced"] == {DX: 1, LUSTRE: 1}
    assert ml["unpriced_items"] == 2
    assert ml["unpriced_instances"] == 0


def _alerts(state: State) -> dict[str, tuple[str, str]]:
    out = {}
    for r in state.outbox_rows():
        blocks = json.loads(r["payload"]).get("blocks")
        if blocks:
            out[r["dedupe_key"]] = (blocks[0]["text"]["text"], blocks[1]["text"]["text"])
    return out


def test_slack_says_what_is_unpriced(cycle: Any) -> None:
    _, state, _ = cycle
    alerts = _alerts(state)
    (title, body), *_ = [v for k, v in alerts.items() if k.startswith("unpriced:ml:")]
    assert title == "Spend ml: 2 item(s) without a price"
    assert f"1 {LUSTRE}" in body and f"1 {DX}" in body
    threshold = [v for k, v in alerts.items() if k.startswith("spend:ml:daily")]
    assert threshold, alerts.keys()
    assert "excluding 2 unpriced item(s)" in threshold[0][1]


def test_status_lists_them(cycle: Any) -> None:
    _, _, path = cycle
    r = CliRunner().invoke(app, ["status", "--config", str(path)], env={"COLUMNS": "400"})
    assert r.exit_code == 0, r.output
    line = next(x for x in r.output.splitlines() if "excludes" in x)
    assert f"excludes 2 unpriced item(s): 1 {DX}, 1 {LUSTRE}" in line
