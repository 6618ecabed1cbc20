// Calls to ctxd's JSON API with the tenant's key. The key lives in this module's memory
// only: never in storage, a cookie or a URL.

let key = null;

export function setKey(value) {
  key = value ? value : null;
}

export function hasKey() {
  return key !== null;
}

export class ApiError extends Error {
  constructor(status, code, message, field) {
    super(message);
    this.status = status;
    this.code = code;
    this.field = field;
  }
}

// Paths relative to the page (served at <base>/ui/), so a proxy's path prefix is kept.
async function call(method, path, body) {
  const headers = { Accept: "application/json" };
  if (key !== null) headers.Authorization = `Bearer ${key}`;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  let response;
  try {
    response = await fetch(`../${path}`, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      cache: "no-store",
      credentials: "omit",
      referrerPolicy: "no-referrer",
    });
  } catch (error) {
    throw new ApiError(0, "UNREACHABLE", `ctxd could not be reached (${error.message})`);
  }
  let payload = null;
  try {
    payload = await response.json();
  } catch {
    payload = null;
  }
  if (!response.ok) {
    const error = (payload && payload.error) || {};
    throw new ApiError(
      response.status,
      error.code || `HTTP_${response.status}`,
      error.message || response.statusText || "request failed",
      error.field,
    );
  }
  return payload;
}

export function searchTraces(parameters) {
  return call("GET", `v1/traces?${parameters.toString()}`);
}

export function turnTrace(turnId) {
  return call("GET", `v1/traces/${encodeURIComponent(turnId)}`);
}

export function replayTurn(turnId, inputs) {
  return call("POST", `v1/turns/${encodeURIComponent(turnId)}/replay`, { inputs });
}

export function handleTrace(handleId, after) {
  const parameters = new URLSearchParams();
  if (after !== undefined && after !== null) parameters.set("after", String(after));
  return call("GET", `v1/handles/${encodeURIComponent(handleId)}/trace?${parameters.toString()}`);
}
