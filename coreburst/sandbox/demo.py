"""A self-contained demo on loopback: moto server + Slack-compatible receiver + the daemon on
an accelerated clock, so idle nodes go mark → reclaim in a few cycles. Finishes in < 60 s.

$ python -m guardrails demo
"""

from __future__ import annotations

import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from coreburst.common.catalog import load_catalog
from coreburst.common.telemetry import UTILIZATION_METRICS
from coreburst.sandbox.clocks import FakeClock
from coreburst.sandbox.emulator import (
    FleetNode,
    MotoProcess,
    WebhookReceiver,
    ce_result,
    fake_session,
    launch,
    launch_asg,
    publish,
)
from guardrails.adapters.aws import Aws
from guardrails.configfile import parse_config
from guardrails.daemon import Daemon
from guardrails.spend import day_start, month_start
from guardrails.stores.sqlite import State

STEP = timedelta(minutes=10)


def metric_defs() -> dict[str, tuple[str, str, str]]:
    return {
        k: (m.namespace, m.metric_name, m.device_dimension) for k, m in UTILIZATION_METRICS.items()
    }


def demo_config(endpoint: str, workdir: Path) -> str:
    return f"""
regions: [us-east-1, us-east-2]
dry_run: false  # the demo shows the daemon acting (against moto)
interval: 10m
aws: {{endpoint_url: "{endpoint}", max_attempts: 2, connect_timeout_s: 2}}
# report_partial_idle: the demo shows the "1 of 8 devices idle" note on a busy node (off by
# default: a third metric per node and read)
idle: {{window: 30m, max_gap: 5m, report_partial_idle: true}}
reclaim:
  grace: 20m
  protected: {{tag_selectors: [{{key: "coreburst:protected", values: ["true"]}}]}}
safety: {{max_actions_per_cycle: 5, kill_switch_file: "{workdir}/stop"}}
spend:
  # moto's spot price history is a placeholder (0.00001): use the catalog estimate here.
  spot_price: catalog-estimate
  include_lustre: true
  direct_connect_ports: [{{bandwidth: 10Gbps, count: 2}}]
  scopes:
    - {{name: account, daily_limit_usd: 6000, monthly_limit_usd: 60000}}
    - {{name: team-ml, tag_key: team, tag_value: ml, daily_limit_usd: 2500}}
# every: the demo's cycles are 10 min apart, so each one reads egress (default 15m)
egress: {{window: 30m, daily_threshold_usd: 2000, spike_factor: 3, min_baseline_samples: 2,
          include_nat: false, every: 10m}}
slack: {{cooldown: 30m, backoff_base: 1s}}
state: {{path: "{workdir}/state.sqlite", audit_log: "{workdir}/audit.jsonl"}}
metrics_endpoint: {{enabled: false}}
"""


def instance_info(aws: Aws, where: dict[str, str | None]) -> dict[str, tuple[str, str]]:
    """instance id -> (type, market) from EC2 (the emulator) for the actions' instances."""
    out: dict[str, tuple[str, str]] = {}
    by_region: dict[str, list[str]] = {}
    for iid, region in where.items():
        if region and iid.startswith("i-"):
            by_region.setdefault(region, []).append(iid)
    for region, ids in by_region.items():
        resp = aws.client("ec2", region).describe_instances(InstanceIds=ids)
        for r in resp["Reservations"]:
            for i in r["Instances"]:
                market = "spot" if i.get("InstanceLifecycle") == "spot" else "on-demand"
                out[i["InstanceId"]] = (i["InstanceType"], f"{region}/{market}")
    return out


def savings(
    actions: list[dict[str, Any]], info: dict[str, tuple[str, str]], catalog: Any
) -> tuple[list[tuple[str, str, str, str, str, str]], float, int]:
    """Rows (action, instance, type, region/market, status, $/h) for the demo's summary, the
    $/h the done actions stop, and how many could not be priced (shown, never counted as 0).

    >>> from coreburst.common.catalog import load_catalog
    >>> rows, usd, unpriced = savings(
    ...     [{"kind": "stop", "instance_id": "i-1", "status": "done"}],
    ...     {"i-1": ("p5.48xlarge", "us-east-1/on-demand")}, load_catalog())
    >>> round(usd, 2), unpriced
    (55.04, 0)
    """
    rows = []
    total, unpriced = 0.0, 0
    for a in actions:
        iid = str(a["instance_id"])
        itype, where = info.get(iid, ("-", "-"))
        usd = "-"
        if a["status"] == "done" and a["kind"] in ("stop", "terminate", "scale-in"):
            region, _, market = where.partition("/")
            try:
                rate = float(catalog.hourly_price(itype, region, market))
            except Exception:  # unknown type or price: said so, never $0
                unpriced += 1
                usd = "unpriced"
            else:
                total += rate
                usd = f"{rate:,.2f}"
        rows.append((str(a["kind"]), iid, itype, where, str(a["status"]), usd))
    return rows, total, unpriced


