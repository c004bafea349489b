"""The data the reads read, written through dealbase's own REST API (so it is exactly what the
service writes), and checks that each server answers every read with the whole of it."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

import httpx

from harness.paths import QUERIES
from harness.settings import BenchSettings
from harness.stack import REST_PREFIX, Tenant

T = TypeVar("T")
CONCURRENCY = 8
FIRST = 50
ACTIVITY_TYPES = ("call", "email", "meeting", "task", "note")


class SeedFailed(Exception):
    pass


@dataclass(frozen=True)
class Seeded:
    deal_ids: list[str]
    customer_ids: list[str]
    activity_ids: list[str]

    @property
    def activities(self) -> int:
        return len(self.activity_ids)

    def summary(self) -> dict[str, int]:
        return {
            "deals": len(self.deal_ids),
            "customers": len(self.customer_ids),
            "activities": self.activities,
        }


async def _gather(calls: list[Callable[[], Awaitable[T]]]) -> list[T]:
    """The calls, CONCURRENCY at a time, results in call order."""
    gate = asyncio.Semaphore(CONCURRENCY)

    async def one(call: Callable[[], Awaitable[T]]) -> T:
        async with gate:
            return await call()

    return list(await asyncio.gather(*(one(call) for call in calls)))


def _expect(response: httpx.Response, status: int) -> dict[str, Any]:
    if response.status_code != status:
        raise SeedFailed(
            f"{response.request.method} {response.request.url.path} answered "
            f"{response.status_code}, not {status}: {response.text[:500]}"
        )
    body: dict[str, Any] = response.json()
    return body


def _customer(index: int, n: int) -> dict[str, Any]:
    """The ``n``-th of deal ``index``'s three customers."""
    return {
        "last_name": f"Customer {index:04}.{n}",
        "first_name": "Ada",
        "company": f"Company {index % 17}",
        "email": f"c{index}.{n}@example.com",
        "city": "London",
    }


def _assignment(tenant: Tenant, index: int) -> dict[str, Any]:
    """Deal ``index``'s step and employee."""
    return {
        "step_id": tenant.step_ids[index % len(tenant.step_ids)],
        "employee_id": tenant.employee_ids[index % len(tenant.employee_ids)],
    }


async def _deals(
    client: httpx.AsyncClient, tenant: Tenant, settings: BenchSettings
) -> list[tuple[str, str]]:
    """The deals, each created with its three new customers, then moved and assigned."""
    deals = await _gather(
        [
            partial(
                _send,
                client,
                "POST",
                "/deals",
                {
                    "name": f"Deal {index:04}",
                    "volume": 1000 * (index + 1),
                    "deal_origin": "bench",
                    "customers": [_customer(index, n) for n in range(3)],
                },
                201,
            )
            for index in range(settings.seed_deals)
        ]
    )
    await _gather(
        [
            partial(_send, client, "PATCH", f"/deals/{deal['id']}", _assignment(tenant, i), 200)
            for i, deal in enumerate(deals)
        ]
    )
    return [(customer["id"], deal["id"]) for deal in deals for customer in deal["customers"]]


async def _linked_deals(
    client: httpx.AsyncClient, tenant: Tenant, settings: BenchSettings
) -> list[tuple[str, str]]:
    """The same deals made the way a Citus cluster serves every request of (bench/citus.py):
    their customers first, each deal by external id (``PUT /deals/by-external-id/{id}``), then
    its customers linked one after another, so that they keep their order, and the deal moved
    and assigned."""
    customers = await _gather(
        [
            partial(_send, client, "POST", "/customers", _customer(index, n), 201)
            for index in range(settings.seed_deals)
            for n in range(3)
        ]
    )
    deals = await _gather(
        [
            partial(
                _send,
                client,
                "PUT",
                f"/deals/by-external-id/bench-deal-{index:04}",
                {"name": f"Deal {index:04}", "volume": 1000 * (index + 1), "deal_origin": "bench"},
                201,
            )
            for index in range(settings.seed_deals)
        ]
    )

    async def link(index: int, deal: dict[str, Any]) -> None:
        for n in range(3):
            body = {"customer_id": customers[index * 3 + n]["id"]}
            await _send(client, "POST", f"/deals/{deal['id']}/customers", body, 200)
        await _send(client, "PATCH", f"/deals/{deal['id']}", _assignment(tenant, index), 200)

    await _gather([partial(link, index, deal) for index, deal in enumerate(deals)])
    return [
        (customers[index * 3 + n]["id"], deal["id"])
        for index, deal in enumerate(deals)
        for n in range(3)
    ]


