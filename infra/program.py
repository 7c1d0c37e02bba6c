"""The Pulumi program: read and validate stack config, then declare the burst side.

``pulumi up`` runs it through ``infra/__main__.py``; tests and ``coreburst plan`` run it
in-process under Pulumi's mocks.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pulumi
import pulumi_aws as aws

from coreburst.common.catalog import load_catalog
from coreburst.common.names import CLUSTER_TAG_KEY, STACK_TAG_KEY
from infra.components.budget import Budget, BudgetArgs
from infra.components.checkpoint_store import CheckpointStore
from infra.components.gpu_cluster import GpuCluster, GpuClusterArgs, declare_slurm_join
from infra.components.guardrails import SPOT_RULE, Guardrails, GuardrailsArgs
from infra.components.hybrid_link import HybridLink, HybridLinkArgs
from infra.components.lustre import Lustre, LustreArgs
from infra.components.network import Network, NetworkArgs
from infra.components.spot_events import SpotEvents
from infra.components.vpn_link import VpnLink, VpnLinkArgs
from infra.config import StackConfig, StackConfigError, parse_stack_config
from infra.cost import estimate_stack, totals
from infra.lambda_package import DEFAULT_DEST, LambdaPackageError, ensure_lambda_package

NAMESPACE = "coreburst"
# The daemon and its dependencies for the Lambda runtime; main() builds it when missing or
# stale (infra.lambda_package, also `make lambda-package`).
LAMBDA_PACKAGE = DEFAULT_DEST


def read_stack_config() -> dict[str, Any]:
    """Every ``coreburst:*`` key of the current stack, decoded (structured values are JSON),
    plus the region from ``aws:region``."""
    from pulumi.runtime import config as runtime_config

    raw: dict[str, Any] = {}
    merged = {**runtime_config.get_config_env(), **runtime_config.CONFIG.get()}
    for full_key, value in merged.items():
        ns, _, key = full_key.partition(":")
        if ns == NAMESPACE and key:
            try:
                raw[key] = json.loads(value) if isinstance(value, str) else value
            except json.JSONDecodeError:
                raw[key] = value
    region = pulumi.Config("aws").get("region")
    if region and "region" not in raw:
        raw["region"] = region
    return raw


def build(
    cfg: StackConfig, stack: str, lambda_package: Path = LAMBDA_PACKAGE
) -> dict[str, pulumi.Output[Any] | Any]:
    """Declare every resource of the stack; returns the stack outputs."""
    if cfg.guardrails.enabled:
        guardrail_rules(cfg)  # fail before anything is declared
    catalog = load_catalog()
    tags = {**cfg.tags.as_aws_tags(), STACK_TAG_KEY: stack}
    provider = aws.Provider("aws", region=cfg.region, default_tags={"tags": tags})
    opts = pulumi.ResourceOptions(provider=provider)

    network = Network(
        "net",
        NetworkArgs(cfg.region, cfg.availability_zone, cfg.vpc, slurm_flows=cfg.slurm_flows()),
        opts=opts,
    )
    store = CheckpointStore("checkpoints", cfg.checkpoints, opts=opts)

    lustre = None
    if cfg.lustre:
        # EFA-enabled Lustre joins the cluster's EFA group (all traffic, self-referencing).
        sgs: list[pulumi.Input[str]] = [network.lustre_sg.id]
        if cfg.lustre.efa_enabled:
            sgs.append(network.efa_sg.id)
        lustre = Lustre(
            "lustre",
            LustreArgs(cfg.lustre, network.private_subnet.id, sgs, store.bucket.bucket),
            opts=opts,
        )

    join = None
    if cfg.burst is not None and cfg.burst.node is not None:
        # One munge key and one Slurm parameter for every burst node of the stack.
        join = declare_slurm_join(
            stack,
            cfg.region,
            cfg.burst.node,
            cfg.burst.node_tag_key,
            opts=opts,
            gpu_device_prefix=str(
                (cfg.burst.model_extra or {}).get("gpuDevicePrefix", "/dev/nvidia")
            ),
        )

    clusters = []
    for c in cfg.clusters:
        clusters.append(
            GpuCluster(
                c.name,
                GpuClusterArgs(
                    cluster=c,
                    catalog=catalog,
                    subnet_id=network.private_subnet.id,
                    zone_subnet_ids=[
                        network.zone_subnets[z].id for z in c.zones or [cfg.availability_zone]
                    ],
                    security_group_ids=network.node_security_group_ids,
                    checkpoint_bucket_arn=store.bucket.arn,
                    # Default tags don't reach instances an ASG launches: tag them explicitly,
                    # so guardrails see owners and costs land on the right team.
                    instance_tags={**tags, CLUSTER_TAG_KEY: c.name},
                    lustre_dns=lustre.file_system.dns_name if lustre else None,
                    lustre_mount_name=lustre.file_system.mount_name if lustre else None,
                    lustre_efa=bool(cfg.lustre and cfg.lustre.efa_enabled),
                    slurm_join=join,
                ),
                opts=opts,
            )
        )

    link = None
    if cfg.hybrid_link:
        link = HybridLink(
            "link",
            HybridLinkArgs(
                cfg.hybrid_link,
                network.vpc.id,
                cfg.vpc.cidr,
                network.private_subnet.id,
                network.private_route_table.id,
            ),
            opts=opts,
        )
    vpn = None
    if cfg.vpn:
        vpn = VpnLink(
            "vpn", VpnLinkArgs(cfg.vpn, network.vpc.id, network.private_route_table.id), opts=opts
        )
    budget = Budget("budget", BudgetArgs(cfg.budget, STACK_TAG_KEY, stack), opts=opts)
    # A burst stack's spot interruption warnings reach a queue whether or not the guardrails
    # Lambda is deployed: the spot-interruption rule runs where scontrol is, on-prem.
    spot = None
    if cfg.burst is not None or (cfg.guardrails.enabled and SPOT_RULE in guardrail_rules(cfg)):
        spot = SpotEvents("guardrails-spot", opts=opts)
    guard = None
    if cfg.guardrails.enabled:
        guard = _guardrails(cfg, stack, budget, lambda_package, opts, spot=spot)

    hourly, monthly = totals(estimate_stack(cfg, catalog))
    outputs: dict[str, pulumi.Output[Any] | Any] = {
        "asgNames": {c.name: k.asg.name for c, k in zip(cfg.clusters, clusters, strict=True)},
        "launchTemplateIds": {
            c.name: k.launch_template.id for c, k in zip(cfg.clusters, clusters, strict=True)
        },
        "checkpointBucket": store.bucket.bucket,
        "vpcId": network.vpc.id,
        "estimatedCostPerHourUsd": round(hourly, 2),
        "estimatedCostPerMonthUsd": round(monthly, 2),
    }
    if lustre:
        outputs["lustreDnsName"] = lustre.file_system.dns_name
        outputs["lustreMountName"] = lustre.file_system.mount_name
    if guard:
        outputs["guardrailsFunction"] = guard.function.name
        outputs["guardrailsWebhookSecretArn"] = guard.secret.arn
        # What an on-prem guardrails daemon reads (its config's budget_relay.queue_url).
        outputs["guardrailsBudgetQueueUrl"] = guard.queue.url
    if spot:
        # The on-prem daemon's spot_interruption.queue_url: `pulumi stack output
        # guardrailsSpotQueueUrl` (its IAM policy: .github/iam/onprem-guardrails.json).
        outputs["guardrailsSpotQueueUrl"] = spot.queue.url
    if join:
        outputs["slurmMungeKeySecretArn"] = join.munge_key_secret_arn
        outputs["slurmConfParameterArn"] = join.slurm_conf_parameter_arn
    if link:
        outputs["directConnectGatewayId"] = link.gateway.id
        outputs["directConnectConnectionIds"] = [c.id for c in link.connections]
    if vpn:
        # What the on-prem VPN device is configured with: the two tunnels' outside addresses
        # (the device's sample configuration, with the tunnels' keys, is in the VPC console).
        outputs["vpnConnectionId"] = vpn.connection.id
        outputs["vpnTunnelAddresses"] = [
            vpn.connection.tunnel1_address,
            vpn.connection.tunnel2_address,
        ]
    return outputs


def guardrail_rules(cfg: StackConfig) -> list[str]:
    """The rules the deployed daemon runs; raises StackConfigError for an unknown name."""
    from guardrails.rules import REGISTRY

    names = cfg.guardrails.rules if cfg.guardrails.rules is not None else sorted(REGISTRY)
    unknown = sorted(set(names) - set(REGISTRY))
    if unknown:
        raise StackConfigError(
            f"coreburst:guardrails.rules: unknown rule(s) {', '.join(unknown)}; known: "
            f"{', '.join(sorted(REGISTRY))}"
        )
    # Every rule works on the inventory, so it always runs and is always granted.
    return sorted({"inventory", *names})


def _guardrails(
    cfg: StackConfig,
    stack: str,
    budget: Budget,
    lambda_package: Path,
    opts: pulumi.ResourceOptions,
    *,
    spot: SpotEvents | None,
) -> Guardrails:
    from guardrails.rules import REGISTRY

    names = guardrail_rules(cfg)
    return Guardrails(
        "guardrails",
        GuardrailsArgs(
            code=pulumi.FileArchive(str(lambda_package)),
            rule_actions={n: REGISTRY[n].iam_actions for n in names},
            tag_key=STACK_TAG_KEY,
            tag_value=stack,
            budget_topic_arn=budget.topic.arn,
            schedule_expression=cfg.guardrails.schedule,
            spot_queue=spot.queue if spot else None,
            daemon_config={
                "regions": [cfg.region],
                "dry_run": cfg.guardrails.dry_run,
                # One list drives both the role's permissions and what the daemon runs.
                "rules": names,
                # Lambda has no persistent disk: the audit log goes to CloudWatch via stdout
                # and state to DynamoDB (set through the function's environment).
                "state": {"audit_log": "/tmp/coreburst-audit.jsonl"},
                "safety": {"kill_switch_file": None},
                "metrics_endpoint": {"enabled": False},
            },
        ),
        opts=opts,
    )


def main() -> None:
    """What ``pulumi preview``/``up`` run (through ``infra/__main__.py``)."""
    try:
        cfg = parse_stack_config(read_stack_config())
        package = LAMBDA_PACKAGE
        if cfg.guardrails.enabled:
            guardrail_rules(cfg)
            # Built here, before anything is declared: a fresh clone previews and deploys
            # without a separate build step, and a stale package is never uploaded.
            package = ensure_lambda_package(LAMBDA_PACKAGE)
    except (StackConfigError, LambdaPackageError) as exc:
        # Fail before any resource is declared, with the one line that says what to fix.
        raise pulumi.RunError(str(exc)) from None
    for key, value in build(cfg, pulumi.get_stack(), package).items():
        pulumi.export(key, value)
