"""Org-wide scope: every account (listed in config or discovered through AWS Organizations),
a role assumed in each, accounts x regions scanned concurrently with a bound.

One account failing (role denied, region disabled, throttled) is reported with its error and
never stops the scan of the others.

    >>> targets = [AccountTarget("111111111111", "arn:aws:iam::111111111111:role/coreburst")]
    >>> results = scan(targets, ["us-east-1"], session_for, scan_one)   # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

import boto3
from botocore.exceptions import BotoCoreError, ClientError

if TYPE_CHECKING:
    from coreburst.common.catalog import Catalog
    from guardrails.adapters.aws import Aws
    from guardrails.config import GuardrailsConfig

T = TypeVar("T")


@dataclass(frozen=True)
class AccountTarget:
    account_id: str
    role_arn: str | None  # None: the daemon's own credentials (its home account)
    name: str = ""


@dataclass
class ScanResult:
    account_id: str
    region: str
    items: list[Any] = field(default_factory=list)
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


def discover_accounts(
    org: Any, role_name: str, home_account: str | None = None
) -> list[AccountTarget]:
    """Active accounts of the organization, each with the role to assume in it."""
    targets: list[AccountTarget] = []
    for page in org.get_paginator("list_accounts").paginate():
        for acct in page["Accounts"]:
            if acct.get("Status", "ACTIVE") != "ACTIVE":
                continue
            aid = acct["Id"]
            role = None if aid == home_account else f"arn:aws:iam::{aid}:role/{role_name}"
            targets.append(AccountTarget(aid, role, acct.get("Name", "")))
    return sorted(targets, key=lambda t: t.account_id)


def assume_role_session(
    sts: Any, target: AccountTarget, session_name: str = "coreburst-guardrails"
) -> boto3.session.Session:
    """A session with the target account's role (or the default session for the home one)."""
    if target.role_arn is None:
        return boto3.session.Session()
    creds = sts.assume_role(RoleArn=target.role_arn, RoleSessionName=session_name)["Credentials"]
    return boto3.session.Session(
        aws_access_key_id=creds["AccessKeyId"],
        aws_secret_access_key=creds["SecretAccessKey"],
        aws_session_token=creds["SessionToken"],
    )


def describe_error(exc: BaseException) -> str:
    if isinstance(exc, ClientError):
        err = exc.response.get("Error", {})
        return f"{err.get('Code', 'ClientError')}: {err.get('Message', '')}".strip()
    return f"{type(exc).__name__}: {exc}"


def scan(
    targets: Iterable[AccountTarget],
    regions: list[str],
    session_for: Callable[[AccountTarget], boto3.session.Session],
    scan_one: Callable[[boto3.session.Session, AccountTarget, str], list[T]],
    max_workers: int = 8,
) -> list[ScanResult]:
    """Scan every (account, region) with at most ``max_workers`` in flight.

    A role that cannot be assumed fails every region of that account, once; an error in one
    region fails only that (account, region).
    """
    targets = list(targets)
    if max_workers < 1:
        raise ValueError("max_workers must be at least 1")
    sessions: dict[str, boto3.session.Session | str] = {}

    def session(t: AccountTarget) -> boto3.session.Session | str:
        try:
            return session_for(t)
        except (ClientError, BotoCoreError) as exc:
            return describe_error(exc)

    def run(t: AccountTarget, region: str) -> ScanResult:
        sess = sessions[t.account_id]
        if isinstance(sess, str):
            return ScanResult(t.account_id, region, error=f"assume role failed: {sess}")
        try:
            return ScanResult(t.account_id, region, list(scan_one(sess, t, region)))
        except (ClientError, BotoCoreError) as exc:
            return ScanResult(t.account_id, region, error=describe_error(exc))

    with ThreadPoolExecutor(max_workers=max_workers) as pool:
        for t, s in zip(targets, pool.map(session, targets), strict=True):
            sessions[t.account_id] = s
        futures = [pool.submit(run, t, r) for t in targets for r in regions]
        return [f.result() for f in futures]


# -- the read-only org-scan report ------------------------------------------------------------
@dataclass(frozen=True)
class NodeSummary:
    instance_id: str
    instance_type: str
    state: str  # idle | busy | unknown (blind: no usable utilization data)
    usd_per_hour: float | None


def scan_region(
    clients: Aws, cfg: GuardrailsConfig, region: str, catalog: Catalog, now: datetime
) -> list[NodeSummary]:
    """One (account, region) of the org-scan: its watched instances, each idle, busy or blind
    as the daemon would decide it, from the same per-instance rollup the daemon reads (three
    metrics per instance; per-device series only where a metric has no rollup), and its $/h.

    ``clients`` is built on the account's session (``assume_role_session``).
    """
    from coreburst.common.catalog import CatalogError
    from guardrails.adapters.aws import inventory
    from guardrails.rules.idle_reclaim import utilization

    nodes = inventory(clients.client("ec2", region), region, cfg.watched_types(), catalog)
    utils = utilization(clients, cfg, nodes, now, catalog=catalog) if nodes else {}
    out = []
    for n in nodes:
        try:
            price: float | None = catalog.hourly_price(n.instance_type, region, n.market)
        except CatalogError:
            price = None
        out.append(NodeSummary(n.instance_id, n.instance_type, utils[n.instance_id].state, price))
    return out


def targets(
    accounts: Iterable[str],
    discovered: Iterable[AccountTarget],
    role_name: str,
    home_account: str | None,
) -> list[AccountTarget]:
    """Configured account ids plus discovered ones, once each; the home account is scanned
    with the caller's own credentials rather than a role assumed into itself."""
    out = {t.account_id: t for t in discovered}
    for aid in accounts:
        if aid not in out:
            role = None if aid == home_account else f"arn:aws:iam::{aid}:role/{role_name}"
            out[aid] = AccountTarget(aid, role)
    return sorted(out.values(), key=lambda t: t.account_id)


def summarize(results: list[ScanResult]) -> list[dict[str, Any]]:
    """One row per (account, region): node count, idle, blind and the $/h they burn."""
    rows = []
    for r in sorted(results, key=lambda r: (r.account_id, r.region)):
        nodes: list[NodeSummary] = r.items
        rows.append(
            {
                "account": r.account_id,
                "region": r.region,
                "nodes": len(nodes),
                "idle": sum(1 for n in nodes if n.state == "idle"),
                "blind": sum(1 for n in nodes if n.state == "unknown"),
                "usd_per_hour": round(sum(n.usd_per_hour or 0.0 for n in nodes), 2),
                "idle_usd_per_hour": round(
                    sum(n.usd_per_hour or 0.0 for n in nodes if n.state == "idle"), 2
                ),
                "error": r.error,
            }
        )
    return rows
