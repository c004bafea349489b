// graphql-http's audit of a GraphQL over HTTP server, against SERVER_URL/graphql with the key in
// API_KEY and its department in DEPARTMENT_ID (unset for a tenant-wide key). Prints one JSON
// array: each audit's id, name ("MUST ...", "SHOULD ...", "MAY ..."), status ("ok", "notice",
// "warn" or "error") and, when not ok, the reason and what the server answered.
import { auditServer } from "graphql-http";

const credentials = {
  "X-Api-Key": process.env.API_KEY,
  "X-Department-Id": process.env.DEPARTMENT_ID,
};

function withCredentials(input, init = {}) {
  const headers = new Headers(init.headers);
  for (const [name, value] of Object.entries(credentials)) {
    if (value !== undefined) headers.set(name, value);
  }
  return fetch(input, { ...init, headers });
}

const results = await auditServer({
  url: `${process.env.SERVER_URL}/graphql`,
  fetchFn: withCredentials,
});

const report = [];
for (const result of results) {
  const entry = { id: result.id, name: result.name, status: result.status };
  if (result.status !== "ok") {
    entry.reason = result.reason;
    entry.answer = {
      status: result.response.status,
      contentType: result.response.headers.get("content-type"),
      body: await result.response.text().catch(() => "(already read by the audit)"),
    };
  }
  report.push(entry);
}
console.log(JSON.stringify(report));
