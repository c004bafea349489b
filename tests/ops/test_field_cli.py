"""``dealbase field``: an operator defines, lists, changes and deletes a tenant's custom fields
with the rules the API keeps, and gets one line (exit 2) for a broken one."""

from __future__ import annotations

import json

from dealbase.db.database import Database
from tests.ops.conftest import RunCli
from tests.support import TenantWorld, build_tenant


def test_an_operator_defines_lists_archives_and_deletes_a_field(
    run_cli: RunCli, database: Database
) -> None:
    tenant = str(build_tenant(database).tenant.id)

    defined = run_cli(
        "field", "define", "--tenant", tenant, "--record", "deal", "--name", "tier",
        "--label", "Tier", "--type", "single_select", "--option", "Gold", "--option", "Silver",
        "--filterable", "--json",
    )  # fmt: skip
    field = json.loads(defined.stdout)
    listed = run_cli("field", "list", "--tenant", tenant, "--record", "deal", "--json")
    archived = run_cli("field", "change", field["id"], "--tenant", tenant, "--archived", "--json")
    deleted = run_cli("field", "delete", field["id"], "--tenant", tenant)
    after = run_cli("field", "list", "--tenant", tenant, "--json")

    assert defined.exit_code == 0, defined
    assert (field["record"], field["name"], field["filterable"]) == ("deal", "tier", True)
    assert [option["label"] for option in field["options"]] == ["Gold", "Silver"]
    assert [each["id"] for each in json.loads(listed.stdout)] == [field["id"]]
    assert json.loads(archived.stdout)["archived"] is True
    assert (deleted.exit_code, deleted.stdout.strip()) == (0, f"deleted field {field['id']}")
    assert json.loads(after.stdout) == []


def test_a_broken_definition_is_one_line_naming_each_rule(
    run_cli: RunCli, database: Database
) -> None:
    world: TenantWorld = build_tenant(database)

    refused = run_cli(
        "field", "define", "--tenant", str(world.tenant.id), "--record", "customer",
        "--name", "email", "--label", "Email", "--type", "boolean", "--max-length", "5",
    )  # fmt: skip
    deleting = run_cli("field", "delete", "01a2008c-1e00-7000-8b1c-2a3b4c5d6e7f",
                       "--tenant", str(world.tenant.id))  # fmt: skip

    assert refused.exit_code == 2, refused
    assert refused.stderr.count("\n") == 1
    assert "name:" in refused.stderr and "max_length:" in refused.stderr
    assert deleting.exit_code == 1
    assert "No custom field has the id" in deleting.stderr
