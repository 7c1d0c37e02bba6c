"""The names coreburst writes into AWS and Slurm, and reads back: tag keys and reservation
prefixes. The stack (infra), the burst power programs (coreburst.burst) and the guardrails
daemon must agree on every one of them, so each is spelled here once.

A key is part of the contract with what is already deployed: instances launched, subnets
tagged and reservations placed by an older release carry these exact strings. Changing one
orphans them.

    >>> f"tag:{STACK_TAG_KEY}", f"{BACKOFF_PREFIX}od-1796000000000"
    ('tag:coreburst-stack', 'coreburst-backoff-od-1796000000000')
"""

from __future__ import annotations

# -- tag keys ----------------------------------------------------------------------------------
# On every resource the stack declares (infra/program.py) and every burst instance: the budget
# filters on it, and the guardrails' and resume program's IAM policies only allow writes on
# resources that carry it.
STACK_TAG_KEY = "coreburst-stack"
# The cluster (pool) a burst instance or launch template belongs to.
CLUSTER_TAG_KEY = "coreburst-cluster"
# The Slurm node name of a burst instance (the resume program tags it; the node's user data
# waits for it; the reconciler matches instances to nodes by it).
NODE_TAG_KEY = "coreburst-slurm-node"
# The resume batch's ClientToken, on every instance it launched: a run that died before tagging
# its instances with node names left instances the next run (or the reconciler) can find.
LAUNCH_TAG_KEY = "coreburst-launch"
# Who a burst instance was launched for: AWS cost and Slurm jobs join on these (coreburst cost
# report; Cost Explorer once they are activated as cost allocation tags).
JOB_TAG_KEY = "coreburst-job"
USER_TAG_KEY = "coreburst-user"
ACCOUNT_TAG_KEY = "coreburst-account"
OWNER_TAG_KEYS = (JOB_TAG_KEY, USER_TAG_KEY, ACCOUNT_TAG_KEY)
# On every private subnet (value "private"): the resume program looks a zone's subnet up by it.
PRIVATE_SUBNET_TAG = "coreburst-subnet"

# -- Slurm reservation name prefixes -------------------------------------------------------------
# A pool held after capacity errors: ``coreburst-backoff-<pool>-<epoch ms>``, a MAINT reservation
# that ends by itself.
BACKOFF_PREFIX = "coreburst-backoff-"
# A pool held after repeated bootstrap failures: ``coreburst-protect-<pool>``, until an operator
# deletes it.
PROTECT_PREFIX = "coreburst-protect-"
# The resume program's spend gate holds: ``coreburst-spend-<ceil USD>usd-<epoch ms>-<pid>``
# (the name carries the projected cost: Slurm 22.05 reservations have no comment field). The
# burst-reconcile rule deletes only these.
SPEND_HOLD_PREFIX = "coreburst-spend-"

# -- shared settings ---------------------------------------------------------------------------
# coreburst:burst.capacityBackoffS's default (seconds), the one capacity back-off: the resume
# program writes the value it used into each failure it audits (``backoff_s``), and the
# guardrails daemon's burst-reconcile rule holds the pool that long (coreburst/burst/holds.py);
# an audit event without one (an older resume program) is held this long.
CAPACITY_BACKOFF_S = 600
