"""The hooks ``schemathesis run`` loads from the repository's root (``schemathesis.toml`` names
this module): the contract suite's rules, applied to a run against a live server.

Each request goes through ``ServerRules`` (server_rules.py) before it is sent, and a failure
goes through ``BatchRule`` (batch_rules.py), as in ``test_openapi.py``. A live server adds what
the suite's own database gives it for free:

- The department's rows, for the bodies that refer to one: a customer and a deal the run makes
  through the API (again when the run has deleted them), the first pipeline step and the first
  employee, read with the run's own ``-H`` headers. Employees are made with the CLI only, so a
  department without one cannot be run against.
- Idempotency-Keys of this run only: the server keeps a key's first request for 24 hours, and a
  later run drawing the same key for another request would be answered 422
  ``idempotency_key_reused``. Each valid key gets this run's suffix, in its pattern.
- Webhook endpoints the run makes stay disabled: the suite's rules point them at a public
  address, to which a webhook worker would otherwise send the department's events.
"""

from __future__ import annotations

import re
import secrets
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import httpx
import schemathesis
from schemathesis.core.failures import Failure
from schemathesis.generation.meta import TestPhase
from schemathesis.openapi.checks import IgnoredAuth

from contract_tests.batch_rules import BatchRule
from contract_tests.server_rules import (
    IDEMPOTENCY_KEY,
    DepartmentRows,
    ServerRules,
    with_suffix,
)
from dealbase.edge.requests import IDEMPOTENCY_KEY_PATTERN

API = "/api/v1/integration"
WEBHOOKS = f"{API}/webhooks"
_RUN_SUFFIX = f"~{secrets.token_hex(4)}"
# Retry-After is seconds until the request passes; a server that never lets it is misset.
MAX_RATE_LIMITED = 60


class LiveDepartment:
    """The department the run's headers name, as the server has it."""

    def __init__(self, base_url: str, headers: Mapping[str, str]) -> None:
        self._http = httpx.Client(base_url=base_url.rstrip("/") + API, headers=dict(headers))
        steps = self._read("/steps")
        employees = self._read("/employees", params={"limit": 1})
        if not employees:
            raise RuntimeError(
                "The department has no employee, and bodies that assign one need a real one:"
                " make one with `dealbase employee create --tenant T --department D NAME`."
            )
        self._rows = DepartmentRows(
            customer_id=self._made("/customers", {"last_name": "Contract"}),
            deal_id=self._made("/deals", {"name": "Contract"}),
            employee_id=employees[0]["id"],
            step_id=steps[0]["id"],
        )

    def rows(self, *, maybe_deleted: bool) -> DepartmentRows:
        """The rows; ``maybe_deleted``: with a customer or deal the run has deleted (its
        stateful phase follows links to them) made again."""
        if not maybe_deleted:
            return self._rows
        if not self._exists(f"/customers/{self._rows.customer_id}"):
            self._rows = replace(
                self._rows, customer_id=self._made("/customers", {"last_name": "Contract"})
            )
        if not self._exists(f"/deals/{self._rows.deal_id}"):
            self._rows = replace(self._rows, deal_id=self._made("/deals", {"name": "Contract"}))
        return self._rows

    def _read(self, path: str, params: Mapping[str, int] | None = None) -> list[dict[str, Any]]:
        response = self._sent("GET", path, params=params)
        response.raise_for_status()
        data: list[dict[str, Any]] = response.json()["data"]
        return data

    def _made(self, path: str, body: Mapping[str, str]) -> str:
        response = self._sent("POST", path, json=body)
        response.raise_for_status()
        made: str = response.json()["id"]
        return made

    def _exists(self, path: str) -> bool:
        return self._sent("GET", path).status_code == 200

    def _sent(self, method: str, path: str, **request: Any) -> httpx.Response:
        """The answer to the request, sent again after a 429's Retry-After as the run's own
        requests are (schemathesis.toml: rate-limit)."""
        for _ in range(MAX_RATE_LIMITED):
            response = self._http.request(method, path, **request)
            if response.status_code != 429:
                return response
            time.sleep(int(response.headers["Retry-After"]))
        raise RuntimeError(f"{method} {path} was refused 429 {MAX_RATE_LIMITED} times")


@dataclass
class Run:
    """What the hooks keep for the run: the rules, made from the document it loaded."""

    server_rules: ServerRules
    batch_rule: BatchRule
    department: LiveDepartment


# The run of each loaded schema (one per `schemathesis run`), made on its first request.
_RUNS: dict[int, Run] = {}
_STARTING = threading.Lock()


def _run(case: schemathesis.Case[Any]) -> Run:
    schema = case.operation.schema
    with _STARTING:
        if id(schema) not in _RUNS:
            document = schema.raw_schema
            _RUNS[id(schema)] = Run(
                ServerRules(document),
                BatchRule(document),
                LiveDepartment(case.operation.base_url, schema.config.headers or {}),
            )
        return _RUNS[id(schema)]


@schemathesis.hook
def before_call(
    context: schemathesis.HookContext, case: schemathesis.Case[Any], kwargs: dict[str, Any]
) -> None:
    run = _run(case)
    _idempotency_key_of_this_run(case)
    stateful = case.meta is not None and case.meta.phase.name == TestPhase.STATEFUL
    # Every phase of a run may send ids that earlier answers gave (schemathesis keeps them),
    # so a body's references are made real whatever the path names: a random id there is 404.
    rows = run.department.rows(maybe_deleted=stateful)
    run.server_rules.adapt(case, rows, real_path_ids=True)
    _webhook_endpoints_disabled(case)


@schemathesis.hook
def filter_failure(
    context: schemathesis.HookContext,
    failure: Failure,
    case: schemathesis.Case[Any],
    response: schemathesis.Response,
) -> bool:
    if _refused_for_failed_authentications(failure):
        return False
    return _run(case).batch_rule.filter_failure(context, failure, case, response)


def _refused_for_failed_authentications(failure: Failure) -> bool:
    """ignored_auth sends requests without and with wrong credentials, each a failed
    authentication of the run's address; past the address's allowance the server refuses its
    requests 429 whatever their credentials (docs/api.md, Failed authentication), which is a
    refusal too, though not the 401 or 403 the check names. The failure carries the probe's
    status only in its message."""
    return isinstance(failure, IgnoredAuth) and "got `429 " in failure.message


def _idempotency_key_of_this_run(case: schemathesis.Case[Any]) -> None:
    # Only a valid key, and once (a request retried after a 429 comes here again): a key the
    # pattern refuses stays, a negative case the server must refuse.
    headers = case.headers
    if not headers or IDEMPOTENCY_KEY not in headers:
        return
    key = headers[IDEMPOTENCY_KEY]
    if not isinstance(key, str) or key.strip('"').endswith(_RUN_SUFFIX):
        return
    if re.search(IDEMPOTENCY_KEY_PATTERN, key):
        headers[IDEMPOTENCY_KEY] = with_suffix(key, _RUN_SUFFIX)


def _webhook_endpoints_disabled(case: schemathesis.Case[Any]) -> None:
    # Only a body that would enable an endpoint: a create that leaves `enabled` out (true by
    # default) or sets it to true, and a PATCH that sets it to true.
    body = case.body
    creates = case.operation.path == WEBHOOKS and case.method.upper() == "POST"
    changes = case.operation.path == f"{WEBHOOKS}/{{webhook_id}}" and case.method.upper() == "PATCH"
    if not isinstance(body, dict) or not (creates or changes):
        return
    if body.get("enabled") is True or (creates and "enabled" not in body):
        body["enabled"] = False
