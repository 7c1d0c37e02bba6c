"""``python -m coreburst.sandbox.guardrails <args of python -m guardrails>``: the guardrails CLI
with the
test hooks (``coreburst.sandbox.hooks``) read from the environment and injected: a shifted or
sped-up
clock and a pause point. A bad hook value is one line, exit 2, before anything runs.

    $ COREBURST_TEST_HOOKS=1 COREBURST_CLOCK_START=2026-01-05T10:00:00+00:00 \\
      python -m coreburst.sandbox.guardrails once --config g.yaml
"""

from __future__ import annotations

import sys

from coreburst.sandbox import hooks


def main() -> None:
    try:
        clock, pause = hooks.clock(), hooks.pause()
    except hooks.TestHookError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    from guardrails.cli import main as cli_main

    cli_main(clock=clock, pause=pause)


if __name__ == "__main__":
    main()
