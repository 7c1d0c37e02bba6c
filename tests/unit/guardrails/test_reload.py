"""`guardrails run` re-reads its config file between cycles and keeps the last good one."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from coreburst.sandbox.clocks import OffsetClock
from guardrails import cli
from guardrails.cli import app
from guardrails.daemon import CycleReport, Daemon


def test_bad_edit_keeps_last_good_config_and_good_edit_applies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `run` checks for credentials before writing anything; the cycles here are stand-ins.
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    cfg = tmp_path / "g.yaml"
    base = (
        f'state: {{path: "{tmp_path}/s.db", audit_log: "{tmp_path}/a.jsonl"}}\n'
        "metrics_endpoint: {enabled: false}\ninterval: 10s\n"
    )
    # 10 s (the shortest interval allowed) run 100x faster on an injected clock.
    monkeypatch.setattr(
        cli.runtime, "clock", OffsetClock(datetime(2026, 1, 5, 10, tzinfo=UTC), speed=100)
    )
    cfg.write_text(base + "dry_run: true\nidle: {threshold_percent: 5}\n")
    edits = [
        base + "dry_run: false\nidle: {threshold_percent: 500}\n",  # invalid: > 100
        base + "dry_run: false\nidle: {threshold_percent: 7}\n",
    ]
    seen: list[tuple[bool, float]] = []

    def cycle(self: Daemon) -> CycleReport:
        seen.append((self.cfg.dry_run, self.cfg.idle.threshold_percent))
        if edits:
            cfg.write_text(edits.pop(0))
            st = cfg.stat()
            os.utime(cfg, ns=(st.st_atime_ns, st.st_mtime_ns + len(seen) * 10**9))
        return CycleReport(self.clock.now())

    monkeypatch.setattr(Daemon, "run_cycle", cycle)
    result: Any = CliRunner().invoke(
        app, ["run", "--config", str(cfg), "--max-cycles", "3", "--log-level", "warning"]
    )
    assert result.exit_code == 0, result.output
    # cycle 1: original; cycle 2: the invalid edit is rejected, original kept; cycle 3: applied
    assert seen == [(True, 5.0), (True, 5.0), (False, 7.0)]
    assert "config.rejected" in result.output and "threshold_percent" in result.output


def test_a_reload_rebuilds_what_the_config_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``Daemon.reload`` takes effect in the next cycle in the parts built from the config, not
    only in ``d.cfg``: the actuator (dry-run, per-cycle cap, kill switch), the outbox (Slack
    settings and webhook), the AWS clients (regions). Against moto (in-process) and a webhook
    receiver on loopback; spend enforcement terminates spot instances over a $0.01 daily limit.
    """
    import boto3
    from moto import mock_aws

    from coreburst.sandbox.clocks import FakeClock
    from coreburst.sandbox.emulator import WebhookReceiver, launch
    from guardrails.adapters.aws import Aws
    from guardrails.configfile import parse_config
    from guardrails.stores.sqlite import State

    for var in ("AWS_ENDPOINT_URL", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")

    def config(dry_run: bool, cap: int, regions: str, extra: str = "") -> Any:
        return parse_config(
            f"""
regions: {regions}
dry_run: {str(dry_run).lower()}
instance_types: [p5.48xlarge]
reclaim: {{enabled: false}}
safety: {{max_actions_per_cycle: {cap}, kill_switch_file: null,
          kill_switch_env: COREBURST_RELOAD_TEST_STOP}}
spend: {{cost_explorer: false, include_lustre: false, direct_connect_ports: [],
         spot_price: catalog-estimate,
         scopes: [{{name: account, daily_limit_usd: 0.01, enforce: true}}]}}
egress: {{enabled: false}}
state: {{path: "{tmp_path}/s.db", audit_log: "{tmp_path}/a.jsonl"}}
metrics_endpoint: {{enabled: false}}
{extra}
""",
            "g.yaml",
        )

    hook = WebhookReceiver().start()
    with mock_aws():
        east = boto3.client("ec2", region_name="us-east-1")
        west = boto3.client("ec2", region_name="us-west-2")
        east_ids = launch(east, "p5.48xlarge", {"owner": "a"}, count=2, spot=True)
        (west_id,) = launch(west, "p5.48xlarge", {"owner": "b"}, spot=True)

        def running() -> set[str]:
            out = set()
            for ec2 in (east, west):
                for res in ec2.describe_instances()["Reservations"]:
                    for i in res["Instances"]:
                        if i["State"]["Name"] == "running":
                            out.add(i["InstanceId"])
            return out

        cfg = config(True, 1, "[us-east-1]")
        clock = FakeClock(datetime(2026, 1, 5, 10, tzinfo=UTC))
        state = State(cfg.state.path)
        d = Daemon(cfg, Aws(cfg.aws), state, clock=clock, owner_id="reload-test")
        try:
            d.run_cycle()
            clock.advance(timedelta(minutes=10))
            r = d.run_cycle()  # over the limit, but dry-run and no webhook
            assert r.nodes == 2 and r.actions == [] and r.spend["account"]["today_usd"] > 0.01
            assert hook.posts == [] and state.outbox_depth() > 0
            first_aws = d.aws

            d.reload(config(False, 1, "[us-east-1]", "slack: {timeout_s: 2}"), webhook_url=hook.url)
            assert d.aws is first_aws  # aws and regions unchanged: the clients are kept
            clock.advance(timedelta(minutes=1))
            r = d.run_cycle()  # acting now, one action per cycle; the outbox sends
            assert len(r.actions) == 1 and len(running() & set(east_ids)) == 1
            assert d.outbox.cfg.timeout_s == 2 and hook.posts

            left = {west_id, *(running() & set(east_ids))}  # the cap held one back
            monkeypatch.setenv("COREBURST_RELOAD_TEST_STOP", "1")
            d.reload(config(False, 10, "[us-east-1, us-west-2]"))
            assert d.aws is not first_aws
            clock.advance(timedelta(minutes=1))
            r = d.run_cycle()  # the new kill-switch variable is engaged: observe only
            assert r.nodes == 2 and r.actions == []  # both regions seen (1 + 1), nothing done
            assert any(p["text"].startswith("Guardrails kill switch engaged") for p in hook.posts)

            monkeypatch.delenv("COREBURST_RELOAD_TEST_STOP")
            clock.advance(timedelta(minutes=1))
            r = d.run_cycle()  # the new cap (10) and region: the rest go
            assert sorted(r.actions) == sorted(f"enforce-spot {i}" for i in left)
            assert running() & {west_id, *east_ids} == set()
        finally:
            d.close()
            state.close()
            hook.stop()
