"""``python -m mcpvisor``: the same as the ``mcpvisor`` command."""

from mcpvisor.cli.entry import main

main()
