"""What an EC2 launch error means, and what the burst side does about it: one table.

The codes are EC2's ("Error codes for the Amazon EC2 API", EC2 API reference; CreateFleet
"Response Elements": an ``instant`` fleet it cannot fill answers HTTP 200 with one
``CreateFleetError`` per launch specification in ``Errors``). Each code falls in one class:

=========== ================================================ =====================================
class       codes (examples)                                 what the resume program does
=========== ================================================ =====================================
capacity    InsufficientInstanceCapacity,                    fail the nodes now (the job requeues
            InsufficientReservedInstanceCapacity,            and may start at once elsewhere);
            InsufficientHostCapacity, InsufficientCapacity,  back that type in that zone off; when
            SpotMaxPriceTooLow, InsufficientFreeAddresses-   every type and zone of the pool is
            InSubnet                                         out, back the whole pool off
quota       VcpuLimitExceeded, MaxSpotInstanceCountExceeded, fail the nodes, hold the pool until an
            InstanceLimitExceeded                            operator lifts it, alert (retrying
                                                             cannot help until the quota rises)
throttle    RequestLimitExceeded, Throttling,                retried with backoff (botocore); still
            InternalError, ServiceUnavailable, Unavailable   failing: the nodes fail, no backoff
invalid     InvalidParameterValue, InvalidLaunchTemplateId.*, fail the nodes, hold the pool, alert
            UnauthorizedOperation, Unsupported, ...          (the same request fails every time)
=========== ================================================ =====================================

``UnfulfillableCapacity`` says only that the fleet could not be filled ("Unable to fulfill
capacity due to your request configuration"); the real reason is another entry of the same
``Errors`` list, so :func:`resolve` looks past it. An unknown code is ``invalid``: it is never
retried in a loop, and a person is told.

    >>> classify("InsufficientReservedInstanceCapacity")
    'capacity'
    >>> resolve(["UnfulfillableCapacity", "VcpuLimitExceeded"])
    'VcpuLimitExceeded'
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

ErrorClass = Literal["capacity", "quota", "throttle", "invalid"]

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
}

ACTIONS: dict[ErrorClass, str] = {
    "capacity": "nodes failed at once (jobs requeue); the type/zone backs off, the pool too "
    "when nothing is left",
    "quota": "nodes failed; the pool is held until an operator lifts it (quota)",
    "throttle": "retried with backoff; still failing, the nodes failed without backoff",
    "invalid": "nodes failed; the pool is held until an operator lifts it (the request is "
    "wrong and would fail again)",
}


def classify(code: str) -> ErrorClass:
    """The class of one EC2 error code; an unknown code (or a pointer alone) is ``invalid``."""
    return _TABLE.get(code, "invalid")


def resolve(codes: Iterable[str | None]) -> str | None:
    """The code that says why, from a CreateFleet ``Errors`` list's codes in order: the first
    one that is not ``UnfulfillableCapacity`` (that one only when it is alone)."""
    seen = [c for c in codes if c]
    real = [c for c in seen if c != UNFULFILLABLE]
    if real:
        return real[0]
    return seen[0] if seen else None
