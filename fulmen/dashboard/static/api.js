// The dashboard's API client: every request carries the bearer token kept in sessionStorage.

const KEY = "fulmen.dashboard.token";

export class AuthError extends Error {}

export function token() {
  return sessionStorage.getItem(KEY);
}

export function setToken(value) {
  if (value) sessionStorage.setItem(KEY, value);
  else sessionStorage.removeItem(KEY);
}

async function request(method, path, body) {
  const headers = { accept: "application/json" };
  const t = token();
  if (t) headers.authorization = `Bearer ${t}`;
  if (body !== undefined) headers["content-type"] = "application/json";
  const response = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    cache: "no-store",
  });
  const data = await response.json().catch(() => ({ error: response.statusText }));
  if (response.status === 401) throw new AuthError(data.error || "unauthorized");
  if (!response.ok) throw new Error(data.error || `${response.status} ${response.statusText}`);
  return data;
}

export const get = (path) => request("GET", path);
export const post = (path, body) => request("POST", path, body);

export function query(params) {
  const search = new URLSearchParams();
  for (const [key, value] of Object.entries(params)) {
    if (value === null || value === undefined || value === "") continue;
    if (Array.isArray(value)) value.forEach((v) => search.append(key, v));
    else search.set(key, value);
  }
  const text = search.toString();
  return text ? `?${text}` : "";
}
