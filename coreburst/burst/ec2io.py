"""The resume program's per-instance EC2 calls, made to hold at 1,000 nodes.

After CreateFleet (common tags already set at launch by ``TagSpecifications``) two things are
per instance: the node-name tag and the node's private address. EC2 makes both hard at scale:

* **Throttling** (EC2 Developer Guide, "Request throttling for the Amazon EC2 API"): a token
  bucket per action and account; ``CreateTags`` holds 100 tokens and refills 10 a second, so
  1,000 tags take at least ~90 s however they are sent, and an over-eager sender gets
  ``RequestLimitExceeded`` (a server error, HTTP 503: EC2 API reference, "Error codes for the
  Amazon EC2 API"). The client uses botocore's ``adaptive`` retry mode (:func:`client_config`),
  which slows the whole client to the rate EC2 accepts after a throttle; what is still throttled
  after botocore's attempts is retried here with capped exponential backoff and jitter, until a
  deadline.
* **Eventual consistency** (EC2 Developer Guide, "Eventual consistency in the Amazon EC2
  API"): an instance id CreateFleet just returned may be unknown to the next call
  (``InvalidInstanceID.NotFound`` from CreateTags or DescribeInstances) or described without
  its ``PrivateIpAddress`` yet. Both are retried with backoff ("starting with a couple of
  seconds ... up to a few minutes") until the deadline.

The node tag cannot be batched: CreateTags gives every resource in one call the same tags, and
each instance's node name differs, so it is one call per instance (the node -> instance mapping
is also kept in the claims store, coreburst/burst/claims.py, once tagged). Nothing is ever left
silently undone: what misses the deadline comes back in ``failed`` / ``missing`` with a reason
the caller fails back to Slurm. An instance whose tag has not landed yet carries the
``coreburst-launch`` tag; the burst-reconcile rule leaves such an instance alone until it is
older than its ``orphan_timeout`` (15 min by default), longer than :data:`TAG_DEADLINE_S`.

Addresses are read with an ``instance-id`` *filter* and pagination, not ``InstanceIds``: a
filter leaves an unknown id out instead of failing the whole call, and a filtered, paginated
DescribeInstances draws on the larger non-mutating bucket (100, 20/s) rather than the
unfiltered one (50, 10/s).

    >>> ec2 = boto3.client("ec2", config=client_config())  # doctest: +SKIP
    >>> tag_nodes(ec2, {"od-1": "i-0abc"}, "coreburst-slurm-node").tagged  # doctest: +SKIP
    {'od-1': 'i-0abc'}
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, HTTPClientError
from botocore.exceptions import ConnectionError as BotoConnectionError

log = logging.getLogger("coreburst.burst.ec2io")

# botocore attempts per call (the first included) before our own backoff takes over.
MAX_ATTEMPTS = 6
TAG_WORKERS = 16
# Deadlines (seconds), each at most a third of ResumeTimeout (:func:`deadline`). Tagging
# gets at least twice what CreateTags' documented refill (10/s) needs for the batch; it
# stays under burst-reconcile's orphan_timeout (15 min by default), the age after which an
# untagged instance counts as an orphan.
TAG_DEADLINE_S = 300.0
TAG_DEADLINE_MAX_S = 600.0
CREATE_TAGS_REFILL_PER_S = 10.0
ADDRESS_DEADLINE_S = 300.0
# Backoff between retries: exponential from FIRST_WAIT_S, capped at MAX_WAIT_S, full jitter
# ("Timeouts, retries, and backoff with jitter", which the throttling guide points to).
FIRST_WAIT_S = 0.5
MAX_WAIT_S = 8.0
# EC2 API reference, "Filtering": at most 200 values in one filter; DescribeInstances
# MaxResults is 5..1000.
FILTER_VALUES_MAX = 200
PAGE_SIZE = 1000

THROTTLE = "RequestLimitExceeded"
NOT_FOUND = "InvalidInstanceID.NotFound"
# Reasons a node is failed back to Slurm with (its reason reads "(Code:<reason>)...").
NOT_VISIBLE = "InstanceNotVisible"
NO_ADDRESS = "NoPrivateIpAddress"
GONE_STATES = ("shutting-down", "terminated", "stopping", "stopped")


# Deadlines that fit Slurm's (issue 33 item 6). slurmctld gives a resume ResumeTimeout for
# the node to register and a suspend SuspendTimeout (slurm.conf(5)); a power program's AWS
# calls get a share of it, counted from the program's start, so that it fails its nodes and
# says why before Slurm gives up on them. Each try has its own connect and read timeouts
# (botocore's default read timeout is 60 s, times 6 attempts: 6 minutes against an endpoint
# that accepts and never answers).
RESUME_SHARE = 0.5  # the rest is the instance's boot and registration
SUSPEND_SHARE = 0.8  # the rest is for telling Slurm
CONNECT_TIMEOUT_MAX_S = 10.0
READ_TIMEOUT_MAX_S = 60.0


@dataclass(frozen=True)
class Budget:
    """A power program's AWS deadline: ``total_s`` from its start, ``connect_s`` and
    ``read_s`` per try; ``why`` names the Slurm limit it derives from."""

    total_s: float
    connect_s: float
    read_s: float
    why: str


def budget(kind: str, resume_timeout_s: float, suspend_timeout_s: float) -> Budget:
    """The AWS deadline of power program ``kind`` (resume, suspend, resume-fail).

    >>> budget("resume", 1800, 120)
    Budget(total_s=900.0, connect_s=10.0, read_s=60.0, why='half of ResumeTimeout=1800 s')
    >>> budget("suspend", 1800, 120)
    Budget(total_s=96.0, connect_s=9.6, read_s=32.0, why='80% of SuspendTimeout=120 s')
    """
    if kind == "resume":
        total, why = (
            resume_timeout_s * RESUME_SHARE,
            f"half of ResumeTimeout={resume_timeout_s:g} s",
        )
    else:
        total = suspend_timeout_s * SUSPEND_SHARE
        why = f"{SUSPEND_SHARE:.0%} of SuspendTimeout={suspend_timeout_s:g} s"
    return Budget(
        total_s=total,
        connect_s=round(min(CONNECT_TIMEOUT_MAX_S, total / 10), 3),
        read_s=round(min(READ_TIMEOUT_MAX_S, total / 3), 3),
        why=why,
    )


def client_config(workers: int = TAG_WORKERS, limits: Budget | None = None) -> Config:
    """The EC2 client's botocore Config: adaptive retries (client-side rate limiting after a
    throttle, shared by every thread of the client), a connection pool that fits the
    tagging threads, and with ``limits`` its per-try connect and read timeouts."""
    config = Config(
        retries={"mode": "adaptive", "total_max_attempts": MAX_ATTEMPTS},
        max_pool_connections=max(10, workers + 4),
    )
    if limits is None:
        return config
    return config.merge(Config(connect_timeout=limits.connect_s, read_timeout=limits.read_s))


class DeadlineExceeded(BotoCoreError):  # noqa: N818 (the code Slurm shows: "(Code:DeadlineExceeded)")
    """A power program's AWS deadline is spent: no further try is sent (one line)."""

    fmt = "{msg}"


