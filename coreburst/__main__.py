"""``python -m coreburst ...`` runs the ``coreburst`` command (and is its console script).

A power program in the layout slurmctld runs it (``burst <kind> --stack S --stack-dir D
<hostlist>``) starts without the command-line framework: coreburst/burst/programs.py."""

import sys


def main() -> None:
    if len(sys.argv) == 8 and sys.argv[1] == "burst":
        from coreburst.burst.programs import main as power_program

        code = power_program(sys.argv[2:])
        if code is not None:
            sys.exit(code)
    from coreburst.cli import main as cli

    cli()


if __name__ == "__main__":
    main()
