"""``python -m mcpvisor``: the same as the ``mcpvisor`` command."""

from mcpvisor.cli.main import main  # noqa: TID251 - the entry point is the CLI layer

main()
