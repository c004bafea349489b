"""The tools integrators point at dealbase, run as they run them, against a live ``dealbase serve``.

- ``redocly lint`` (recommended rules) and ``spectral lint`` (``spectral:oas``) over the served
  ``/openapi.json``: no error, and no example that breaks its own schema (``integrators/`` holds
  the two rule sets; warnings are printed and summed up in one pytest warning).
- ``openapi-typescript`` with its defaults, then ``tsc --strict`` over ``integrators/
  readme_calls.mts`` (the README's calls, sent with ``openapi-fetch``), then node runs it.
- ``openapi-python-client`` with its defaults, then ``mypy --strict`` over ``integrators/
  readme_calls.py`` (the same calls), then Python runs it.
- graphql-http's ``auditServer`` against ``/graphql``: no MUST failed, no SHOULD warned.
- A tenant's own document (``/api/v1/integration/openapi.json``, its customers'
  ``custom_fields`` typed): linted as the public one, then the same two generators over it:
  ``integrators/tenant_custom_fields.*`` set the fields' values as typed, type-check and run;
  ``tenant_custom_fields_mistyped.*`` set them with values of the wrong types, and the checkers
  must name each.

The npm tools are the versions ``package-lock.json`` pins, installed by ``npm ci`` into
``contract_tests/node_modules`` once per change of the lock file, whichever test process comes
first (the others wait on a file lock). openapi-python-client is pinned in the ``dev`` extra.
"""

from __future__ import annotations

import collections
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from dealbase.db.database import Database
from dealbase.ops import admin
from tests.support import (
    IN_CI,
    SERVER_START_TIMEOUT_S,
    Credentials,
    build_tenant,
    dealbase_serve,
    wait_until_served,
)

CONTRACT_TESTS = Path(__file__).parent
INTEGRATORS = CONTRACT_TESTS / "integrators"
NODE_MODULES = CONTRACT_TESTS / "node_modules"
PACKAGE_LOCK = CONTRACT_TESTS / "package-lock.json"
# Holds the hash of the package-lock.json that node_modules was installed from (npm ci removes
# node_modules first, so a partial install leaves no marker).
INSTALLED_FROM = NODE_MODULES / ".installed-from-package-lock"
INSTALL_LOCK = CONTRACT_TESTS / ".npm-ci.lock"
# @redocly/cli 2 runs on Node.js 20.19 or later.
NODE_AT_LEAST = (20, 19)
VENV_BIN = Path(sys.executable).parent
# npm ci took 12 s here with an empty cache (65 MB from the registry), 10 s with a full one.
NPM_CI_TIMEOUT_S = 600
TOOL_TIMEOUT_S = 300

# The redocly and spectral CLIs ask about updates and send usage data unless told not to.
QUIET_TOOLS = {
    "REDOCLY_TELEMETRY": "off",
    "REDOCLY_SUPPRESS_UPDATE_NOTICE": "true",
    "NO_UPDATE_NOTIFIER": "1",
    "NPM_CONFIG_UPDATE_NOTIFIER": "false",
}


def _node_and_npm() -> tuple[str, str]:
    """node and npm, recent enough; else the test fails under CI=true and skips elsewhere."""
    node, npm = shutil.which("node"), shutil.which("npm")
    wanted = f"Node.js {NODE_AT_LEAST[0]}.{NODE_AT_LEAST[1]} or later, with npm"
    if node is None or npm is None:
        problem = f"the integrator tools need {wanted} on PATH (none found)"
    else:
        printed = _run([node, "--version"], cwd=CONTRACT_TESTS).stdout.strip()
        major, minor, *_ = printed.removeprefix("v").split(".")
        if (int(major), int(minor)) >= NODE_AT_LEAST:
            return node, npm
        problem = f"the integrator tools need {wanted} (found {printed})"
    if IN_CI:
        pytest.fail(problem)
    pytest.skip(problem)


