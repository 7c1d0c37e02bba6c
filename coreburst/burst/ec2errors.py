"""What an EC2 launch error means, and what the burst side does about it: one table.

The codes are EC2's ("Error codes for the Amazon EC2 API", EC2 API reference,
https://docs.aws.amazon.com/AWSEC2/latest/APIReference/errors-overview.html; CreateFleet
"Response Elements": an ``instant`` fleet it cannot fill answers HTTP 200 with one
``CreateFleetError`` per launch specification in ``Errors``). Each code falls in one class:

=========== ================================================ =====================================
class       codes (examples)                                 what the resume program does
=========== ================================================ =====================================
capacity    InsufficientInstanceCapacity,                    fail the nodes now (the job requeues
            InsufficientReservedInstanceCapacity,            and may start at once elsewhere);
            InsufficientHostCapacity, InsufficientCapacity,  back that type in that zone off for
            SpotMaxPriceTooLow, InsufficientFreeAddresses-   ``capacityBackoffS``; when every type
            InSubnet, Unsupported (the type is not offered   and zone of the pool is out, back the
            in that zone), UnfulfillableCapacity alone       whole pool off as long
quota       VcpuLimitExceeded, MaxSpotInstanceCountExceeded, fail the nodes, hold the pool until an
            InstanceLimitExceeded                            operator lifts it, alert (retrying
                                                             cannot help until the quota rises)
throttle    RequestLimitExceeded, Throttling,                retried with backoff (botocore); still
            InternalError, ServiceUnavailable, Unavailable   failing: the nodes fail, no backoff
invalid     InvalidParameterValue, InvalidLaunchTemplateId.*, fail the nodes, hold the pool, alert
            UnauthorizedOperation, MissingParameter, ...     with EC2's message (the same request
                                                             fails every time)
unknown     a code not in this table                         fail the nodes, back the offered
                                                             choices off for a growing, bounded
                                                             time (:func:`backoff_s`), alert once;
                                                             never held for ever
=========== ================================================ =====================================

``UnfulfillableCapacity`` says only that the fleet could not be filled ("Unable to fulfill
capacity due to your request configuration"); when another entry of the same ``Errors`` list
says why, :func:`resolve` returns that one. Alone it is a capacity answer: for spot EC2 often
answers it by itself ("There is no Spot capacity available that matches your request").
``Unsupported`` in a CreateFleet error names one (type, zone) EC2 does not offer there; other
zones and types of the pool are still tried (ParallelCluster treats both as capacity errors).

    >>> classify("InsufficientReservedInstanceCapacity"), classify("UnfulfillableCapacity")
    ('capacity', 'capacity')
    >>> classify("InvalidAMIID.Malformed"), classify("SomethingNew")
    ('invalid', 'unknown')
    >>> resolve(["UnfulfillableCapacity", "VcpuLimitExceeded"])
    'VcpuLimitExceeded'
    >>> [backoff_s("SomethingNew", 600, n) for n in (1, 2, 3, 4, 9)]
    [600, 1200, 2400, 3600, 3600]
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

ErrorClass = Literal["capacity", "quota", "throttle", "invalid", "unknown"]

# The pointer code: never the reason by itself.
UNFULFILLABLE = "UnfulfillableCapacity"

_TABLE: dict[str, ErrorClass] = {
    # capacity: EC2 has none of this type here now; another type, zone or later may.
    "InsufficientInstanceCapacity": "capacity",
    "InsufficientReservedInstanceCapacity": "capacity",
    "InsufficientHostCapacity": "capacity",
    "InsufficientCapacity": "capacity",
    "InsufficientCapacityOnOutpost": "capacity",
    "SpotMaxPriceTooLow": "capacity",
    "InsufficientFreeAddressesInSubnet": "capacity",
    "CapacityBackoff": "capacity",  # coreburst's own: every type and zone is backed off
    # Alone (resolve() found no other reason), a capacity answer, mostly for spot.
    UNFULFILLABLE: "capacity",
    # In a CreateFleet error: this type is not offered in this zone (only that choice).
    "Unsupported": "capacity",
    # quota: the account may not run more until a limit is raised.
    "VcpuLimitExceeded": "quota",
    "MaxSpotInstanceCountExceeded": "quota",
    "InstanceLimitExceeded": "quota",
    "ResourceLimitExceeded": "quota",
    # throttle / transient service errors.
    "RequestLimitExceeded": "throttle",
    "Throttling": "throttle",
    "ThrottlingException": "throttle",
    "InternalError": "throttle",
    "InternalFailure": "throttle",
    "ServiceUnavailable": "throttle",
    "Unavailable": "throttle",
    # After launch (coreburst/burst/ec2io.py): EC2 had not shown the instance or its address
    # by the deadline (eventual consistency) or it ended at once; the node fails, the next
    # resume launches afresh: transient, nothing to back off or hold.
    "InvalidInstanceID.NotFound": "throttle",
    "InstanceNotVisible": "throttle",
    "NoPrivateIpAddress": "throttle",
    "InstanceTerminated": "throttle",
    # invalid: the request is wrong and fails the same way until someone fixes it.
    "UnauthorizedOperation": "invalid",
    "AuthFailure": "invalid",
    "OptInRequired": "invalid",
    "PendingVerification": "invalid",
    "Blocked": "invalid",
    "IdempotentParameterMismatch": "invalid",
    # coreburst's own (coreburst/burst/launch.py): the stack's resources are not tagged.
    "LaunchTemplateNotFound": "invalid",
    "SubnetNotFound": "invalid",
}
# EC2's client-error families (errors-overview.html, "Client error codes"): every
# ``Invalid...`` and ``Missing...`` code names a part of the request that is wrong.
_INVALID_PREFIXES = ("Invalid", "Missing")
# Codes that speak of one (type, zone) choice only: the reconciler's whole-pool backoff
# (coreburst/burst/holds.py) leaves them to the resume program's per-choice backoff.
CHOICE_ONLY = frozenset({"Unsupported"})
# An unknown code's backoff: capacityBackoffS, doubled on each repeat, at most this many times
# capacityBackoffS (and at least an hour when that is shorter): bounded, never for ever.
UNKNOWN_BACKOFF_MAX_FACTOR = 6
UNKNOWN_BACKOFF_MIN_CAP_S = 3600

ACTIONS: dict[ErrorClass, str] = {
    "capacity": "nodes failed at once (jobs requeue); the type/zone backs off, the pool too "
    "when nothing is left",
    "quota": "nodes failed; the pool is held until an operator lifts it (quota)",
    "throttle": "retried with backoff; still failing, the nodes failed without backoff",
    "invalid": "nodes failed; the pool is held until an operator lifts it (the request is "
    "wrong and would fail again)",
    "unknown": "nodes failed; the choices offered back off for a growing, bounded time; "
    "alerted once",
}


def classify(code: str) -> ErrorClass:
    """The class of one EC2 error code (``unknown`` for a code this table does not know)."""
    if code in _TABLE:
        return _TABLE[code]
    if code.startswith(_INVALID_PREFIXES):
        return "invalid"
    return "unknown"


def backoff_s(code: str, capacity_backoff_s: int, strike: int = 1) -> int:
    """Seconds to back a choice off after ``code``: ``capacity_backoff_s`` for a capacity
    answer; for an unknown code, doubled on each repeat (``strike`` 1, 2, ...) up to
    max(:data:`UNKNOWN_BACKOFF_MAX_FACTOR` x ``capacity_backoff_s``,
    :data:`UNKNOWN_BACKOFF_MIN_CAP_S`)."""
    if classify(code) != "unknown":
        return capacity_backoff_s
    cap = max(UNKNOWN_BACKOFF_MAX_FACTOR * capacity_backoff_s, UNKNOWN_BACKOFF_MIN_CAP_S)
    return int(min(cap, capacity_backoff_s * 2 ** max(0, strike - 1)))


def resolve(codes: Iterable[str | None]) -> str | None:
    """The code that says why, from a CreateFleet ``Errors`` list's codes in order: the first
    one that is not ``UnfulfillableCapacity`` (that one only when it is alone)."""
    seen = [c for c in codes if c]
    real = [c for c in seen if c != UNFULFILLABLE]
    if real:
        return real[0]
    return seen[0] if seen else None
