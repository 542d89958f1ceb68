"""``python -m mcpvisor``: the same as the ``mcpvisor`` command."""

from mcpvisor.cli.main import main

main()