@pytest.fixture(scope="session")
def node() -> str:
    """node, with ``contract_tests/node_modules`` installed as ``package-lock.json`` pins it."""
    node, npm = _node_and_npm()
    wanted = hashlib.sha256(PACKAGE_LOCK.read_bytes()).hexdigest()
    with INSTALL_LOCK.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not INSTALLED_FROM.exists() or INSTALLED_FROM.read_text() != wanted:
            # No install scripts: none of the tools needs one, and one of their dependencies
            # would only report the install to its vendor.
            installed = _run(
                [npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund", "--prefer-offline"],
                cwd=CONTRACT_TESTS,
                timeout=NPM_CI_TIMEOUT_S,
            )
            assert installed.returncode == 0, f"npm ci failed: {_said(installed)}"
            INSTALLED_FROM.write_text(wanted)
    return node


def _said(completed: subprocess.CompletedProcess[str]) -> str:
    """What a command printed, for a failure's message."""
    return f"exit status {completed.returncode}\n{completed.stdout}\n{completed.stderr}"


def _tool(name: str) -> str:
    return str(NODE_MODULES / ".bin" / name)


def _run(
    command: Sequence[str],
    *,
    cwd: Path,
    env: dict[str, str] | None = None,
    timeout: float = TOOL_TIMEOUT_S,
) -> subprocess.CompletedProcess[str]:
    """``command``, its output as text, PATH leading to this venv (openapi-python-client runs
    ruff from it), the tools quiet."""
    environment = {
        **os.environ,
        **QUIET_TOOLS,
        "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        **(env or {}),
    }
    # The commands are this module's own: the pinned tools, node, this venv's Python.
    return subprocess.run(  # noqa: S603
        command,
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.fixture(scope="module")
def live_server(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A ``dealbase serve`` on the session database, for every test of the module."""
    settings = {
        "DEALBASE_DATABASE_URL": database_url,
        "DEALBASE_LOG_LEVEL": "warning",
        # The graphql-http audit sends its 60 requests at once, far past a key's burst.
        "DEALBASE_RATE_LIMIT_KEY": "100000/s",
        "DEALBASE_RATE_LIMIT_KEY_BURST": "1000000",
        "DEALBASE_RATE_LIMIT_TENANT": "100000/s",
        "DEALBASE_RATE_LIMIT_TENANT_BURST": "1000000",
    }
    with dealbase_serve(tmp_path_factory.mktemp("integrator-tools-server"), settings) as server:
        wait_until_served(
            server.process, f"{server.base_url}/healthz", server.output, SERVER_START_TIMEOUT_S
        )
        yield server.base_url


@pytest.fixture(scope="module")
def served_document(live_server: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``/openapi.json`` as the live server serves it, in a file of its own."""
    response = httpx.get(f"{live_server}/openapi.json", timeout=30)
    response.raise_for_status()
    path = tmp_path_factory.mktemp("served-document") / "openapi.json"
    path.write_bytes(response.content)
    return path


@pytest.fixture
def department_key(database: Database) -> Credentials:
    """A new tenant's department key: each test's calls start from an empty department."""
    return build_tenant(database).key


def _program_settings(live_server: str, key: Credentials) -> dict[str, str]:
    """What the README's programs read from their environment."""
    return {
        "SERVER_URL": live_server,
        "API_KEY": key.api_key,
        "DEPARTMENT_ID": str(key.department_id),
    }


def _warn_about(tool: str, rules: list[str]) -> None:
    """The warnings a tool left, counted by rule, in pytest's warnings summary."""
    if rules:
        counted = ", ".join(
            f"{rule} x{count}" for rule, count in collections.Counter(rules).most_common()
        )
        warnings.warn(f"{tool}: {len(rules)} warnings ({counted})", UserWarning, stacklevel=2)


@pytest.fixture(params=["public", "tenant"])
def linted_document(request: pytest.FixtureRequest) -> Path:
    """The served ``/openapi.json``, then a tenant's own document (``tenant_document``)."""
    if request.param == "public":
        public: Path = request.getfixturevalue("served_document")
        return public
    tenant: TenantDocument = request.getfixturevalue("tenant_document")
    return tenant.path


def test_redocly_recommended_rules_find_no_error_and_no_invalid_example(
    node: str, linted_document: Path
) -> None:
    linted = _run(
        [
            _tool("redocly"),
            "lint",
            "--config",
            str(INTEGRATORS / "redocly.yaml"),
            "--format",
            "json",
            str(linted_document),
        ],
        cwd=linted_document.parent,
    )
    assert linted.stdout.lstrip().startswith("{"), _said(linted)
    report: dict[str, Any] = json.loads(linted.stdout)
    problems: list[dict[str, Any]] = report["problems"]
    lines = {
        severity: [
            f"{problem['ruleId']} at {problem['location'][0]['pointer']}: {problem['message']}"
            for problem in problems
            if problem["severity"] == severity
        ]
        for severity in ("error", "warn")
    }
    print("redocly lint warnings:", *lines["warn"], sep="\n  ")
    _warn_about("redocly lint", [p["ruleId"] for p in problems if p["severity"] == "warn"])
    assert not lines["error"], "redocly lint errors:\n" + "\n".join(lines["error"])
    assert linted.returncode == 0, _said(linted)


# spectral's JSON report numbers severities: 0 error, 1 warning, 2 information, 3 hint.
SPECTRAL_ERROR, SPECTRAL_WARNING = 0, 1


def test_spectral_oas_rules_find_no_error_and_no_invalid_example(
    node: str, linted_document: Path
) -> None:
    linted = _run(
        [
            _tool("spectral"),
            "lint",
            str(linted_document),
            "--ruleset",
            str(INTEGRATORS / ".spectral.yaml"),
            "--format",
            "json",
            "--quiet",
        ],
        cwd=linted_document.parent,
    )
    assert linted.stdout.lstrip().startswith("["), _said(linted)
    results: list[dict[str, Any]] = json.loads(linted.stdout)
    lines = {
        severity: [
            f"{result['code']} at {'.'.join(map(str, result['path']))}: {result['message']}"
            for result in results
            if result["severity"] == severity
        ]
        for severity in (SPECTRAL_ERROR, SPECTRAL_WARNING)
    }
    print("spectral lint warnings:", *lines[SPECTRAL_WARNING], sep="\n  ")
    _warn_about("spectral lint", [r["code"] for r in results if r["severity"] == SPECTRAL_WARNING])
    assert not lines[SPECTRAL_ERROR], "spectral lint errors:\n" + "\n".join(lines[SPECTRAL_ERROR])
    assert linted.returncode == 0, _said(linted)


def test_typescript_types_generated_with_defaults_compile_strict_and_run_the_readme_calls(
    node: str,
    served_document: Path,
    live_server: str,
    department_key: Credentials,
    tmp_path: Path,
) -> None:
    # The program and the generated types side by side, as in an integrator's project, with the
    # tools' node_modules linked in where tsc and node look for it.
    project = tmp_path / "typescript"
    project.mkdir()
    (project / "node_modules").symlink_to(NODE_MODULES, target_is_directory=True)
    for name in ("readme_calls.mts", "tsconfig.json"):
        shutil.copy(INTEGRATORS / name, project / name)

    generated = _run(
        [_tool("openapi-typescript"), str(served_document), "--output", "schema.ts"],
        cwd=project,
    )
    assert generated.returncode == 0, _said(generated)
    compiled = _run(
        [_tool("tsc"), "--project", "tsconfig.json", "--strict", "--pretty", "false"], cwd=project
    )
    assert compiled.returncode == 0, f"tsc --strict: {_said(compiled)}"
    ran = _run(
        [node, "out/readme_calls.mjs"],
        cwd=project,
        env=_program_settings(live_server, department_key),
    )
    assert ran.returncode == 0, _said(ran)
    assert "answered as the README shows" in ran.stdout


@pytest.fixture(scope="module")
def python_client(served_document: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder holding ``dealbase_client``, generated from the served document."""
    folder = tmp_path_factory.mktemp("python-client")
    generated = _run(
        [
            str(VENV_BIN / "openapi-python-client"),
            "generate",
            "--path",
            str(served_document),
            "--meta",
            "none",
            "--output-path",
            str(folder / "dealbase_client"),
            "--config",
            str(INTEGRATORS / "openapi-python-client.yaml"),
        ],
        cwd=folder,
    )
    assert generated.returncode == 0, _said(generated)
    # It warns of what it left out of the client, and still exits 0.
    assert "Warning" not in generated.stdout + generated.stderr, _said(generated)
    return folder


def _mypy_strict(program: Path, python_client: Path) -> list[str]:
    """The errors ``mypy --strict`` finds in ``program``, against the generated client."""
    type_checked = _run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            # The generated package is the tool's work: only the program's own errors count.
            "--follow-imports=silent",
            "--no-incremental",
            "--cache-dir",
            os.devnull,
            "--no-error-summary",
            str(program),
        ],
        cwd=python_client,
        env={"MYPYPATH": str(python_client)},
    )
    return type_checked.stdout.splitlines()


def test_python_client_generated_with_defaults_type_checks_and_runs_the_readme_calls(
    python_client: Path, live_server: str, department_key: Credentials
) -> None:
    program = INTEGRATORS / "readme_calls.py"
    ran = _run(
        [sys.executable, str(program)],
        cwd=python_client,
        env={"PYTHONPATH": str(python_client), **_program_settings(live_server, department_key)},
    )
    assert ran.returncode == 0, _said(ran)
    assert "answered as the README shows" in ran.stdout
    errors = _mypy_strict(program, python_client)
    assert not errors, "mypy --strict:\n" + "\n".join(errors)


def test_python_client_refuses_an_if_match_of_none_when_type_checked(python_client: Path) -> None:
    # httpx refuses a header whose value is None when the request is built; the generated
    # signature must say so, so that mypy points at the call rather than a crash inside httpx.
    program = INTEGRATORS / "if_match_from_a_response_without_etag.py"
    errors = _mypy_strict(program, python_client)
    assert [error.split(": ", 1)[1] for error in errors] == [
        'error: Argument "if_match" to "sync_detailed" has incompatible type "str | None";'
        ' expected "str | Unset"  [arg-type]'
    ], errors


def test_graphql_http_audit_finds_no_must_failure_and_no_should_warning(
    node: str, live_server: str, department_key: Credentials
) -> None:
    audited = _run(
        [node, str(INTEGRATORS / "graphql_audit.mjs")],
        cwd=INTEGRATORS,
        env=_program_settings(live_server, department_key),
    )
    assert audited.returncode == 0, _said(audited)
    results: list[dict[str, Any]] = json.loads(audited.stdout)
    assert len(results) > 50, results  # the whole audit ran, not a part of it
    notices = [result for result in results if result["status"] == "notice"]
    print("graphql-http audit notices (MAY):", *map(json.dumps, notices), sep="\n  ")
    failed = [result for result in results if result["status"] in ("warn", "error")]
    assert not failed, "graphql-http audit:\n" + "\n".join(map(json.dumps, failed))


# The tenant's customer fields: one of each type a client types apart, and a required one.
TENANT_FIELDS: list[dict[str, Any]] = [
    {"name": "seats", "label": "Seats", "type": "integer", "required": True},
    {"name": "revenue", "label": "Revenue", "type": "decimal"},
    {"name": "vip", "label": "VIP", "type": "boolean"},
    {"name": "renewal", "label": "Renewal", "type": "date"},
    {
        "name": "tier",
        "label": "Tier",
        "type": "single_select",
        "options": [{"label": "Gold"}, {"label": "Silver"}],
    },
]
API = "/api/v1/integration"


@dataclass(frozen=True)
class TenantDocument:
    """A tenant's own document in a file, its department's key, and its select's first option."""

    path: Path
    key: Credentials
    gold: str


@pytest.fixture(scope="module")
def tenant_document(
    live_server: str, database: Database, tmp_path_factory: pytest.TempPathFactory
) -> TenantDocument:
    world = build_tenant(database)
    fields_key = {"X-Api-Key": admin.issue_key(database, world.tenant.id, None, "fields").api_key}
    defined = [
        httpx.post(
            f"{live_server}{API}/custom-fields",
            json={"record": "customer", **field},
            headers=fields_key,
            timeout=30,
        )
        for field in TENANT_FIELDS
    ]
    assert [response.status_code for response in defined] == [201] * len(TENANT_FIELDS)
    response = httpx.get(f"{live_server}{API}/openapi.json", headers=world.key.headers, timeout=30)
    response.raise_for_status()
    path = tmp_path_factory.mktemp("tenant-document") / "openapi.json"
    path.write_bytes(response.content)
    return TenantDocument(path, world.key, defined[-1].json()["options"][0]["id"])


def _typescript_program(project: Path, name: str, tenant: TenantDocument) -> None:
    """``project`` holding the types generated from the tenant's document and the program
    ``name`` (its option id written in), with the tsconfig of the README's program."""
    project.mkdir()
    (project / "node_modules").symlink_to(NODE_MODULES, target_is_directory=True)
    program = (INTEGRATORS / name).read_text().replace("TIER_GOLD", tenant.gold)
    (project / name).write_text(program)
    tsconfig = json.loads((INTEGRATORS / "tsconfig.json").read_text())
    (project / "tsconfig.json").write_text(json.dumps({**tsconfig, "files": [name]}))
    generated = _run(
        [_tool("openapi-typescript"), str(tenant.path), "--output", "schema.ts"], cwd=project
    )
    assert generated.returncode == 0, _said(generated)


# A line of a mistyped program that the checker must refuse says so in a comment (`// refused:`,
# `# refused:`); each error names its line
# (tsc: the file, its line and column, and the error's code; mypy: an argument of a wrong type).
ERROR_OF_TSC = re.compile(r"\S+\((\d+),\d+\): error (TS\d+): ")
ERROR_OF_MYPY = re.compile(r"\S+:(\d+): error: Argument \"\w+\" .*\[arg-type\]$")


def _lines_marked(program: Path, marker: str) -> set[int]:
    """The numbers of ``program``'s lines that carry ``marker`` (a comment's)."""
    return {
        number for number, line in enumerate(program.read_text().splitlines(), 1) if marker in line
    }


def test_typescript_types_of_a_tenants_document_set_its_custom_fields_as_typed(
    node: str, tenant_document: TenantDocument, live_server: str, tmp_path: Path
) -> None:
    project = tmp_path / "typescript"
    _typescript_program(project, "tenant_custom_fields.mts", tenant_document)

    compiled = _run(
        [_tool("tsc"), "--project", "tsconfig.json", "--strict", "--pretty", "false"], cwd=project
    )
    assert compiled.returncode == 0, f"tsc --strict: {_said(compiled)}"
    ran = _run(
        [node, "out/tenant_custom_fields.mjs"],
        cwd=project,
        env=_program_settings(live_server, tenant_document.key),
    )
    assert ran.returncode == 0, _said(ran)
    assert "custom fields set as typed" in ran.stdout


def test_typescript_types_of_a_tenants_document_refuse_custom_values_of_wrong_types(
    node: str, tenant_document: TenantDocument, tmp_path: Path
) -> None:
    project = tmp_path / "typescript"
    _typescript_program(project, "tenant_custom_fields_mistyped.mts", tenant_document)

    compiled = _run(
        [_tool("tsc"), "--project", "tsconfig.json", "--strict", "--pretty", "false"], cwd=project
    )

    assert compiled.returncode != 0, _said(compiled)
    named = [ERROR_OF_TSC.match(line) for line in compiled.stdout.splitlines()]
    assert all(named), _said(compiled)
    refused = _lines_marked(INTEGRATORS / "tenant_custom_fields_mistyped.mts", "// refused:")
    assert {(int(match[1]), match[2]) for match in named if match} == {
        (line, "TS2322") for line in refused
    }, _said(compiled)


@pytest.fixture(scope="module")
def tenant_python_client(
    tenant_document: TenantDocument, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """The folder holding ``dealbase_client``, generated from the tenant's document."""
    folder = tmp_path_factory.mktemp("tenant-python-client")
    generated = _run(
        [
            str(VENV_BIN / "openapi-python-client"),
            "generate",
            "--path",
            str(tenant_document.path),
            "--meta",
            "none",
            "--output-path",
            str(folder / "dealbase_client"),
            "--config",
            str(INTEGRATORS / "openapi-python-client.yaml"),
        ],
        cwd=folder,
    )
    assert generated.returncode == 0, _said(generated)
    assert "Warning" not in generated.stdout + generated.stderr, _said(generated)
    return folder


def test_python_client_of_a_tenants_document_sets_its_custom_fields_as_typed(
    tenant_python_client: Path, tenant_document: TenantDocument, live_server: str
) -> None:
    program = INTEGRATORS / "tenant_custom_fields.py"
    errors = _mypy_strict(program, tenant_python_client)
    assert not errors, "mypy --strict:\n" + "\n".join(errors)
    ran = _run(
        [sys.executable, str(program)],
        cwd=tenant_python_client,
        env={
            "PYTHONPATH": str(tenant_python_client),
            "TIER_GOLD": tenant_document.gold,
            **_program_settings(live_server, tenant_document.key),
        },
    )
    assert ran.returncode == 0, _said(ran)
    assert "custom fields set as typed" in ran.stdout


def test_python_client_of_a_tenants_document_refuses_custom_values_of_wrong_types(
    tenant_python_client: Path,
) -> None:
    program = INTEGRATORS / "tenant_custom_fields_mistyped.py"

    errors = _mypy_strict(program, tenant_python_client)

    named = [ERROR_OF_MYPY.match(error) for error in errors]
    assert all(named), errors
    assert {int(match[1]) for match in named if match} == _lines_marked(program, "# refused:"), (
        errors
    )