async def _send(
    client: httpx.AsyncClient, method: str, path: str, body: dict[str, Any], status: int
) -> Any:
    return _expect(await client.request(method, path, json=body), status)


async def _seed(base_url: str, tenant: Tenant, settings: BenchSettings, *, linked: bool) -> Seeded:
    async with httpx.AsyncClient(
        base_url=base_url + REST_PREFIX, headers=tenant.headers, timeout=60.0
    ) as client:
        # Deals first, so the first customers (in id order) are the deals' customers.
        made = _linked_deals if linked else _deals
        deal_customers = await made(client, tenant, settings)
        more = max(0, settings.seed_customers - len(deal_customers))
        customers = await _gather(
            [
                partial(
                    _send,
                    client,
                    "POST",
                    "/customers",
                    {
                        "last_name": f"Customer {index:06}",
                        "first_name": "Grace",
                        "email": f"customer{index}@example.com",
                        "city": "Arlington",
                    },
                    201,
                )
                for index in range(more)
            ]
        )
        activity_calls: list[Callable[[], Awaitable[Any]]] = []
        for index, (customer_id, deal_id) in enumerate(deal_customers[: FIRST * 2]):
            for n in range(settings.activities_per_customer):
                activity_calls.append(
                    partial(
                        _send,
                        client,
                        "POST",
                        "/activities",
                        {
                            "type": ACTIVITY_TYPES[(index + n) % len(ACTIVITY_TYPES)],
                            "customer_id": customer_id,
                            "deal_id": deal_id,
                            "employee_id": tenant.employee_ids[index % len(tenant.employee_ids)],
                            "subject": f"Follow-up {n + 1}",
                            "due_at": "2026-12-01T09:00:00Z",
                        },
                        201,
                    )
                )
        activities = await _gather(activity_calls)
    return Seeded(
        deal_ids=list(dict.fromkeys(deal_id for _, deal_id in deal_customers)),
        customer_ids=[customer_id for customer_id, _ in deal_customers]
        + [customer["id"] for customer in customers],
        activity_ids=[activity["id"] for activity in activities],
    )


def seed(base_url: str, tenant: Tenant, settings: BenchSettings, *, linked: bool = False) -> Seeded:
    """bench/run.py's data: with ``linked``, each deal made by external id and its customers
    linked to it, as a Citus cluster serves them (``_linked_deals``)."""
    return asyncio.run(_seed(base_url, tenant, settings, linked=linked))


def _graphql(client: httpx.Client, query_file: str) -> tuple[dict[str, Any], int]:
    response = client.post(
        "/graphql",
        json={"query": (QUERIES / query_file).read_text(), "variables": {"first": FIRST}},
    )
    body = response.json() if response.status_code == 200 else None
    if body is None or body.get("errors") or not body.get("data"):
        raise SeedFailed(f"{query_file} answered {response.status_code}: {response.text[:800]}")
    data: dict[str, Any] = body["data"]
    return data, len(response.content)


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise SeedFailed(message)