def process_age_s() -> float:
    """Seconds since this process started (proc(5), /proc/self/stat field 22, against
    CLOCK_BOOTTIME); 0 when that cannot be read. slurmctld's clock starts there."""
    try:
        stat = Path("/proc/self/stat").read_text(encoding="ascii", errors="replace")
        ticks = int(stat.rpartition(")")[2].split()[19])
        return max(0.0, time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError, AttributeError):
        return 0.0


class Deadline:
    """Ends a client's tries at the program's deadline: before each HTTP try (botocore's
    ``before-send`` event, after the adaptive rate limiter's wait) a try whose connect and
    read timeouts would not fit in what is left is not sent; the call raises
    :class:`DeadlineExceeded` naming the endpoint, the deadline, its source and the last
    error. Not retried (it is no connection error), so every caller's ``BotoCoreError``
    handling fails its nodes with code ``DeadlineExceeded``.

        >>> ec2 = Deadline(budget("suspend", 1800, 120)).install(ec2)  # doctest: +SKIP
    """

    def __init__(
        self,
        limits: Budget,
        *,
        clock: Callable[[], float] = time.monotonic,
        started_s_ago: float = 0.0,
    ) -> None:
        self.limits = limits
        self.clock = clock
        self.end = clock() - started_s_ago + limits.total_s
        self.tries = 0
        self.last: str | None = None
        self.spent: str | None = None  # the message, once the deadline stopped a try
        self._lock = threading.Lock()

    def install(self, client: Any) -> Any:
        """Watch ``client``'s tries; returns the client (one deadline may watch several)."""
        client.meta.events.register("before-send.ec2", self._before_send)
        client.meta.events.register("needs-retry.ec2", self._note)
        return client

    def left(self) -> float:
        return self.end - self.clock()

    def _before_send(self, request: Any = None, **_: Any) -> None:
        lim = self.limits
        if self.left() < lim.connect_s + lim.read_s:
            host = urlsplit(getattr(request, "url", "") or "").netloc or "EC2"
            msg = (
                f"EC2 ({host}) gave no answer within the power program's AWS deadline of "
                f"{lim.total_s:g} s ({lim.why}; {lim.connect_s:.3g} s to connect and "
                f"{lim.read_s:.3g} s to read per try): "
                + (f"{self.tries} tries" if self.tries != 1 else "1 try")
                + (f", the last {self.last}" if self.last else "")
                + "; check the network path to EC2 (proxy, VPC endpoint, firewall)"
            )
            with self._lock:
                self.spent = msg
            raise DeadlineExceeded(msg=msg)
        with self._lock:
            self.tries += 1

    def _note(self, caught_exception: BaseException | None = None, **_: Any) -> None:
        if caught_exception is not None:
            with self._lock:
                self.last = f"{type(caught_exception).__name__}: {caught_exception}"


