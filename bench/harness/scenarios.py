"""The scenarios of `make bench`, in the order they run, each with the one it is compared to."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Server = Literal["dealbase", "baseline", "postgraphile", "pgbench"]


@dataclass(frozen=True)
class Scenario:
    name: str
    server: Server
    what: str
    script: str | None = None  # bench/wrk/<script>, or bench/pgbench/<script> for pgbench
    query: str | None = None  # bench/queries/<query> for graphql.lua
    compare_to: str | None = None  # the scenario whose req/s the ratio divides by
    pgbench_protocol: str = "prepared"
    # For get_by_id.lua: the collection whose seeded ids it reads (customers by default).
    collection: str | None = None
    # For rest_get.lua: the path (under the REST prefix) every request reads.
    path: str | None = None
    # For post_customers_departments.lua: how many of the tenant's departments the load goes
    # round (bench/run.py provisions DEPARTMENTS).
    departments: int = 1
    # Which of the tenant's departments a load of one department uses (0: the one the seed
    # fills, which every read scenario reads).
    department: int = 0


DEPARTMENTS = 8


# Each dealbase scenario runs right after the peer it is compared to (the peer's server started
# for it and stopped after), so that the two see the same machine as nearly as can be.
SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        "pgbench_insert",
        "pgbench",
        "pgbench: the baseline's SQL for POST /customers, prepared (the database's ceiling)",
        "insert_customer.sql",
    ),
    # The price of running each unit of work as its tenant's role: the same transaction opened by
    # BEGIN alone and by BEGIN with SET LOCAL ROLE in its round trip (docs/security.md).
    Scenario(
        "pgbench_unit_of_work",
        "pgbench",
        "pgbench: POST /customers' transaction opened by BEGIN alone",
        "unit_of_work.sql",
        pgbench_protocol="simple",
    ),
    Scenario(
        "pgbench_unit_of_work_as_tenant",
        "pgbench",
        "pgbench: the same, opened by BEGIN; SET LOCAL ROLE in one round trip",
        "unit_of_work_as_tenant.sql",
        compare_to="pgbench_unit_of_work",
        pgbench_protocol="simple",
    ),
    Scenario(
        "baseline_post_customers",
        "baseline",
        "baseline service: POST /customers",
        "post_customers.lua",
        compare_to="pgbench_insert",
    ),
    Scenario(
        "post_customers_one_department",
        "dealbase",
        "POST /customers, every request in one department",
        "post_customers_departments.lua",
        compare_to="baseline_post_customers",
    ),
    # The same load spread over eight departments of the same tenant: what one department's
    # writers lose to anything they share (a lock) shows as the gap between the two.
    Scenario(
        "post_customers_eight_departments",
        "dealbase",
        f"POST /customers, the requests going round {DEPARTMENTS} departments of the tenant",
        "post_customers_departments.lua",
        compare_to="baseline_post_customers",
        departments=DEPARTMENTS,
    ),
    # In a department of its own: the deals it makes would otherwise be counted by every later
    # read of the seeded department's deals (the dashboard's totalCount), as many as it managed
    # to make, so the reads' figures would follow this scenario's.
    Scenario(
        "post_deals",
        "dealbase",
        "POST /deals with 3 new customers (in a department the reads do not read)",
        "post_deals.lua",
        compare_to="baseline_post_customers",
        department=1,
    ),
    Scenario(
        "baseline_get_customer",
        "baseline",
        "baseline service: GET /customers/{id}",
        "get_by_id.lua",
    ),
    Scenario(
        "get_customer",
        "dealbase",
        "GET /customers/{id}, rotating over the seeded ids",
        "get_by_id.lua",
        compare_to="baseline_get_customer",
    ),
    # Reads of other resources, beside the baseline's read of one customer: no peer serves
    # them, so the ratio is to the nearest read it has, measured in the same run.
    Scenario(
        "get_activity",
        "dealbase",
        "GET /activities/{id}, rotating over the seeded ids",
        "get_by_id.lua",
        compare_to="baseline_get_customer",
        collection="activities",
    ),
    Scenario(
        "list_steps",
        "dealbase",
        "GET /steps (the department's 6 steps)",
        "rest_get.lua",
        compare_to="baseline_get_customer",
        path="/steps",
    ),
    Scenario(
        "get_department",
        "dealbase",
        "GET /department (the department with its 6 steps)",
        "rest_get.lua",
        compare_to="baseline_get_customer",
        path="/department",
    ),
    Scenario(
        "baseline_list_customers",
        "baseline",
        "baseline service: GET /customers?limit=50",
        "list_customers.lua",
    ),
    Scenario(
        "list_customers",
        "dealbase",
        "GET /customers?limit=50",
        "list_customers.lua",
        compare_to="baseline_list_customers",
    ),
    Scenario(
        "list_activities",
        "dealbase",
        "GET /activities?limit=50",
        "rest_get.lua",
        compare_to="baseline_list_customers",
        path="/activities?limit=50",
    ),
    Scenario(
        "list_events",
        "dealbase",
        "GET /events?limit=50 (the feed's first page)",
        "rest_get.lua",
        compare_to="baseline_list_customers",
        path="/events?limit=50",
    ),
    Scenario(
        "postgraphile_dashboard",
        "postgraphile",
        "PostGraphile 5: 50 deals with step, employee, customers",
        "graphql.lua",
        "postgraphile_dashboard.graphql",
    ),
    Scenario(
        "graphql_dashboard",
        "dealbase",
        "GraphQL: 50 deals with step, employee, customers",
        "graphql.lua",
        "dashboard.graphql",
        compare_to="postgraphile_dashboard",
    ),
    Scenario(
        "rest_deals",
        "dealbase",
        "REST: GET /deals?limit=50 (the same deals with customers)",
        "rest_deals.lua",
        compare_to="postgraphile_dashboard",
    ),
    Scenario(
        "postgraphile_customers",
        "postgraphile",
        "PostGraphile 5: 50 customers with deals and activities",
        "graphql.lua",
        "postgraphile_customers_with_deals.graphql",
    ),
    Scenario(
        "graphql_customers",
        "dealbase",
        "GraphQL: 50 customers with deals and activities",
        "graphql.lua",
        "customers_with_deals.graphql",
        compare_to="postgraphile_customers",
    ),
)

BY_NAME = {scenario.name: scenario for scenario in SCENARIOS}
# Not wrk scenarios: bench/webhooks.py, bench/sync.py, bench/live.py and bench/custom_fields.py,
# run after them, each with a table of its own.
WEBHOOKS = "webhooks"
SYNC = "sync"
LIVE = "live"
CUSTOM_FIELDS = "custom_fields"
OWN_TABLES = (WEBHOOKS, SYNC, LIVE, CUSTOM_FIELDS)
DEALBASE_SCENARIOS = tuple(s.name for s in SCENARIOS if s.server == "dealbase")


@dataclass(frozen=True)
class Target:
    """A target: `scenario` at least `ratio` times `other`'s req/s."""

    label: str
    scenario: str
    other: str
    ratio: float


