"""``python -m guardrails`` runs the guardrails CLI."""

from guardrails.cli import main

if __name__ == "__main__":  # not on import (pkgutil.walk_packages imports every module)
    main()
