import { createHmac, randomUUID, timingSafeEqual } from "node:crypto";
import type { Request, RequestHandler } from "express";
import { onResponseStart } from "./response-start.js";

/** The session of one request to a resources server. */
export interface ResourcesSession {
  /** The session ID (from the signed cookie, or minted for this request). */
  readonly id: string;
  /** Replaces the session ID, e.g. to key state by a caller-assigned ID; the reply's cookie names it. */
  replaceId(id: string): void;
}

interface SessionState {
  id: string;
  dirty: boolean;
}

const sessions = new WeakMap<Request, SessionState>();

/** The session of a request that passed the session layer. */
export function sessionOf(req: Request): ResourcesSession {
  const state = sessions.get(req);
  if (state === undefined)
    throw new Error("the resources session layer did not run for this request");
  return {
    get id() {
      return state.id;
    },
    replaceId(id: string) {
      if (id !== state.id) {
        state.id = id;
        state.dirty = true;
      }
    },
  };
}

/** Cookie name and signing key of a server. */
export interface SessionCookieOptions {
  /** `<ServerClassName>___<server name>` */
  readonly cookieName: string;
  /**
   * The HMAC key, from the server's session secret (see `session-secret.ts`): never from the
   * cookie name alone, which is public.
   */
  readonly key: Buffer;
  /** The worker owning the sessions started here, named in their cookies. @default none (one process) */
  readonly owner?: string | null;
  /**
   * The session a request names other than by its cookie (a valid MCP session token), or null
   * to use the cookie's. @default the cookie's, always
   */
  readonly namedSession?: (req: Request) => string | null;
}

function sign(key: Buffer, payload: string): string {
  return createHmac("sha256", key).update(payload).digest("base64url");
}

/**
 * Signs a JSON value as `<base64url JSON>.<base64url HMAC-SHA256>`: the form of session cookies
 * and MCP session tokens (each with its own key).
 */
export function encodeSigned(value: unknown, key: Buffer): string {
  const payload = Buffer.from(JSON.stringify(value)).toString("base64url");
  return `${payload}.${sign(key, payload)}`;
}

/**
 * The JSON value of a signed string made by {@link encodeSigned}, or undefined when the
 * signature is wrong, the payload is not UTF-8 or not JSON.
 */
export function decodeSigned(value: string, key: Buffer): unknown {
  const dot = value.lastIndexOf(".");
  if (dot <= 0) return undefined;
  const payload = value.slice(0, dot);
  const given = Buffer.from(value.slice(dot + 1));
  const expected = Buffer.from(sign(key, payload));
  if (given.length !== expected.length || !timingSafeEqual(given, expected)) return undefined;
  try {
    const text = UTF8.decode(Buffer.from(payload, "base64url"));
    return JSON.parse(text) as unknown;
  } catch {
    return undefined;
  }
}

/** Refuses bytes that are not UTF-8 instead of replacing them. */
const UTF8 = new TextDecoder("utf-8", { fatal: true });

function readCookie(header: string | undefined, name: string): string | null {
  if (header === undefined) return null;
  for (const part of header.split(";")) {
    const at = part.indexOf("=");
    if (at < 0) continue;
    if (part.slice(0, at).trim() === name) return part.slice(at + 1).trim();
  }
  return null;
}

/** What a signed session cookie says. */
interface SessionCookiePayload {
  readonly sessionId: string;
  /** The worker owning the session; null when the server ran as one process. */
  readonly owner: string | null;
}

function decodePayload(value: string, key: Buffer): SessionCookiePayload | null {
  const data = decodeSigned(value, key);
  if (typeof data !== "object" || data === null) return null;
  const { session_id: id, owner } = data as Record<string, unknown>;
  if (typeof id !== "string" || id.length === 0) return null;
  return { sessionId: id, owner: typeof owner === "string" && owner.length > 0 ? owner : null };
}

/** Decodes a signed cookie value to its session ID, or null when absent, forged or malformed. */
export function decodeSessionCookie(value: string, key: Buffer): string | null {
  return decodePayload(value, key)?.sessionId ?? null;
}

/**
 * Encodes a session ID as a signed cookie value; `owner` (a worker's routing ID) only when the
 * server runs several workers, so a one-process cookie is unchanged.
 */
export function encodeSessionCookie(
  sessionId: string,
  key: Buffer,
  owner: string | null = null,
): string {
  const body = owner === null ? { session_id: sessionId } : { session_id: sessionId, owner };
  return encodeSigned(body, key);
}

/**
 * The owner a request's session cookie names (its signature checked): `""` for a cookie of a
 * one-process server, which names none; null without a valid cookie.
 */
export function sessionOwnerFromCookies(
  header: string | undefined,
  cookieName: string,
  key: Buffer,
): string | null {
  const raw = readCookie(header, cookieName);
  if (raw === null) return null;
  const payload = decodePayload(raw, key);
  return payload === null ? null : (payload.owner ?? "");
}

/**
 * The session layer: every request gets a session ID, from a valid signed cookie or newly
 * minted; the reply sets the cookie when the ID is new or was replaced.
 */
export function sessionCookie(options: SessionCookieOptions): RequestHandler {
  const key = options.key;
  const name = options.cookieName;
  const owner = options.owner ?? null;
  const namedSession = options.namedSession ?? null;
  return (req, res, next) => {
    // A session named otherwise (an MCP token) is the request's; its reply sets no cookie.
    const named = namedSession?.(req) ?? null;
    const raw = named !== null ? null : readCookie(req.headers.cookie, name);
    const id = named ?? (raw === null ? null : decodeSessionCookie(raw, key));
    const state: SessionState = { id: id ?? randomUUID(), dirty: id === null };
    sessions.set(req, state);
    onResponseStart(res, () => {
      if (state.dirty) {
        res.append(
          "Set-Cookie",
          `${name}=${encodeSessionCookie(state.id, key, owner)}; Path=/; HttpOnly; SameSite=Lax`,
        );
      }
    });
    next();
  };
}
