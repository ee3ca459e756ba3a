import { createHash, createHmac, randomUUID, timingSafeEqual } from "node:crypto";
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

/** Cookie name and signing key of a server: deterministic, so a fresh process accepts old cookies. */
export interface SessionCookieOptions {
  /** `<ServerClassName>___<server name>` */
  readonly cookieName: string;
  /** Signing secret. @default the cookie name */
  readonly secret?: string;
}

function sign(key: Buffer, payload: string): string {
  return createHmac("sha256", key).update(payload).digest("base64url");
}

function readCookie(header: string | undefined, name: string): string | null {
  if (header === undefined) return null;
  for (const part of header.split(";")) {
    const at = part.indexOf("=");
    if (at < 0) continue;
    if (part.slice(0, at).trim() === name) return part.slice(at + 1).trim();
  }
  return null;
}

/** Decodes a signed cookie value to its session ID, or null when absent, forged or malformed. */
export function decodeSessionCookie(value: string, key: Buffer): string | null {
  const dot = value.lastIndexOf(".");
  if (dot <= 0) return null;
  const payload = value.slice(0, dot);
  const given = Buffer.from(value.slice(dot + 1));
  const expected = Buffer.from(sign(key, payload));
  if (given.length !== expected.length || !timingSafeEqual(given, expected)) return null;
  try {
    const data: unknown = JSON.parse(Buffer.from(payload, "base64url").toString("utf8"));
    if (typeof data !== "object" || data === null) return null;
    const id = (data as Record<string, unknown>).session_id;
    return typeof id === "string" && id.length > 0 ? id : null;
  } catch {
    return null;
  }
}

/** Encodes a session ID as a signed cookie value. */
export function encodeSessionCookie(sessionId: string, key: Buffer): string {
  const payload = Buffer.from(JSON.stringify({ session_id: sessionId })).toString("base64url");
  return `${payload}.${sign(key, payload)}`;
}

/** The signing key for a secret. */
export function sessionKey(secret: string): Buffer {
  return createHash("sha256").update(`gym-resources-session:${secret}`).digest();
}

/**
 * The session layer: every request gets a session ID, from a valid signed cookie or newly
 * minted; the reply sets the cookie when the ID is new or was replaced.
 */
export function sessionCookie(options: SessionCookieOptions): RequestHandler {
  const key = sessionKey(options.secret ?? options.cookieName);
  const name = options.cookieName;
  return (req, res, next) => {
    const raw = readCookie(req.headers.cookie, name);
    const id = raw === null ? null : decodeSessionCookie(raw, key);
    const state: SessionState = { id: id ?? randomUUID(), dirty: id === null };
    sessions.set(req, state);
    onResponseStart(res, () => {
      if (state.dirty) {
        res.append(
          "Set-Cookie",
          `${name}=${encodeSessionCookie(state.id, key)}; Path=/; HttpOnly; SameSite=Lax`,
        );
      }
    });
    next();
  };
}
