// Stockade guest SDK for JavaScript plugins (built with componentize-js by `stockade build`).
//
// Authors write plain functions and never see the WIT bindings:
//
//   import { tool, http, log, secretAvailable, ToolInputError } from "stockade";
//
//   tool("tracker.list-issues", (input) => {
//     if (!input.repo) throw new ToolInputError("repo is required");
//     const r = http.get("https://api.tracker.example/v1/issues", { headers: { Accept: "application/json" } });
//     log.info(`got ${r.status}`);
//     return r.json();
//   });
//
// The host performs every request (allowlist, credentials, redirects, limits); a refusal
// throws the HttpError subclass of its WIT case. Every call runs in a fresh instance.
//
// Crossing the boundary (stockade:plugin@1.1.0): headers travel as one JSON text of
// [name, value] pairs and bodies as latin-1 text (byte b is the character U+00b), so the
// host moves each with one copy. This module applies both mappings: authors pass and
// receive string/Uint8Array bodies and header lists exactly as before.
// `call` is the world's export; the entry module that `stockade build` generates
// re-exports it. It never lets an exception escape: each failure becomes a tool-error.

import {
  httpRequest as hostHttpRequest,
  log as hostLog,
  secretAvailable as hostSecretAvailable,
} from "stockade:plugin/host@1.1.0";

const NAME = /^[a-z][a-z0-9]*(?:[._-][a-z0-9]+)*$/;
const MAX_NAME = 64;
const MAX_MESSAGE = 1024;
const MAX_U32 = 4294967295;
const handlers = new Map();

/** The tool failed; the message is reported to the caller (TOOL_FAILED). */
export class ToolError extends Error {
  constructor(message) {
    super(message);
    this.name = "ToolError";
  }
}

/** The input is unusable; the message is reported to the caller (INPUT_INVALID). */
export class ToolInputError extends ToolError {
  constructor(message) {
    super(message);
    this.name = "ToolInputError";
  }
}

/** An outbound request failed; `kind` is the WIT http-error case, `detail` the host's text. */
export class HttpError extends Error {
  constructor(kind, detail) {
    super(detail ? `${kind}: ${detail}` : kind);
    this.name = "HttpError";
    this.kind = kind;
    this.detail = detail || "";
  }
}

function httpErrorClass(name, kind) {
  const cls = class extends HttpError {
    constructor(detail) {
      super(kind, detail);
      this.name = name;
    }
  };
  Object.defineProperty(cls, "name", { value: name });
  return cls;
}

export const HttpDenied = httpErrorClass("HttpDenied", "denied");
export const CredentialUnavailable = httpErrorClass("CredentialUnavailable", "credential-unavailable");
export const InvalidRequest = httpErrorClass("InvalidRequest", "invalid-request");
export const TooLarge = httpErrorClass("TooLarge", "too-large");
export const HttpTimeout = httpErrorClass("HttpTimeout", "timeout");
export const BudgetExhausted = httpErrorClass("BudgetExhausted", "budget-exhausted");
export const NetworkError = httpErrorClass("NetworkError", "network");

const ERROR_CLASSES = {
  denied: HttpDenied,
  "credential-unavailable": CredentialUnavailable,
  "invalid-request": InvalidRequest,
  "too-large": TooLarge,
  timeout: HttpTimeout,
  "budget-exhausted": BudgetExhausted,
  network: NetworkError,
};

/**
 * Register `fn(input) -> JSON-able value` as the handler of tool `name`.
 * Throws at build time for an invalid or duplicate name.
 */
export function tool(name, fn) {
  if (typeof name !== "string" || name.length > MAX_NAME || !NAME.test(name)) {
    throw new Error(`invalid tool name ${JSON.stringify(name)}: lowercase segments like 'tracker.list-issues'`);
  }
  if (handlers.has(name)) throw new Error(`tool ${JSON.stringify(name)} already has a handler`);
  if (typeof fn !== "function") throw new TypeError("tool() needs a function");
  handlers.set(name, fn);
  return fn;
}

/** The names of the registered tools, sorted. */
export function registeredTools() {
  return [...handlers.keys()].sort();
}

/** Called by the generated entry module: the handlers must be exactly the manifest's tools. */
export function checkTools(expected) {
  const missing = expected.filter((n) => !handlers.has(n)).sort();
  const extra = registeredTools().filter((n) => !expected.includes(n));
  if (missing.length || extra.length) {
    throw new Error(
      `handlers do not match stockade.toml: no handler for ${JSON.stringify(missing)}, ` +
        `not in stockade.toml: ${JSON.stringify(extra)}`,
    );
  }
}

