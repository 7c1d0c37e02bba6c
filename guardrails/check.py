"""``coreburst guardrails check``: the daemon's side of the preflight, with the daemon's own
config and credentials, read-only (the burst side is ``coreburst burst check``,
coreburst/burst/check.py; both print guardrails/preflight.py's lines).

* ``identity``: who the credentials are (STS GetCallerIdentity).
* ``idle-metric``: in each region, the CloudWatch metric the idle rule reads for each
  accelerator family it watches (``idle.metrics``: namespace, metric, device dimension) is
  being published by at least one node (ListMetrics with ``RecentlyActive=PT3H``, the one
  window CloudWatch offers). None published while nodes of that family run is ✘ (the idle rule
  would see them all as blind); none published and no such node running is ?: nothing could
  have published, so nothing is known.
* ``spot-events`` (with ``spot_interruption.enabled``): the EventBridge rules for both spot
  events deliver to ``spot_interruption.queue_url``, which exists and these credentials may
  read.

    >>> results = run_checks(load_config(Path("guardrails.yaml")))  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from botocore.exceptions import ClientError

from coreburst.common.catalog import load_catalog
from guardrails.config import GuardrailsConfig
from guardrails.preflight import (
    NoAnswerError,
    Result,
    ask,
    check_identity,
    check_spot_events,
    code_of,
    message_of,
)

# ListMetrics' only look-back: metrics with a datapoint in the past three hours (CloudWatch API
# reference, ListMetrics, RecentlyActive: "The only valid value is PT3H").
RECENTLY = "PT3H"
FILTER_VALUES_MAX = 200


class RegionClients:
    """The preflight's ``clients(service)`` over the daemon's own client cache (its endpoint,
    timeouts and retries: ``aws`` in the config) for one region."""

    def __init__(self, factory: Callable[[str, str], Any], region: str) -> None:
        self.factory = factory
        self.region = region

    def __call__(self, service: str) -> Any:
        return self.factory(service, self.region)


def _published(cw: Any, namespace: str, metric: str) -> set[str]:
    """Instance ids with a datapoint of ``namespace``/``metric`` in the past three hours."""
    ids: set[str] = set()
    pages = cw.get_paginator("list_metrics").paginate(
        Namespace=namespace,
        MetricName=metric,
        Dimensions=[{"Name": "InstanceId"}],
        RecentlyActive=RECENTLY,
    )
    for page in pages:
        for m in page.get("Metrics", []):
            for d in m.get("Dimensions", []):
                if d["Name"] == "InstanceId":
                    ids.add(d["Value"])
    return ids


def _running(ec2: Any, types: list[str]) -> set[str]:
    ids: set[str] = set()
    for i in range(0, len(types), FILTER_VALUES_MAX):
        pages = ec2.get_paginator("describe_instances").paginate(
            Filters=[
                {"Name": "instance-type", "Values": types[i : i + FILTER_VALUES_MAX]},
                {"Name": "instance-state-name", "Values": ["running"]},
            ]
        )
        for page in pages:
            for res in page.get("Reservations", []):
                ids.update(inst["InstanceId"] for inst in res.get("Instances", []))
    return ids


def check_idle_metrics(cfg: GuardrailsConfig, clients: RegionClients) -> list[Result]:
    catalog = load_catalog()
    by_kind: dict[str, list[str]] = {}
    for t in cfg.watched_types():
        kind = catalog.instance(t).accelerator.kind
        by_kind.setdefault(kind, []).append(t)
    out: list[Result] = []
    for kind, metric in sorted(cfg.idle.metrics.items()):
        types = by_kind.get(kind)
        if not types:
            continue
        subject = f"{metric.namespace} {metric.metric_name} in {clients.region}"
        asked = "cloudwatch:ListMetrics"
        try:
            ids = ask(asked, _published, cw=clients("cloudwatch"), namespace=metric.namespace,
                      metric=metric.metric_name)  # fmt: skip
        except NoAnswerError as exc:
            out.append(Result("idle-metric", subject, "unknown", asked, exc.detail, exc.fix))
            continue
        except ClientError as exc:
            detail = f"{code_of(exc)}: {message_of(exc)}"
            out.append(Result("idle-metric", subject, "unknown", asked, detail, ""))
            continue
        if ids:
            out.append(
                Result(
                    "idle-metric",
                    subject,
                    "ok",
                    asked,
                    f"published by {len(ids)} instance(s) in the past 3 h",
                )
            )
            continue
        asked = "ec2:DescribeInstances"
        try:
            running = ask(asked, _running, ec2=clients("ec2"), types=types)
        except NoAnswerError as exc:
            out.append(Result("idle-metric", subject, "unknown", asked, exc.detail, exc.fix))
            continue
        except ClientError as exc:
            detail = f"{code_of(exc)}: {message_of(exc)}"
            out.append(Result("idle-metric", subject, "unknown", asked, detail, ""))
            continue
        if not running:
            out.append(
                Result(
                    "idle-metric",
                    subject,
                    "unknown",
                    "cloudwatch:ListMetrics, ec2:DescribeInstances",
                    f"nothing published in the past 3 h, and no {kind} node runs to publish it",
                    "run the check again while a node is up",
                )
            )
            continue
        out.append(
            Result(
                "idle-metric",
                subject,
                "fail",
                "cloudwatch:ListMetrics, ec2:DescribeInstances",
                f"{len(running)} {kind} node(s) run ({', '.join(sorted(running)[:3])}"
                f"{', ...' if len(running) > 3 else ''}) and none published it in the past "
                "3 h: the idle rule sees them as blind and never reclaims them",
                "the nodes' publisher must run (the launch template's CloudWatch agent "
                "nvidia_gpu plugin, or the Neuron publisher) and their role may "
                "cloudwatch:PutMetricData; or set idle.metrics to what they publish",
            )
        )
    return out


def run_checks(
    cfg: GuardrailsConfig, factory: Callable[[str, str], Any] | None = None
) -> list[Result]:
    """Every check of the daemon's side; ``factory(service, region)`` makes the clients
    (default: the daemon's own, ``guardrails.adapters.aws.Aws``)."""
    if factory is None:
        from guardrails.adapters.aws import Aws

        factory = Aws(cfg.aws).client
    first = RegionClients(factory, cfg.regions[0])
    who, caller = check_identity(first)
    out = [who]
    if caller is None:
        return out
    for region in cfg.regions:
        out += check_idle_metrics(cfg, RegionClients(factory, region))
    spot = getattr(cfg, "spot_interruption", None)
    if spot is not None and spot.enabled:
        if spot.queue_url is None:
            out.append(
                Result(
                    "spot-events",
                    "spot_interruption.queue_url",
                    "fail",
                    "the config",
                    "the rule is enabled with no queue to read",
                    "set it to `pulumi stack output guardrailsSpotQueueUrl`",
                )
            )
        else:
            region = _queue_region(spot.queue_url) or cfg.regions[0]
            out += check_spot_events(RegionClients(factory, region), spot.queue_url)
    return out


def _queue_region(url: str) -> str | None:
    """``https://sqs.<region>.amazonaws.com/<acct>/<name>`` -> region."""
    host = url.split("//", 1)[-1].split("/", 1)[0]
    parts = host.split(".")
    return parts[1] if len(parts) > 3 and parts[0] == "sqs" else None
