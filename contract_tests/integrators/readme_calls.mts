// The README's "Try it" calls as a TypeScript integrator writes them: typed by the paths that
// openapi-typescript generates from the served document (./schema.ts, made by the test; a .ts
// rather than a .d.ts, so that tsc checks it while skipping the libraries' declarations), sent
// with openapi-fetch. `tsc --strict` must accept it; then node runs it against a live server and
// it exits non-zero on the first answer that is not the one the README shows.
//
// SERVER_URL, API_KEY and DEPARTMENT_ID come from the environment.
import assert from "node:assert/strict";
import createClient from "openapi-fetch";
import type { paths } from "./schema.js";

function setting(name: string): string {
  const value = process.env[name];
  assert.ok(value, `${name} is not set`);
  return value;
}

function header(response: Response, name: string): string {
  const value = response.headers.get(name);
  assert.ok(value !== null, `no ${name} header (status ${response.status})`);
  return value;
}

const client = createClient<paths>({
  baseUrl: setting("SERVER_URL"),
  headers: { "X-Api-Key": setting("API_KEY"), "X-Department-Id": setting("DEPARTMENT_ID") },
});

// Create a customer.
const created = await client.POST("/api/v1/integration/customers", {
  body: { last_name: "Lovelace", first_name: "Ada", email: "ada@example.com", city: "London" },
});
assert.equal(created.response.status, 201, JSON.stringify(created.error));
assert.ok(created.data);
const customer = created.data;
assert.equal(customer.city, "London");
assert.equal(customer.company, null);
assert.equal(header(created.response, "etag"), '"1"');
assert.equal(
  header(created.response, "location"),
  `/api/v1/integration/customers/${customer.id}`,
);

// Create a deal, with two new customers.
const dealCreated = await client.POST("/api/v1/integration/deals", {
  body: {
    name: "Analytical engine, 2 units",
    volume: 250000,
    deal_origin: "trade fair",
    customers: [{ last_name: "Lovelace", first_name: "Ada" }, { last_name: "Babbage" }],
  },
});
assert.equal(dealCreated.response.status, 201, JSON.stringify(dealCreated.error));
assert.ok(dealCreated.data);
const deal = dealCreated.data;
assert.equal(deal.volume, 250000);
assert.equal(deal.employee_id, null);
assert.deepEqual(
  deal.customers.map((linked) => [linked.last_name, linked.first_name]),
  [
    ["Lovelace", "Ada"],
    ["Babbage", null],
  ],
);

// Update only if nobody else did: the body carries only the field to change.
const patched = await client.PATCH("/api/v1/integration/customers/{customer_id}", {
  params: { path: { customer_id: customer.id }, header: { "If-Match": '"1"' } },
  body: { city: "Paris" },
});
assert.equal(patched.response.status, 200, JSON.stringify(patched.error));
assert.ok(patched.data);
assert.equal(patched.data.city, "Paris");
assert.equal(patched.data.email, "ada@example.com");
assert.equal(header(patched.response, "etag"), '"2"');

const stale = await client.PATCH("/api/v1/integration/customers/{customer_id}", {
  params: { path: { customer_id: customer.id }, header: { "If-Match": '"1"' } },
  body: { city: "Berlin" },
});
assert.equal(stale.response.status, 412);
assert.equal(stale.error?.code, "precondition_failed");

// List, page by page: next_cursor goes back as cursor, with the same filters, until it is null.
const listed: string[] = [];
let cursor: string | undefined;
do {
  const page = await client.GET("/api/v1/integration/customers", {
    params: { query: { q: "lovelace", limit: 1, cursor } },
  });
  assert.equal(page.response.status, 200, JSON.stringify(page.error));
  assert.ok(page.data);
  assert.ok(page.data.data.length <= 1);
  listed.push(...page.data.data.map((row) => row.id));
  cursor = page.data.next_cursor ?? undefined;
} while (cursor !== undefined);
assert.deepEqual(listed, [customer.id, deal.customers[0]?.id]);

// Read it back.
const read = await client.GET("/api/v1/integration/customers/{customer_id}", {
  params: { path: { customer_id: customer.id } },
});
assert.equal(read.response.status, 200, JSON.stringify(read.error));
assert.ok(read.data);
assert.equal(read.data.city, "Paris");
assert.equal(header(read.response, "etag"), '"2"');

// Retry a create safely: the second send creates nothing and answers the first response again.
const retried = [];
for (let attempt = 0; attempt < 2; attempt++) {
  retried.push(
    await client.POST("/api/v1/integration/deals", {
      params: { header: { "Idempotency-Key": "order-4711" } },
      body: { name: "Difference engine", volume: 90000 },
    }),
  );
}
const [first, again] = retried;
assert.ok(first?.data && again?.data);
assert.equal(again.response.status, 201);
assert.equal(again.data.id, first.data.id);
assert.equal(again.response.headers.get("idempotent-replayed"), "true");

console.log("the README's calls answered as the README shows");