function format(args) {
  return args.map((a) => (typeof a === "string" ? a : safeJson(a))).join(" ");
}

function safeJson(value) {
  try {
    const text = JSON.stringify(value);
    return text === undefined ? String(value) : text;
  } catch {
    return String(value);
  }
}

/** Write to the call's log (capped by the host at the manifest's max_log_bytes). */
export const log = Object.freeze({
  debug: (...args) => hostLog("debug", format(args)),
  info: (...args) => hostLog("info", format(args)),
  warn: (...args) => hostLog("warn", format(args)),
  error: (...args) => hostLog("error", format(args)),
});

/** Whether secret `name` is staged for this call. The value is never visible here. */
export function secretAvailable(name) {
  if (typeof name !== "string") throw new TypeError("secret name must be a string");
  return Boolean(hostSecretAvailable(name));
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();

const ASCII = /^[\x00-\x7f]*$/;
const CHUNK = 8192;

function headerPairs(headers) {
  if (headers === undefined || headers === null) return [];
  const pairs = Array.isArray(headers) ? headers : Object.entries(headers);
  return pairs.map(([name, value]) => {
    if (typeof name !== "string" || typeof value !== "string") {
      throw new TypeError("header names and values must be strings");
    }
    return [name, value];
  });
}

/** Bytes as latin-1 text: one character (U+0000..U+00FF) per byte. */
function bytesToLatin1(bytes) {
  let out = "";
  for (let i = 0; i < bytes.length; i += CHUNK) {
    out += String.fromCharCode.apply(null, bytes.subarray(i, i + CHUNK));
  }
  return out;
}

/** Latin-1 text back to bytes (ASCII, the common case, through the native encoder). */
function latin1ToBytes(text) {
  if (ASCII.test(text)) return encoder.encode(text);
  const out = new Uint8Array(text.length);
  for (let i = 0; i < text.length; i++) out[i] = text.charCodeAt(i) & 0xff;
  return out;
}

/** A string as the latin-1 text of its UTF-8 bytes. */
function utf8Latin1(text) {
  if (ASCII.test(text)) return text;
  try {
    return unescape(encodeURIComponent(text)); // native, about 10x cheaper than a JS loop here
  } catch {
    return bytesToLatin1(encoder.encode(text)); // lone surrogates: U+FFFD, as TextEncoder does
  }
}

/** Latin-1 text holding UTF-8 bytes, decoded as TextDecoder would (BOM dropped, U+FFFD). */
function latin1Utf8(raw) {
  const text = raw.startsWith("\u00ef\u00bb\u00bf") ? raw.slice(3) : raw;
  if (ASCII.test(text)) return text;
  try {
    return decodeURIComponent(escape(text)); // native, about 10x cheaper than a JS loop here
  } catch {
    return decoder.decode(latin1ToBytes(raw)); // invalid UTF-8: replacement characters
  }
}

function bodyText(body) {
  if (body === undefined || body === null) return undefined;
  if (typeof body === "string") return utf8Latin1(body);
  if (body instanceof Uint8Array) return bytesToLatin1(body);
  if (body instanceof ArrayBuffer) return bytesToLatin1(new Uint8Array(body));
  throw new TypeError("body must be a string, Uint8Array or ArrayBuffer");
}

function parseHeaderBlock(text) {
  let items;
  try {
    items = text ? JSON.parse(text) : [];
  } catch {
    return [];
  }
  if (!Array.isArray(items)) return [];
  return items.filter((p) => Array.isArray(p) && p.length === 2).map(([n, v]) => [String(n), String(v)]);
}

function checkTimeout(timeoutMs) {
  if (timeoutMs === undefined || timeoutMs === null) return undefined;
  if (!Number.isInteger(timeoutMs) || timeoutMs <= 0 || timeoutMs > MAX_U32) {
    throw new RangeError("timeoutMs must be a positive integer (milliseconds)");
  }
  return timeoutMs;
}

function makeResponse(raw) {
  const headers = parseHeaderBlock(raw.headers);
  const latin1 = raw.body;
  let bytes;
  return Object.freeze({
    status: raw.status,
    ok: raw.status >= 200 && raw.status < 300,
    headers,
    // The bytes are materialized on first use: text() and json() decode without them.
    get body() {
      if (bytes === undefined) bytes = latin1ToBytes(latin1);
      return bytes;
    },
    header(name) {
      const wanted = name.toLowerCase();
      const found = headers.find(([n]) => n.toLowerCase() === wanted);
      return found ? found[1] : undefined;
    },
    text() {
      return latin1Utf8(latin1);
    },
    json() {
      return JSON.parse(latin1Utf8(latin1));
    },
  });
}

function toHttpError(e) {
  const payload = e !== null && typeof e === "object" && "payload" in e ? e.payload : e;
  const cls = payload && ERROR_CLASSES[payload.tag];
  if (!cls) return new NetworkError(String((payload && payload.val) || e));
  return new cls(typeof payload.val === "string" ? payload.val : "");
}

/**
 * Send one request through the host.
 * @param {string} method
 * @param {string} url  absolute https URL within the manifest's http.allow
 * @param {{headers?: object|Array, body?: string|Uint8Array, timeoutMs?: number}} [options]
 * @returns {{status:number, ok:boolean, headers:Array, body:Uint8Array, header:Function, text:Function, json:Function}}
 * @throws {HttpError} one subclass per WIT http-error case
 */
function request(method, url, options = {}) {
  if (typeof method !== "string" || typeof url !== "string") {
    throw new TypeError("method and url must be strings");
  }
  const req = {
    method: method.toUpperCase(),
    url,
    headers: JSON.stringify(headerPairs(options.headers)),
    body: bodyText(options.body),
    timeoutMs: checkTimeout(options.timeoutMs),
  };
  let raw;
  try {
    raw = hostHttpRequest(req);
  } catch (e) {
    throw toHttpError(e);
  }
  return makeResponse(raw);
}

function post(url, options = {}) {
  if (options.json !== undefined) {
    if (options.body !== undefined) throw new TypeError("give json or body, not both");
    const headers = headerPairs(options.headers);
    if (!headers.some(([n]) => n.toLowerCase() === "content-type")) {
      headers.push(["Content-Type", "application/json"]);
    }
    return request("POST", url, { ...options, json: undefined, headers, body: JSON.stringify(options.json) });
  }
  return request("POST", url, options);
}

/** Outbound HTTP through the host: request(method, url, options), get(url, options), post(url, options). */
export const http = Object.freeze({
  request,
  get: (url, options = {}) => request("GET", url, options),
  post,
});

function short(text) {
  const s = String(text);
  return s.length <= MAX_MESSAGE ? s : `${s.slice(0, MAX_MESSAGE - 3)}...`;
}

function describe(e) {
  if (e instanceof ToolError) return short(e.message || e.name);
  if (e instanceof Error) return short(e.message ? `${e.name}: ${e.message}` : e.name);
  return short(`thrown: ${safeJson(e)}`);
}

function invoke(handler, input) {
  let value;
  try {
    value = JSON.parse(input);
  } catch {
    return { ok: false, err: { tag: "invalid-input", val: "input is not valid JSON" } };
  }
  try {
    const result = handler(value);
    if (result !== null && typeof result === "object" && typeof result.then === "function") {
      // http is synchronous here; an async handler's promise would serialize as "{}".
      return { ok: false, err: { tag: "failed", val: "tool handlers must be synchronous functions" } };
    }
    const text = JSON.stringify(result);
    if (text === undefined) return { ok: true, text: "null" };
    return { ok: true, text };
  } catch (e) {
    const tag = e instanceof ToolInputError ? "invalid-input" : "failed";
    // The stack goes to the call's log for the author (the host's
    // HostConfig(debug_guest_errors=True) puts it in error.details["guest_traceback"]).
    if (tag === "failed" && !(e instanceof ToolError) && e instanceof Error && e.stack) {
      try { hostLog("error", `[stockade:traceback]\n${describe(e)}\n${e.stack}`); } catch { /* best effort */ }
    }
    return { ok: false, err: { tag, val: describe(e) } };
  }
}

/** The world's `call` export: JSON text in, JSON text out; failures throw a tool-error. */
export function call(toolName, input) {
  const handler = handlers.get(toolName);
  if (handler === undefined) {
    throw { tag: "invalid-input", val: short(`unknown tool ${JSON.stringify(toolName)}`) };
  }
  let outcome;
  try {
    outcome = invoke(handler, input);
  } catch {
    outcome = { ok: false, err: { tag: "failed", val: "internal error in the tool" } };
  }
  if (outcome.ok) return outcome.text;
  throw outcome.err;
}
