"""What every preflight (``coreburst burst check``, ``coreburst guardrails check``) shares: one
:class:`Result` per question with ✔ (``ok``), ✘ (``fail``, with the fix) or ? (``unknown``: the
credentials may not ask, or nothing answered; never counted as ✔), boto3 clients with
deadlines, the caller's identity, the spot-event rules and queue, and the text and JSON output
with the exit status a pipeline reads.

    >>> r = Result("quota", "P on-demand", "fail", "GetServiceQuota", "0 < 768", "ask for more")
    >>> r.line()
    '✘ quota           P on-demand: 0 < 768 (GetServiceQuota); fix: ask for more'
    >>> exit_code([r], strict=False)
    1
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, Literal, Protocol

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

Status = Literal["ok", "fail", "unknown"]
MARK: dict[Status, str] = {"ok": "✔", "fail": "✘", "unknown": "?"}

# Every call has a deadline: a check that cannot get an answer in time says so (?).
CONNECT_TIMEOUT_S = 5
READ_TIMEOUT_S = 20
MAX_ATTEMPTS = 3

# Error codes that mean "these credentials may not ask": EC2 answers UnauthorizedOperation
# (EC2 API reference, "Common Errors"), most JSON services AccessDeniedException,
# query services (IAM, STS, SQS) AccessDenied.
DENIED = frozenset(
    {"AccessDenied", "AccessDeniedException", "UnauthorizedOperation", "AuthFailure"}
)

# The two EC2 events the spot-interruption rule reads (infra/components/guardrails.py,
# SPOT_EVENTS; Amazon EC2 User Guide, "Spot Instance interruption notices" and "EC2 instance
# rebalance recommendations"). Repeated here so the check needs no Pulumi.
SPOT_EVENTS = {
    "interruption": "EC2 Spot Instance Interruption Warning",
    "rebalance": "EC2 Instance Rebalance Recommendation",
}


@dataclass(frozen=True)
class Result:
    """One check's answer: which check, about what, what was asked (the API call or file),
    what was found, and the fix when it is not ✔."""

    check: str
    subject: str
    status: Status
    asked: str
    detail: str
    fix: str = ""

    def line(self) -> str:
        text = f"{MARK[self.status]} {self.check:<15} {self.subject}: {self.detail} ({self.asked})"
        if self.status != "ok" and self.fix:
            text += f"; fix: {self.fix}"
        return text


class NoAnswerError(Exception):
    """A call that got no usable answer: ``detail`` says why, ``fix`` how to get one."""

    def __init__(self, detail: str, fix: str) -> None:
        super().__init__(detail)
        self.detail = detail
        self.fix = fix


def ask(permission: str, fn: Callable[..., Any], /, **kwargs: Any) -> Any:
    """``fn(**kwargs)``; an access-denied answer or no answer at all raises NoAnswerError (the
    check is ?). Other client errors (not found, invalid) are the caller's to read."""
    try:
        return fn(**kwargs)
    except ClientError as exc:
        code = str(exc.response.get("Error", {}).get("Code", ""))
        if code in DENIED:
            raise NoAnswerError(
                f"these credentials may not ask ({code})",
                f"grant {permission} to the credentials that run the check",
            ) from None
        raise
    except BotoCoreError as exc:
        raise NoAnswerError(
            f"no answer ({type(exc).__name__}: {exc})",
            "check the AWS credentials, region and network (AWS_* environment)",
        ) from None