def deadline(kind: str, count: int, resume_timeout_s: float) -> float:
    """Seconds to keep trying ``kind`` ("tags" or "addresses") for ``count`` instances.

    >>> deadline("tags", 1000, 1800), deadline("tags", 5000, 1800), deadline("tags", 10, 30)
    (300.0, 600.0, 10.0)
    """
    if kind == "tags":
        need = 2 * count / CREATE_TAGS_REFILL_PER_S
        want = min(TAG_DEADLINE_MAX_S, max(TAG_DEADLINE_S, need))
    else:
        want = ADDRESS_DEADLINE_S
    return min(want, resume_timeout_s / 3)


def error_code(exc: BaseException) -> str:
    if isinstance(exc, ClientError):
        return str(exc.response.get("Error", {}).get("Code") or "ClientError")
    return type(exc).__name__


def retryable(exc: BaseException) -> bool:
    """Throttling, a 5xx, a connection problem, or an id EC2 does not know yet (not, e.g., a
    request botocore refuses or missing credentials: those fail the same way every time)."""
    if isinstance(exc, BotoConnectionError | HTTPClientError):
        return True
    if not isinstance(exc, ClientError):
        return False
    code = error_code(exc)
    status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
    return code in (THROTTLE, NOT_FOUND) or status >= 500


@dataclass
class Backoff:
    """Capped exponential waits with full jitter, never past the deadline."""

    deadline: float  # on ``clock``
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    first_s: float = FIRST_WAIT_S
    max_s: float = MAX_WAIT_S
    rng: random.Random = field(default_factory=random.Random)
    tries: int = 0

    def left(self) -> float:
        return self.deadline - self.clock()

    def wait(self) -> bool:
        """Sleep before the next try; False when the deadline has passed (no sleep)."""
        left = self.left()
        if left <= 0:
            return False
        cap = min(self.max_s, self.first_s * 2**self.tries)
        self.tries += 1
        # Full jitter, but at least a tenth of the cap so a retry is never immediate.
        self.sleep(min(left, cap * (0.1 + 0.9 * self.rng.random())))
        return True


@dataclass
class Counts:
    """Calls made here, by outcome (thread-safe)."""

    calls: int = 0
    throttled: int = 0
    not_found: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, exc: BaseException | None = None) -> None:
        with self._lock:
            self.calls += 1
            code = None if exc is None else error_code(exc)
            self.throttled += code == THROTTLE
            self.not_found += code == NOT_FOUND


@dataclass
class TagResult:
    tagged: dict[str, str] = field(default_factory=dict)  # node -> instance id
    failed: dict[str, str] = field(default_factory=dict)  # node -> last error code
    counts: Counts = field(default_factory=Counts)


def tag_nodes(
    ec2: Any,
    node_ids: dict[str, str],
    key: str,
    *,
    deadline_s: float = TAG_DEADLINE_S,
    workers: int = TAG_WORKERS,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    extra: dict[str, dict[str, str]] | None = None,
) -> TagResult:
    """Tag each instance with ``key`` = its node (and the node's ``extra`` tags, e.g. the
    job it was launched for): one CreateTags per instance on ``workers`` threads (boto3
    clients are thread-safe), each retried on throttling, 5xx and
    ``InvalidInstanceID.NotFound`` until ``deadline_s``. Other errors (e.g. a missing
    permission) fail that node at once."""
    out = TagResult()
    deadline = clock() + deadline_s
    lock = threading.Lock()

    def one(item: tuple[str, str]) -> None:
        node, iid = item
        backoff = Backoff(deadline, clock=clock, sleep=sleep)
        while True:
            try:
                tags = {key: node, **(extra or {}).get(node, {})}
                ec2.create_tags(
                    Resources=[iid], Tags=[{"Key": k, "Value": v} for k, v in tags.items()]
                )
            except (ClientError, BotoCoreError) as exc:
                out.counts.add(exc)
                if retryable(exc) and backoff.wait():
                    continue
                with lock:
                    out.failed[node] = error_code(exc)
                return
            out.counts.add()
            with lock:
                out.tagged[node] = iid
            return

    if node_ids:
        with ThreadPoolExecutor(max_workers=max(1, min(workers, len(node_ids)))) as pool:
            list(pool.map(one, node_ids.items()))
    return out


