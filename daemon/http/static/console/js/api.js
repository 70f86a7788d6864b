// The console's only way to the daemon: the public JSON API, with the routes, auth and
// errors any integration uses.
//
// The access token lives in this module's memory only (never localStorage: a script
// injected into the page could read that). The refresh token is an httpOnly cookie the
// page cannot read, sent only to /api/auth and only with the header
// `X-Docex-Session: cookie`, which a cross-site form cannot set (CSRF). A reload or a
// new tab gets a fresh access token from that cookie.

const SESSION_HEADERS = { "Content-Type": "application/json", "X-Docex-Session": "cookie" };

let accessToken = null;
let currentUser = null;
let refreshing = null;
const signedOutListeners = new Set();

/** An error answer of the API, in the SPEC's shape {statusCode, message, error, details?}. */
export class ApiError extends Error {
  constructor(status, body) {
    const message = body && body.message !== undefined ? body.message : `HTTP ${status}`;
    super(Array.isArray(message) ? message.join("; ") : String(message));
    this.status = status;
    this.body = body ?? {};
    this.messages = Array.isArray(message) ? message.map(String) : [String(message)];
  }
}

export function user() {
  return currentUser;
}

export function onSignedOut(listener) {
  signedOutListeners.add(listener);
}

// Whether this browser may hold a session cookie: set at sign-in, cleared when a refresh is
// refused or the user signs out. Without it a first visit does not ask /api/auth/refresh for a
// session it cannot have (a 400 in the browser's console on every load). It says nothing
// secret: the cookie itself stays out of the page's reach.
const MAYBE_SIGNED_IN = "docex.maybe-signed-in";

function signedIn(pair) {
  accessToken = pair.accessToken;
  currentUser = pair.user;
  localStorage.setItem(MAYBE_SIGNED_IN, "1");
  return currentUser;
}

function forget() {
  const was = accessToken !== null;
  accessToken = null;
  currentUser = null;
  localStorage.removeItem(MAYBE_SIGNED_IN);
  if (was) signedOutListeners.forEach((listener) => listener());
}

async function readError(response) {
  let body = null;
  try { body = await response.json(); } catch { /* not JSON: the status says enough */ }
  return new ApiError(response.status, body);
}

async function authCall(path, body) {
  const response = await fetch(path, {
    method: "POST", headers: SESSION_HEADERS, body: JSON.stringify(body), credentials: "same-origin",
  });
  if (!response.ok) throw await readError(response);
  return response.status === 204 ? null : response.json();
}

/** Exchange the session cookie for a new token pair (the cookie rotates). Concurrent callers
 * share one exchange, and tabs take turns (a Web Lock): presenting a refresh token that
 * another tab has just rotated would look like theft and end every session. */
export function restore() {
  if (!refreshing && !localStorage.getItem(MAYBE_SIGNED_IN)) return Promise.resolve(null);
  if (!refreshing) {
    const exchange = async () => {
      try {
        return signedIn(await authCall("/api/auth/refresh", {}));
      } catch (error) {
        if (error instanceof ApiError && error.status < 500) { forget(); return null; }
        throw error;
      }
    };
    const locked = navigator.locks ? navigator.locks.request("docex-session", exchange) : exchange();
    refreshing = locked.finally(() => { refreshing = null; });
  }
  return refreshing;
}

export async function signIn(email, password) {
  return signedIn(await authCall("/api/auth/login", { email, password }));
}

export async function register(name, email, password) {
  return signedIn(await authCall("/api/auth/register", { name, email, password }));
}

/** End the session on the server (the refresh token is revoked, the cookie cleared). */
export async function signOut() {
  try {
    await authCall("/api/auth/logout", {});
  } finally {
    forget();
  }
}

function withQuery(path, query) {
  if (!query) return path;
  const params = new URLSearchParams();
  for (const [key, value] of Object.entries(query)) {
    if (value !== undefined && value !== null && value !== "") params.set(key, String(value));
  }
  const text = params.toString();
  return text ? `${path}?${text}` : path;
}

/** Call the API with the access token; an expired token is renewed once from the cookie.
 *
 * options: `json` (a body sent as JSON), `form` (FormData), `query` (an object; empty values
 * dropped), `headers`, `raw` (return the Response itself). Returns the parsed body, or null
 * for 204. Throws ApiError for an error answer. */
export async function request(method, path, { json, form, query, headers = {}, raw = false } = {}) {
  const url = withQuery(path, query);
  for (let attempt = 0; ; attempt += 1) {
    const sent = { ...headers };
    if (accessToken) sent.Authorization = `Bearer ${accessToken}`;
    let body;
    if (json !== undefined) {
      sent["Content-Type"] = "application/json";
      body = JSON.stringify(json);
    } else if (form) {
      body = form;
    }
    let response;
    try {
      response = await fetch(url, { method, headers: sent, body, credentials: "same-origin" });
    } catch {
      // The browser's own words ("Failed to fetch") said nothing of what happened.
      throw new ApiError(0, { message: method === "GET" ? "docex cannot be reached (is it running?). Try again."
        : "docex cannot be reached (is it running?): this was not done. Try again." });
    }
    if (response.status === 401 && attempt === 0 && (await restore())) continue;
    if (response.status === 401) forget();
    if (!response.ok) throw await readError(response);
    if (raw) return response;
    return response.status === 204 ? null : response.json();
  }
}

export const get = (path, query) => request("GET", path, { query });
export const post = (path, json) => request("POST", path, { json: json ?? {} });
export const patch = (path, json) => request("PATCH", path, { json });
export const del = (path) => request("DELETE", path);

/** Every item of a paginated list (`{data, nextCursor}`), every page of it. No cap: the
 * screens that use it (a schema picker, the lists of schemas, endpoints, keys, sessions,
 * users) show what it returns as the whole, so a cut-off list would hide the oldest items
 * without a word (a 501st schema could be neither opened nor picked). */
export async function all(path, query = {}) {
  const items = [];
  let cursor;
  do {
    const page = await get(path, { ...query, limit: 100, cursor });
    items.push(...page.data);
    cursor = page.nextCursor;
  } while (cursor);
  return items;
}

/** Save what `path` answers as a file (an export): a link cannot carry the token. */
export async function download(path, query, fileName) {
  const response = await request("GET", path, { query, raw: true });
  const url = URL.createObjectURL(await response.blob());
  const link = Object.assign(document.createElement("a"), { href: url, download: fileName });
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 60_000);
}

/** A URL for an image the API serves to signed-in users only (an <img src> carries no
 * token). The browser's HTTP cache still applies: the route answers with a validator and
 * `Cache-Control: private`, so a page seen before is not downloaded again. */
export async function imageUrl(path) {
  const response = await request("GET", path, { raw: true });
  return URL.createObjectURL(await response.blob());
}