def build_fleet(aws: Aws) -> list[FleetNode]:
    e1, e2 = aws.client("ec2", "us-east-1"), aws.client("ec2", "us-east-2")
    asg = aws.client("autoscaling", "us-east-1")
    nodes: list[FleetNode] = []

    def add(ids: list[str], region: str, kind: str, devices: int, profile: str) -> None:
        nodes.extend(FleetNode(i, region, kind, devices, profile) for i in ids)

    add(
        launch(e1, "p5.48xlarge", {"owner": "alice", "team": "ml", "Name": "alice-exp"}),
        "us-east-1",
        "nvidia",
        8,
        "idle",
    )
    add(
        launch(e1, "p5.48xlarge", {"owner": "bob", "team": "research"}, spot=True),
        "us-east-1",
        "nvidia",
        8,
        "idle",
    )
    add(
        [launch_asg(e1, asg, "burst-p5", "p5.48xlarge", {"owner": "ci", "team": "ml"})],
        "us-east-1",
        "nvidia",
        8,
        "idle",
    )
    add(
        launch(e1, "p5.48xlarge", {"owner": "carol", "team": "ml"}),
        "us-east-1",
        "nvidia",
        8,
        "one-idle",
    )
    add(
        launch(e1, "p5en.48xlarge", {"owner": "dave", "team": "research"}),
        "us-east-1",
        "nvidia",
        8,
        "missing",
    )
    exempt = (datetime.now(UTC) + timedelta(days=3)).date().isoformat()
    add(
        launch(
            e1, "p5.48xlarge", {"owner": "erin", "team": "ml", "coreburst:exempt-until": exempt}
        ),
        "us-east-1",
        "nvidia",
        8,
        "idle",
    )
    add(
        launch(e2, "trn2.48xlarge", {"owner": "frank", "team": "ml"}),
        "us-east-2",
        "neuron",
        64,  # every logical NeuronCore of a trn2.48xlarge at the default LNC=2 (catalog)
        "busy",
    )
    add(
        launch(e2, "trn2.48xlarge", {"owner": "grace", "team": "research"}, spot=True),
        "us-east-2",
        "neuron",
        64,  # every logical NeuronCore of a trn2.48xlarge at the default LNC=2 (catalog)
        "idle",
    )
    aws.client("fsx", "us-east-1").create_file_system(
        FileSystemType="LUSTRE",
        StorageCapacity=4800,
        SubnetIds=[e1.describe_subnets()["Subnets"][0]["SubnetId"]],
        LustreConfiguration={"DeploymentType": "PERSISTENT_2", "PerUnitStorageThroughput": 125},
        Tags=[{"Key": "team", "Value": "ml"}],
    )
    return nodes


def _slack_echo(console: Console) -> Any:
    def echo(payload: dict[str, Any]) -> None:
        title = payload["blocks"][0]["text"]["text"]
        body = payload["blocks"][1]["text"]["text"].split("\n")[0]
        console.print(f"    [magenta]slack ←[/] [bold]{title}[/]  {body[:140]}")

    return echo


