"""A loopback HTTP proxy in front of moto server (or the lab's CapacityProxy) that answers as
EC2 does at scale where moto does not: it throttles, and it is eventually consistent.

* **Throttling** (EC2 Developer Guide, "Request throttling for the Amazon EC2 API"): a token
  bucket per action, with the documented request-token sizes and refill rates (below; a test
  may set its own). A request that finds its bucket empty is answered ``RequestLimitExceeded``
  with HTTP 503, in EC2's error shape (EC2 API reference, "Error codes for the Amazon EC2 API":
  RequestLimitExceeded is a server error, 500-series; "Example error response" gives the
  ``<Response><Errors><Error>`` document). The message text is made up.
* **Eventual consistency** (EC2 Developer Guide, "Eventual consistency in the Amazon EC2
  API"): an instance id first seen in a CreateFleet or RunInstances answer less than
  ``hide_s`` ago is unknown: a DescribeInstances filter leaves it out, and naming it
  (DescribeInstances ``InstanceId.N``, CreateTags ``ResourceId.N``, TerminateInstances)
  gets ``InvalidInstanceID.NotFound`` (HTTP 400, the guide's example error). Younger than
  ``no_ip_s``, or in its first ``no_ip_reads`` descriptions (a count, for tests that must not
  depend on timing), it is described without ``privateIpAddress`` / ``privateDnsName``.

Every other request goes upstream unchanged. Counters: ``calls``, ``throttled`` and
``hidden`` (answers changed by visibility), by action.

    >>> faults = Ec2Faults(moto_url, hide_s=3, no_ip_s=5).start()  # doctest: +SKIP
    >>> ec2 = fake_session().client("ec2", endpoint_url=faults.url)  # doctest: +SKIP
"""

from __future__ import annotations

import re
import threading
import time
import uuid
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import parse_qs

from coreburst.sandbox.loopback import LoopbackServer, forward

EC2_NS = "http://ec2.amazonaws.com/doc/2016-11-15/"

# EC2 Developer Guide, "Request throttling for the Amazon EC2 API", "Request token bucket sizes
# and refill rates": (bucket maximum capacity, refill per second). Each action has its own
# bucket of its category's size.
NON_MUTATING = (100.0, 20.0)  # Describe*, List*, Search*, Get*
# "Unfiltered and unpaginated non-mutating actions": these actions, requested with neither a
# filter nor pagination, draw on a smaller bucket of their own.
UNFILTERED = (50.0, 10.0)
UNFILTERED_ACTIONS = frozenset(
    {
        "DescribeInstances",
        "DescribeInstanceStatus",
        "DescribeNetworkInterfaces",
        "DescribeSecurityGroups",
        "DescribeSnapshots",
        "DescribeSpotInstanceRequests",
        "DescribeVolumes",
    }
)
MUTATING = (50.0, 5.0)  # everything else (CreateFleet among them)
# "Uncategorized actions" this project calls.
UNCATEGORIZED = {
    "CreateTags": (100.0, 10.0),
    "DeleteTags": (100.0, 10.0),
    "RunInstances": (5.0, 2.0),
    "TerminateInstances": (100.0, 5.0),
}

_THROTTLED = (
    '<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error>'
    "<Code>RequestLimitExceeded</Code><Message>Request limit exceeded.</Message>"
    "</Error></Errors><RequestID>{rid}</RequestID></Response>"
)
_NOT_FOUND = (
    '<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error>'
    "<Code>InvalidInstanceID.NotFound</Code><Message>The instance ID '{iid}' does not exist"
    "</Message></Error></Errors><RequestID>{rid}</RequestID></Response>"
)
_INSTANCE_ID = re.compile(r"i-[0-9a-f]{8,17}")
# Query parameters that name instances, per action (botocore's ec2 model serialises lists as
# Name.N).
_NAMES_INSTANCES = {
    "DescribeInstances": "InstanceId.",
    "TerminateInstances": "InstanceId.",
    "CreateTags": "ResourceId.",
    "DeleteTags": "ResourceId.",
}


def bucket_for(action: str, form: dict[str, list[str]]) -> tuple[str, tuple[float, float]]:
    """(bucket key, (capacity, refill/s)) as the throttling guide documents for ``action``."""
    if action in UNCATEGORIZED:
        return action, UNCATEGORIZED[action]
    if action.startswith(("Describe", "List", "Search", "Get")):
        paged = "MaxResults" in form or "NextToken" in form
        filtered = any(k.startswith("Filter.") for k in form)
        if action in UNFILTERED_ACTIONS and not (paged or filtered):
            return f"{action} (unfiltered)", UNFILTERED
        return action, NON_MUTATING
    return action, MUTATING


@dataclass
class TokenBucket:
    """The token bucket the throttling guide describes: one token per request, refilled at a
    set rate up to the capacity; an empty bucket refuses."""

    capacity: float
    refill_per_s: float
    tokens: float
    stamp: float

    def take(self, now: float) -> bool:
        self.tokens = min(self.capacity, self.tokens + (now - self.stamp) * self.refill_per_s)
        self.stamp = now
        if self.tokens >= 1:
            self.tokens -= 1
            return True
        return False


def _local(tag: str) -> str:
    return tag.rpartition("}")[2]


