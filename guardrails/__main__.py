"""``python -m guardrails`` runs the guardrails CLI."""

from guardrails.cli import main

main()
