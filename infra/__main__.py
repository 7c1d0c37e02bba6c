"""Entry point Pulumi runs (``main: infra/`` in Pulumi.yaml)."""

import sys
from pathlib import Path

# Pulumi puts this directory, not the repository root, on sys.path; make `import infra` work
# even when the project is not pip-installed into the stack's virtualenv.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from infra.program import main

main()
