// A customer's custom fields as a TypeScript integrator sets them: typed by the types that
// openapi-typescript generates from the tenant's own document (./schema.ts), sent with
// openapi-fetch. The test writes the select's option id in for TIER_GOLD. `tsc --strict` must
// accept it; then node runs it against a live server, which must answer with the values.
//
// SERVER_URL, API_KEY and DEPARTMENT_ID come from the environment.
import assert from "node:assert/strict";
import createClient from "openapi-fetch";
import type { components, paths } from "./schema.js";

type CustomFields = components["schemas"]["CustomerFields"]["custom_fields"];

function setting(name: string): string {
  const value = process.env[name];
  assert.ok(value, `${name} is not set`);
  return value;
}

const client = createClient<paths>({
  baseUrl: setting("SERVER_URL"),
  headers: { "X-Api-Key": setting("API_KEY"), "X-Department-Id": setting("DEPARTMENT_ID") },
});

const values: CustomFields = {
  seats: 12,
  revenue: "1234.50",
  vip: true,
  renewal: "2027-06-30",
  tier: "TIER_GOLD",
};
const created = await client.POST("/api/v1/integration/customers", {
  body: { last_name: "Lovelace", custom_fields: values },
});
assert.equal(created.response.status, 201, JSON.stringify(created.error));
assert.ok(created.data);
// A response's values are typed too: seats is a number or null.
const seats: number | null = created.data.custom_fields.seats;
assert.equal(seats, 12);
assert.deepEqual(created.data.custom_fields, values);
console.log("custom fields set as typed");
