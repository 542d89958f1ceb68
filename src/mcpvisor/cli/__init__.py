"""The ``mcpvisor`` command: typer commands, JSON output and the demo (SPEC §0).

The only package that parses argv, installs log handlers, handles signals and sets exit codes.
It may import every other package; none imports it.
"""