def demo(
    cycles: Annotated[int, typer.Option(help="daemon cycles to run (10 simulated min each)")] = 6,
) -> None:
    """Run the guardrails against an emulated fleet on loopback and show what they do."""
    from guardrails.cli import configure_logging

    configure_logging("warning")
    # Not on a terminal (make demo | tee, CI logs): no hard wrap at 80 columns.
    console = Console(soft_wrap=True, width=None if sys.stdout.isatty() else 160)
    t0 = time.monotonic()
    moto = MotoProcess().start()
    hook = WebhookReceiver(echo=_slack_echo(console)).start()
    console.print(
        f"[bold]moto server[/] {moto.url}   [bold]slack receiver[/] 127.0.0.1:"
        f"{hook.server.server_address[1]}"
    )
    try:
        with tempfile.TemporaryDirectory(prefix="coreburst-demo-") as tmp:
            workdir = Path(tmp)
            cfg = parse_config(demo_config(moto.url, workdir), "<demo>")
            clients = Aws(cfg.aws, session=fake_session())
            # Simulated time starts in the past so every datapoint is a plausible one, on a
            # 5-minute boundary: egress is read in whole 5-minute periods, so every run of the
            # demo then sees the spike at the same cycle.
            start = datetime.now(UTC) - timedelta(hours=2)
            clock = FakeClock(
                start.replace(minute=start.minute - start.minute % 5, second=0, microsecond=0)
            )
            now = clock.now()
            ms, ds = month_start(now).date().isoformat(), day_start(now).date().isoformat()
            if ms != ds:  # Cost Explorer actuals for the complete days of this month
                moto.set_cost_and_usage(
                    [
                        ce_result(41_000.0, ms, ds),
                        ce_result(9_000.0, ms, ds),
                        ce_result(900.0, ms, ds, "UsageQuantity"),
                    ]
                )
            fleet = build_fleet(clients)
            console.print(
                f"launched {len(fleet)} nodes (p5/p5en in us-east-1, trn2 in "
                "us-east-2), one Lustre file system, 2x10G Direct Connect"
            )
            cws = {r: clients.client("cloudwatch", r) for r in cfg.regions}
            published_to = now - cfg.idle.window - timedelta(minutes=5)
            state = State(cfg.state.path)
            daemon = Daemon(cfg, clients, state, clock=clock, webhook_url=hook.url)
            spike_id = fleet[3].instance_id
            for c in range(cycles):
                now = clock.now()
                spike = {spike_id: 400.0} if c == 3 else {}
                publish(
                    cws,
                    fleet,
                    published_to,
                    now + timedelta(minutes=1),
                    metric_defs=metric_defs(),
                    spike=spike,
                )
                published_to = now + timedelta(minutes=1)
                console.rule(f"cycle {c + 1}  simulated {now:%H:%M} UTC")
                r = daemon.run_cycle()
                console.print(
                    f"  {r.nodes} nodes: "
                    + ", ".join(f"{k} {v}" for k, v in sorted(r.states.items()))
                )
                for d in r.decisions:
                    if d.step in ("mark", "act", "unmark"):
                        color = {"mark": "yellow", "act": "red", "unmark": "green"}[d.step]
                        console.print(
                            f"  [{color}]{d.step:6}[/] {d.instance_id} ({d.action}): {d.reason}"
                        )
                    elif d.state == "unknown" and c == 0:
                        console.print(f"  [cyan]blind [/] {d.instance_id}: {d.reason}")
                    elif "exempt until" in d.reason and c == 0:
                        console.print(f"  [green]exempt[/] {d.instance_id}: {d.reason}")
                    elif "devices idle" in d.reason and c == 0:
                        console.print(f"  [blue]report[/] {d.instance_id}: {d.reason}")
                s = r.spend.get("account")
                if s:
                    console.print(
                        f"  spend account ${s['burn_usd_per_hour']:,.2f}/h, today "
                        f"${s['today_usd']:,.0f}, MTD ${s['month_to_date_usd']:,.0f}, "
                        f"projected month ${s['projected_month_usd']:,.0f}"
                    )
                if r.egress:
                    console.print(
                        f"  egress projected ${r.egress['projected_day_usd']:,.2f}"
                        "/day" + (f" — {r.egress['alert']}" if r.egress["alert"] else "")
                    )
                for e in r.errors:
                    console.print(f"  [yellow]error[/] {e}")
                clock.advance(STEP)
            daemon.outbox.flush()
            console.rule("summary")
            acts = [dict(a) for a in state.actions()]
            region_of = {n.instance_id: n.region for n in fleet}
            info = instance_info(
                clients, {a["instance_id"]: region_of.get(a["instance_id"]) for a in acts}
            )
            rows, saved, unpriced = savings(acts, info, load_catalog())
            table = Table("action", "instance", "type", "market", "status", "$/h no longer spent")
            for row in rows:
                table.add_row(*row)
            console.print(table)
            per_hour = f"${saved:,.2f}/h (${saved * 24:,.0f}/day)"
            console.print(
                f"{len(acts)} action(s) done; they stop {per_hour} of GPU spend"
                + (f"; {unpriced} unpriced (not counted as $0)" if unpriced else "")
            )
            console.print(
                f"slack messages delivered: {len(hook.posts)}; outbox pending: "
                f"{state.outbox_depth()}"
            )
            daemon.close()
            state.close()
    finally:
        hook.stop()
        moto.stop()
    console.print(
        f"demo finished in {time.monotonic() - t0:.1f}s; everything it started is stopped"
    )
