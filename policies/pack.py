"""Every policy of the pack, in one list (the meta-test and the runner walk it)."""

from __future__ import annotations

from pulumi_policy import Policy

from policies import ec2, network, stack, storage, tags

PACK_NAME = "coreburst"


def all_policies() -> list[Policy]:
    return [*tags.POLICIES, *ec2.POLICIES, *storage.POLICIES, *network.POLICIES, *stack.POLICIES]
