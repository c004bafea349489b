// @ts-check
/**
 * The board's requests to this service: GraphQL over HTTP (`POST /graphql`) and one
 * subscription over graphql-sse (`POST /graphql/stream`), read from a `fetch` stream: unlike a
 * WebSocket or EventSource, it sends the key in a header, never in a URL.
 */

/** @typedef {{ key: string, department: string | null }} Credentials */
/** @typedef {{ message: string, extensions?: { code?: string } }} GraphQLError */

/** A refusal that trying again will not change (a wrong key, an unknown department). */
export class Refused extends Error {}

/** The server stopped the stream for a reason after which a client comes back. */
export class Retry extends Error {}

/** @param {Credentials} credentials @returns {Record<string, string>} */
function headersOf(credentials) {
  /** @type {Record<string, string>} */
  const headers = { "X-Api-Key": credentials.key, "Content-Type": "application/json" };
  if (credentials.department) headers["X-Department-Id"] = credentials.department;
  return headers;
}

/**
 * What to tell the user about a refused request (an RFC 9457 problem).
 * @param {Response} response
 */
async function problemOf(response) {
  /** @type {{ code?: string, detail?: string, title?: string }} */
  let problem = {};
  try {
    problem = await response.json();
  } catch {
    // Not a problem document (a proxy's page): the status says enough.
  }
  if (response.status === 401) {
    return (
      "This key was not accepted. Check that it was pasted whole and is still active;" +
      " a department key also needs its department's id."
    );
  }
  const why = problem.detail || problem.title || response.statusText;
  return `${why} (HTTP ${response.status}${problem.code ? `, ${problem.code}` : ""})`;
}

/** @param {GraphQLError} error */
function errorText(error) {
  const code = error.extensions?.code;
  return code ? `${error.message} (${code})` : error.message;
}

/**
 * @param {Credentials} credentials
 * @param {string} query
 * @param {Record<string, unknown>} [variables]
 * @returns {Promise<any>}
 */
export async function graphql(credentials, query, variables = {}) {
  const response = await fetch("/graphql", {
    method: "POST",
    headers: { ...headersOf(credentials), Accept: "application/json" },
    body: JSON.stringify({ query, variables }),
    cache: "no-store",
    credentials: "omit",
  });
  if (!response.ok) throw new Refused(await problemOf(response));
  const body = await response.json();
  if (body.errors?.length) throw new Refused(errorText(body.errors[0]));
  return body.data;
}

/**
 * Runs one graphql-sse subscription until the server completes it ("complete") or the stream
 * ends without that ("ended": a client reconnects); throws Refused or Retry for an error result.
 * @param {Credentials} credentials
 * @param {string} query
 * @param {Record<string, unknown>} variables
 * @param {AbortSignal} signal
 * @param {(data: any) => void} onData
 * @returns {Promise<"complete" | "ended">}
 */
export async function subscribe(credentials, query, variables, signal, onData) {
  const response = await fetch("/graphql/stream", {
    method: "POST",
    headers: { ...headersOf(credentials), Accept: "text/event-stream" },
    body: JSON.stringify({ query, variables }),
    cache: "no-store",
    credentials: "omit",
    signal,
  });
  if (!response.ok) {
    const problem = await problemOf(response);
    // Too many connections, rate limits, a server not ready: passing states.
    const passing = response.status === 429 || response.status >= 500;
    throw passing ? new Retry(problem) : new Refused(problem);
  }
  if (!response.body) throw new Retry("The server sent no stream.");
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffered = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return "ended";
    buffered = (buffered + value).replaceAll("\r\n", "\n");
    let end;
    while ((end = buffered.indexOf("\n\n")) >= 0) {
      const { event, data } = parseEvent(buffered.slice(0, end));
      buffered = buffered.slice(end + 2);
      if (event === "complete") return "complete";
      if (event !== "next" || data === null) continue; // a keep-alive comment
      /** @type {{ data?: any, errors?: GraphQLError[] }} */
      const result = JSON.parse(data);
      if (result.errors?.length) throw failureOf(result.errors[0]);
      onData(result.data);
    }
  }
}

/** @param {string} block one event of a text/event-stream */
function parseEvent(block) {
  let event = "message";
  /** @type {string | null} */
  let data = null;
  for (const line of block.split("\n")) {
    if (line.startsWith("event:")) event = line.slice(6).trim();
    else if (line.startsWith("data:")) {
      // The field's value is what follows "data:" and at most one space.
      data = (data === null ? "" : `${data}\n`) + line.slice(5).replace(/^ /, "");
    }
  }
  return { event, data };
}

/** @param {GraphQLError} error */
function failureOf(error) {
  switch (error.extensions?.code) {
    case "shutdown":
    case "slow_consumer":
      return new Retry(error.message);
    case "revoked":
      return new Refused(
        "This key was revoked or reset, or its tenant suspended: paste a current key.",
      );
    default:
      return new Refused(errorText(error));
  }
}
