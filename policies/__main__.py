"""Entry point the Pulumi CLI runs for ``--policy-pack policies``.

$ pulumi preview --policy-pack policies --policy-pack-config policies/config/dev.json
"""

import sys
from pathlib import Path

# The pack runs from policies/; the repo root makes `infra` (the catalog) and `policies`
# importable even when the venv has no editable install.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pulumi_policy import EnforcementLevel, PolicyPack

from policies.pack import PACK_NAME, all_policies

PolicyPack(
    name=PACK_NAME,
    policies=all_policies(),
    enforcement_level=EnforcementLevel.MANDATORY,
    description="coreburst guardrails: cost tags, EFA layout, encryption, ingress, cost ceiling",
)