TARGETS = (
    Target(
        "POST /customers, one department >= 0.8 x baseline POST",
        "post_customers_one_department",
        "baseline_post_customers",
        0.8,
    ),
    Target(
        "POST /customers, one department >= 0.9 x eight departments",
        "post_customers_one_department",
        "post_customers_eight_departments",
        0.9,
    ),
    Target(
        "POST /deals (3 customers) >= 0.5 x baseline POST",
        "post_deals",
        "baseline_post_customers",
        0.5,
    ),
    Target(
        "GraphQL dashboard >= 1.2 x PostGraphile",
        "graphql_dashboard",
        "postgraphile_dashboard",
        1.2,
    ),
    Target(
        "GraphQL customers >= 1.0 x PostGraphile",
        "graphql_customers",
        "postgraphile_customers",
        1.0,
    ),
    Target(
        "GET /customers?limit=50 >= 0.8 x baseline",
        "list_customers",
        "baseline_list_customers",
        0.8,
    ),
    Target("GET /customers/{id} >= 0.8 x baseline", "get_customer", "baseline_get_customer", 0.8),
    Target(
        "GraphQL dashboard >= 1.0 x the same deals by REST", "graphql_dashboard", "rest_deals", 1.0
    ),
)
MAX_TAIL = 4.0  # p99 at most 4 x p50 in every dealbase scenario
# Under 5 % of the active backends' samples waiting on a lock, in every scenario: writers of one
# department must not queue behind each other.
MAX_LOCK_WAITS = 0.05


class UnknownScenario(Exception):
    pass


def select(names: tuple[str, ...]) -> list[Scenario]:
    """The scenarios named (all when none), with the ones their ratios need, in run order;
    none when only parts of OWN_TABLES are named."""
    if not names:
        return list(SCENARIOS)
    unknown = [name for name in names if name not in BY_NAME and name not in OWN_TABLES]
    if unknown:
        raise UnknownScenario(
            f"unknown scenario {', '.join(unknown)}; the scenarios are: "
            + ", ".join([*BY_NAME, *OWN_TABLES])
        )
    names = tuple(name for name in names if name not in OWN_TABLES)
    wanted = set(names)
    for name in names:
        other = BY_NAME[name].compare_to
        while other is not None and other not in wanted:
            wanted.add(other)
            other = BY_NAME[other].compare_to
    return [scenario for scenario in SCENARIOS if scenario.name in wanted]


def wants(names: tuple[str, ...], part: str) -> bool:
    """Whether the run measures ``part`` (one of OWN_TABLES): always, unless scenarios are named
    and it is not one of them."""
    return not names or part in names
