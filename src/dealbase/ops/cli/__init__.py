"""The ``dealbase`` command; with ``--json`` a command prints exactly one JSON value on stdout.

``common`` holds the root command and what every command shares; each other module, one group
of commands (``top_level``: those outside the groups).
"""

from __future__ import annotations

# top_level's commands are on cli once it is imported.
from dealbase.ops.cli import departments, fields, keys, tenants, top_level  # noqa: F401
from dealbase.ops.cli.common import cli

# The groups, in the order ``dealbase --help`` lists them (after the commands of top_level).
cli.add_typer(tenants.tenant_cli, name="tenant")
cli.add_typer(departments.department_cli, name="department")
cli.add_typer(departments.employee_cli, name="employee")
cli.add_typer(keys.key_cli, name="key")
cli.add_typer(fields.field_cli, name="field")

__all__ = ["cli", "main"]


def main() -> None:
    cli()