@dataclass
class AddressResult:
    found: dict[str, tuple[str, str]] = field(default_factory=dict)  # node -> (ip, hostname)
    missing: dict[str, str] = field(default_factory=dict)  # node -> reason
    rounds: int = 0
    counts: Counts = field(default_factory=Counts)


def _chunks(items: list[str], size: int) -> Iterator[list[str]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def _describe(ec2: Any, ids: list[str], counts: Counts) -> dict[str, dict[str, Any]]:
    """id -> instance for the ids EC2 shows now (unknown ids are left out, not errors); the
    chunks of :data:`FILTER_VALUES_MAX` ids are read at once, on a thread each (a round costs
    one call's latency, not five)."""

    def chunk_of(chunk: list[str]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            kw: dict[str, Any] = {
                "Filters": [{"Name": "instance-id", "Values": chunk}],
                "MaxResults": PAGE_SIZE,
            }
            if token:
                kw["NextToken"] = token
            try:
                page = ec2.describe_instances(**kw)
            except (ClientError, BotoCoreError) as exc:
                counts.add(exc)
                raise
            counts.add()
            for res in page.get("Reservations", []):
                out += res.get("Instances", [])
            token = page.get("NextToken")
            if not token:
                return out

    chunks = list(_chunks(ids, FILTER_VALUES_MAX))
    if len(chunks) <= 1:
        found = [chunk_of(c) for c in chunks]
    else:
        with ThreadPoolExecutor(max_workers=len(chunks)) as pool:
            found = list(pool.map(chunk_of, chunks))
    return {inst["InstanceId"]: inst for part in found for inst in part}


def read_addresses(
    ec2: Any,
    node_ids: dict[str, str],
    *,
    deadline_s: float = ADDRESS_DEADLINE_S,
    report: Callable[[dict[str, tuple[str, str]]], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> AddressResult:
    """Each node's (private IP, private DNS name), read until every instance is visible with a
    ``PrivateIpAddress`` or ``deadline_s`` passes. ``report`` gets each round's new finds at
    once, so Slurm learns most addresses without waiting for the slowest instance. Missing at
    the end: :data:`NOT_VISIBLE` (EC2 never showed the id), :data:`NO_ADDRESS` (shown without a
    private IP), ``Instance<state>`` (it went away), or the error code that ended the reads.
    With ``deadline_s=0`` it makes exactly one round."""
    out = AddressResult()
    pending = dict(node_ids)
    reason = dict.fromkeys(pending, NOT_VISIBLE)
    backoff = Backoff(clock() + deadline_s, clock=clock, sleep=sleep)
    while pending:
        out.rounds += 1
        try:
            seen = _describe(ec2, sorted(set(pending.values())), out.counts)
        except (ClientError, BotoCoreError) as exc:
            if retryable(exc) and backoff.wait():
                continue
            code = error_code(exc)
            log.error("DescribeInstances for %d instances failed: %s", len(pending), exc)
            out.missing.update(dict.fromkeys(pending, code))
            return out
        new: dict[str, tuple[str, str]] = {}
        for node, iid in list(pending.items()):
            inst = seen.get(iid)
            if inst is None:
                continue
            state = inst.get("State", {}).get("Name", "")
            if state in GONE_STATES:
                out.missing[node] = f"Instance{state.title().replace('-', '')}"
                del pending[node]
                continue
            ip = inst.get("PrivateIpAddress")
            if not ip:
                reason[node] = NO_ADDRESS
                continue
            new[node] = (ip, inst.get("PrivateDnsName") or ip)
            del pending[node]
        if new:
            out.found.update(new)
            if report is not None:
                report(new)
        if pending and not backoff.wait():
            break
    out.missing.update({n: reason[n] for n in pending})
    return out