class Ec2Faults:
    """The proxy (see the module doc). ``throttle``: apply the buckets; ``limits``: per bucket
    key (action, or ``"<action> (unfiltered)"``) the (capacity, refill/s) to use instead of the
    documented one; ``hide_s`` / ``no_ip_s``: the visibility windows. All may be changed while
    it runs; :meth:`reset` empties buckets' history, counters and known instances."""

    def __init__(
        self,
        upstream: str,
        *,
        throttle: bool = True,
        limits: dict[str, tuple[float, float]] | None = None,
        hide_s: float = 0.0,
        no_ip_s: float = 0.0,
        no_ip_reads: int = 0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.upstream = upstream.rstrip("/")
        self.throttle = throttle
        self.limits = dict(limits or {})
        self.hide_s = hide_s
        self.no_ip_s = no_ip_s
        self.no_ip_reads = no_ip_reads
        self._reads: Counter[str] = Counter()
        self.clock = clock
        self.calls: Counter[str] = Counter()
        self.throttled: Counter[str] = Counter()
        self.hidden: Counter[str] = Counter()
        self._buckets: dict[str, TokenBucket] = {}
        self._born: dict[str, float] = {}
        self._lock = threading.Lock()
        self._server = LoopbackServer(self._handle)
        self.url = self._server.url

    def start(self) -> Ec2Faults:
        self._server.start()
        return self

    def stop(self) -> None:
        self._server.stop()

    def reset(self) -> None:
        with self._lock:
            self.calls.clear()
            self.throttled.clear()
            self.hidden.clear()
            self._buckets.clear()
            self._born.clear()
            self._reads.clear()

    # -- decisions (pure but for the clock) ------------------------------------------------
    def _admit(self, action: str, form: dict[str, list[str]]) -> bool:
        key, documented = bucket_for(action, form)
        cap, rate = self.limits.get(key, documented)
        now = self.clock()
        with self._lock:
            self.calls[action] += 1
            if not self.throttle:
                return True
            b = self._buckets.get(key)
            if b is None or (b.capacity, b.refill_per_s) != (cap, rate):
                b = self._buckets[key] = TokenBucket(cap, rate, cap, now)
            if b.take(now):
                return True
            self.throttled[action] += 1
            return False

    def age(self, iid: str) -> float | None:
        """Seconds since the proxy first saw ``iid`` launched (None: not launched here)."""
        with self._lock:
            born = self._born.get(iid)
        return None if born is None else self.clock() - born

    def _young(self, iid: str, window: float) -> bool:
        a = self.age(iid)
        return a is not None and a < window

    def _early_read(self, iid: str) -> bool:
        """Count a description of an instance launched here; True within its first
        ``no_ip_reads``."""
        with self._lock:
            if iid not in self._born:
                return False
            self._reads[iid] += 1
            return self._reads[iid] <= self.no_ip_reads

    def _note_launched(self, body: bytes) -> None:
        try:
            root = ET.fromstring(body)
        except ET.ParseError:
            return
        now = self.clock()
        with self._lock:
            for el in root.iter():
                text = (el.text or "").strip()
                if _INSTANCE_ID.fullmatch(text):
                    self._born.setdefault(text, now)

    def _filter_described(self, body: bytes) -> bytes:
        """Leave out hidden instances (and reservations left empty); strip young ones' private
        address."""
        try:
            root = ET.fromstring(body)
        except ET.ParseError:
            return body
        changed = False
        for rset in [e for e in root if _local(e.tag) == "reservationSet"]:
            for res in list(rset):
                for iset in [e for e in res if _local(e.tag) == "instancesSet"]:
                    for inst in list(iset):
                        iid = next(
                            (c.text or "" for c in inst if _local(c.tag) == "instanceId"), ""
                        )
                        if self._young(iid, self.hide_s):
                            iset.remove(inst)
                            changed = True
                        elif self._young(iid, self.no_ip_s) or self._early_read(iid):
                            for c in list(inst):
                                if _local(c.tag) in ("privateIpAddress", "privateDnsName"):
                                    inst.remove(c)
                                    changed = True
                    if len(iset) == 0:
                        rset.remove(res)
        if not changed:
            return body
        with self._lock:
            self.hidden["DescribeInstances"] += 1
        ET.register_namespace("", EC2_NS)
        return ET.tostring(root, encoding="utf-8", xml_declaration=True)

    def _handle(
        self, method: str, path: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, dict[str, str], bytes]:
        form = parse_qs(body.decode("utf-8", "replace")) if body else {}
        action = (form.get("Action") or [""])[0]
        xml = {"Content-Type": "text/xml;charset=UTF-8"}
        if action and not self._admit(action, form):
            return 503, xml, _THROTTLED.format(rid=uuid.uuid4()).encode()
        prefix = _NAMES_INSTANCES.get(action)
        if prefix is not None and self.hide_s > 0:
            for k, v in form.items():
                if k.startswith(prefix) and v and self._young(v[0], self.hide_s):
                    with self._lock:
                        self.hidden[action] += 1
                    doc = _NOT_FOUND.format(iid=v[0], rid=uuid.uuid4()).encode()
                    return 400, xml, doc
        status, out_headers, answer = self._fetch(method, path, headers, body)
        if status == 200 and action in ("CreateFleet", "RunInstances"):
            self._note_launched(answer)
        if (
            status == 200
            and action == "DescribeInstances"
            and (self.hide_s or self.no_ip_s or self.no_ip_reads)
        ):
            answer = self._filter_described(answer)
        return status, out_headers, answer

    def _fetch(
        self, method: str, path: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, dict[str, str], bytes]:
        return forward(self.upstream, method, path, headers, body)