def code_of(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", "ClientError"))


def message_of(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Message", "")).split("\n")[0][:200]


class ClientSource(Protocol):
    """``clients(service)`` -> a boto3 client for ``clients.region``."""

    region: str

    def __call__(self, service: str) -> Any: ...


class Clients:
    """boto3 clients for one region with the check's deadlines, made on first use. The
    endpoint is boto3's own (``AWS_ENDPOINT_URL`` and friends), so a test points it at a
    local emulator the way a user points it at a VPC endpoint."""

    def __init__(self, region: str, session: boto3.session.Session | None = None) -> None:
        self.region = region
        self.session = session or boto3.session.Session()
        self.config = Config(
            connect_timeout=CONNECT_TIMEOUT_S,
            read_timeout=READ_TIMEOUT_S,
            retries={"mode": "standard", "max_attempts": MAX_ATTEMPTS},
        )
        self._made: dict[str, Any] = {}

    def __call__(self, service: str) -> Any:
        if service not in self._made:
            self._made[service] = self.session.client(
                service,  # type: ignore[call-overload]
                region_name=self.region,
                config=self.config,
            )
        return self._made[service]


# -- identity -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Caller:
    account: str
    arn: str  # as STS says (an assumed role's session ARN)
    principal: str  # what IAM simulates: the role or user ARN


def principal_of(arn: str) -> str:
    """The IAM principal an STS caller ARN stands for: an assumed role's session
    (``arn:aws:sts::<acct>:assumed-role/<role>/<session>``) is its role. The role's path is not
    in that ARN; a role with a path is named with ``--principal``.

    >>> principal_of("arn:aws:sts::123456789012:assumed-role/burst-controller/i-0abc")
    'arn:aws:iam::123456789012:role/burst-controller'
    >>> principal_of("arn:aws:iam::123456789012:user/slurm")
    'arn:aws:iam::123456789012:user/slurm'
    """
    m = re.fullmatch(r"arn:([\w-]+):sts::(\d{12}):assumed-role/([^/]+)/.*", arn)
    if m:
        return f"arn:{m.group(1)}:iam::{m.group(2)}:role/{m.group(3)}"
    return arn


def check_identity(clients: ClientSource) -> tuple[Result, Caller | None]:
    asked = "sts:GetCallerIdentity"
    try:
        who = ask(asked, clients("sts").get_caller_identity)
    except NoAnswerError as exc:
        return Result("identity", "credentials", "unknown", asked, exc.detail, exc.fix), None
    except ClientError as exc:
        return (
            Result(
                "identity",
                "credentials",
                "fail",
                asked,
                f"refused ({code_of(exc)}: {message_of(exc)})",
                "give credentials of the account the stack is deployed to",
            ),
            None,
        )
    caller = Caller(str(who["Account"]), str(who["Arn"]), principal_of(str(who["Arn"])))
    return (
        Result(
            "identity",
            "credentials",
            "ok",
            asked,
            f"{caller.arn} in account {caller.account}, region {clients.region}",
        ),
        caller,
    )


# -- spot events ------------------------------------------------------------------------------
def _rule_details(pattern: str | None) -> set[str]:
    try:
        doc = json.loads(pattern or "{}")
    except ValueError:
        return set()
    if not isinstance(doc, dict) or "aws.ec2" not in (doc.get("source") or []):
        return set()
    return {str(d) for d in doc.get("detail-type") or []}


def check_spot_events(clients: ClientSource, queue_url: str | None = None) -> list[Result]:
    """The EventBridge rules for the two spot events, enabled and delivering to an SQS
    queue that exists (``queue_url``: the one the guardrails daemon reads, when known)."""
    events = clients("events")
    asked = "events:ListRules"
    fix_rules = (
        "set coreburst:guardrails.enabled: true in the stack and pulumi up (it declares both "
        "rules and the queue guardrails-spot-events)"
    )
    try:
        rules: list[dict[str, Any]] = []
        token: dict[str, str] = {}
        while True:
            page = ask(asked, events.list_rules, **token)
            rules += page.get("Rules", [])
            if not page.get("NextToken"):
                break
            token = {"NextToken": page["NextToken"]}
    except NoAnswerError as exc:
        return [Result("spot-events", "EventBridge rules", "unknown", asked, exc.detail, exc.fix)]
    except ClientError as exc:
        return [
            Result(
                "spot-events",
                "EventBridge rules",
                "unknown",
                asked,
                f"{code_of(exc)}: {message_of(exc)}",
                "",
            )
        ]
    out: list[Result] = []
    queue_arns: set[str] = set()
    for detail in SPOT_EVENTS.values():
        subject = f"rule for {detail!r}"
        matching = [r for r in rules if detail in _rule_details(r.get("EventPattern"))]
        if not matching:
            out.append(
                Result(
                    "spot-events",
                    subject,
                    "fail",
                    asked,
                    "no EventBridge rule matches it",
                    fix_rules,
                )
            )
            continue
        enabled = [r for r in matching if r.get("State") == "ENABLED"]
        if not enabled:
            out.append(
                Result(
                    "spot-events",
                    subject,
                    "fail",
                    asked,
                    f"{matching[0]['Name']} is {matching[0].get('State')}",
                    f"aws events enable-rule --name {matching[0]['Name']}",
                )
            )
            continue
        t_asked = "events:ListTargetsByRule"
        targets: list[str] = []
        try:
            for r in enabled:
                resp = ask(t_asked, events.list_targets_by_rule, Rule=r["Name"])
                targets += [t["Arn"] for t in resp.get("Targets", []) if ":sqs:" in t["Arn"]]
        except NoAnswerError as exc:
            out.append(Result("spot-events", subject, "unknown", t_asked, exc.detail, exc.fix))
            continue
        if not targets:
            out.append(
                Result(
                    "spot-events",
                    subject,
                    "fail",
                    t_asked,
                    f"{enabled[0]['Name']} sends to no SQS queue",
                    fix_rules,
                )
            )
            continue
        queue_arns.update(targets)
        out.append(
            Result(
                "spot-events",
                subject,
                "ok",
                t_asked,
                f"{enabled[0]['Name']} -> {targets[0].rsplit(':', 1)[-1]}",
            )
        )
    if queue_url is not None:
        name = queue_url.rstrip("/").rsplit("/", 1)[-1]
        if queue_arns and not any(a.rsplit(":", 1)[-1] == name for a in queue_arns):
            out.append(
                Result(
                    "spot-events",
                    f"queue {name}",
                    "fail",
                    t_asked if queue_arns else asked,
                    f"the rules deliver to {', '.join(sorted(_name(a) for a in queue_arns))}, "
                    "not to spot_interruption.queue_url",
                    "set spot_interruption.queue_url to "
                    "`pulumi stack output guardrailsSpotQueueUrl`",
                ),
            )
        out.append(_queue(clients, queue_url))
    else:
        for arn in sorted(queue_arns):
            parts = arn.split(":")
            try:
                url = ask(
                    "sqs:GetQueueUrl",
                    clients("sqs").get_queue_url,
                    QueueName=parts[5],
                    QueueOwnerAWSAccountId=parts[4],
                )["QueueUrl"]
            except NoAnswerError as exc:
                out.append(
                    Result(
                        "spot-events",
                        f"queue {parts[5]}",
                        "unknown",
                        "sqs:GetQueueUrl",
                        exc.detail,
                        exc.fix,
                    )
                )
                continue
            except ClientError as exc:
                out.append(
                    Result(
                        "spot-events",
                        f"queue {parts[5]}",
                        "fail",
                        "sqs:GetQueueUrl",
                        f"the rules' target does not exist ({code_of(exc)})",
                        fix_rules,
                    )
                )
                continue
            out.append(_queue(clients, url))
    return out


def _name(arn: str) -> str:
    return arn.rsplit(":", 1)[-1]


def _queue(clients: ClientSource, url: str) -> Result:
    name = url.rstrip("/").rsplit("/", 1)[-1]
    asked = "sqs:GetQueueAttributes"
    try:
        attrs = ask(
            asked,
            clients("sqs").get_queue_attributes,
            QueueUrl=url,
            AttributeNames=["QueueArn", "ApproximateNumberOfMessages"],
        )["Attributes"]
    except NoAnswerError as exc:
        return Result("spot-events", f"queue {name}", "unknown", asked, exc.detail, exc.fix)
    except ClientError as exc:
        return Result(
            "spot-events",
            f"queue {name}",
            "fail",
            asked,
            f"{code_of(exc)}: {message_of(exc)}",
            "set spot_interruption.queue_url to `pulumi stack output guardrailsSpotQueueUrl`",
        )
    return Result(
        "spot-events",
        f"queue {name}",
        "ok",
        asked,
        f"readable, {attrs.get('ApproximateNumberOfMessages', '?')} message(s) waiting",
    )


def exit_code(results: list[Result], strict: bool) -> int:
    """0 when nothing failed (and, with ``strict``, nothing is unknown), else 1."""
    bad = {"fail", "unknown"} if strict else {"fail"}
    return 1 if any(r.status in bad for r in results) else 0


def render_text(results: list[Result]) -> str:
    counts = {k: sum(r.status == k for r in results) for k in MARK}
    lines = [r.line() for r in results]
    lines.append(
        f"{counts['ok']} ✔, {counts['fail']} ✘, {counts['unknown']} ? of {len(results)} checks"
    )
    return "\n".join(lines) + "\n"


def render_json(results: list[Result], *, stack: str | None = None, strict: bool = False) -> str:
    doc: dict[str, Any] = {
        **({"stack": stack} if stack else {}),
        "ok": exit_code(results, strict) == 0,
        "checks": [{**asdict(r), "mark": MARK[r.status]} for r in results],
    }
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"
