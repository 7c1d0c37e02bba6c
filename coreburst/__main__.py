"""``python -m coreburst ...`` runs the ``coreburst`` command."""

from coreburst.cli import main

main()