def check_dealbase(base_url: str, tenant: Tenant) -> dict[str, int]:
    """Each read answers the seeded data whole; returns each read's response size in bytes."""
    sizes: dict[str, int] = {}
    with httpx.Client(base_url=base_url, headers=tenant.headers, timeout=30.0) as client:
        data, sizes["graphql_dashboard"] = _graphql(client, "dashboard.graphql")
        edges = data["deals"]["edges"]
        _require(len(edges) == FIRST, f"the dashboard has {len(edges)} deals, not {FIRST}")
        for edge in edges:
            node = edge["node"]
            _require(
                node["step"] is not None
                and node["employee"] is not None
                and len(node["customers"]) == 3,
                f"a dashboard deal lacks its step, employee or 3 customers: {node}",
            )
        data, sizes["graphql_customers"] = _graphql(client, "customers_with_deals.graphql")
        edges = data["customers"]["edges"]
        _require(len(edges) == FIRST, f"customers_with_deals has {len(edges)} customers")
        _require(
            all(edge["node"]["deals"] and edge["node"]["activities"] for edge in edges),
            "a customer of customers_with_deals has no deal or no activity",
        )
        response = client.get(f"{REST_PREFIX}/deals", params={"limit": FIRST})
        deals = _expect(response, 200)["data"]
        sizes["rest_deals"] = len(response.content)
        _require(
            len(deals) == FIRST
            and all(len(deal["customers"]) == 3 and deal["employee_id"] for deal in deals),
            "GET /deals?limit=50 lacks deals, customers or employees",
        )
        response = client.get(f"{REST_PREFIX}/customers", params={"limit": FIRST})
        _require(len(_expect(response, 200)["data"]) == FIRST, "GET /customers has too few")
        sizes["list_customers"] = len(response.content)
        response = client.get(f"{REST_PREFIX}/activities", params={"limit": FIRST})
        _require(len(_expect(response, 200)["data"]) == FIRST, "GET /activities has too few")
        sizes["list_activities"] = len(response.content)
        response = client.get(f"{REST_PREFIX}/events", params={"limit": FIRST})
        _require(len(_expect(response, 200)["data"]) == FIRST, "GET /events has too few")
        sizes["list_events"] = len(response.content)
        response = client.get(f"{REST_PREFIX}/steps")
        _require(len(_expect(response, 200)["data"]) == len(tenant.step_ids), "GET /steps")
        sizes["list_steps"] = len(response.content)
        response = client.get(f"{REST_PREFIX}/department")
        _require(len(_expect(response, 200)["steps"]) == len(tenant.step_ids), "GET /department")
        sizes["get_department"] = len(response.content)
    return sizes


def check_postgraphile(base_url: str) -> dict[str, int]:
    sizes: dict[str, int] = {}
    with httpx.Client(base_url=base_url, timeout=30.0) as client:
        data, sizes["postgraphile_dashboard"] = _graphql(client, "postgraphile_dashboard.graphql")
        edges = data["allDeals"]["edges"]
        _require(len(edges) == FIRST, f"PostGraphile's dashboard has {len(edges)} deals")
        for edge in edges:
            node = edge["node"]
            _require(
                node["stepByStepIdAndDepartmentId"] is not None
                and node["employeeByEmployeeIdAndDepartmentId"] is not None
                and len(node["dealCustomersByDealId"]["nodes"]) == 3,
                f"a PostGraphile dashboard deal lacks its step, employee or customers: {node}",
            )
        data, sizes["postgraphile_customers"] = _graphql(
            client, "postgraphile_customers_with_deals.graphql"
        )
        _require(
            len(data["allCustomers"]["edges"]) == FIRST, "PostGraphile's customers are too few"
        )
    return sizes


def check_baseline(base_url: str, tenant: Tenant, customer_id: str) -> dict[str, int]:
    sizes: dict[str, int] = {}
    with httpx.Client(
        base_url=base_url + REST_PREFIX, headers=tenant.headers, timeout=30.0
    ) as client:
        response = client.get(f"/customers/{customer_id}")
        _expect(response, 200)
        sizes["baseline_get_customer"] = len(response.content)
        response = client.get("/customers", params={"limit": FIRST})
        _require(len(_expect(response, 200)["data"]) == FIRST, "the baseline's list is short")
        sizes["baseline_list_customers"] = len(response.content)
    return sizes
