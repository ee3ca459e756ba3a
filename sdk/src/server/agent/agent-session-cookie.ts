import { createHash } from "node:crypto";
import type { Request, Response } from "express";
import { parseCookieHeader } from "../../util/cookies.js";
import {
  decodeSessionCookie,
  encodeSessionCookie,
  sessionOwnerFromCookies,
} from "../resources/session-cookie.js";

/**
 * The signed cookie binding a client to an agent session (it carries the
 * `agent_session_id`). Deterministic per server name, so a restored process accepts the
 * cookies its predecessor set.
 */
export class AgentSessionCookie {
  readonly name: string;
  readonly #key: Buffer;
  readonly #owner: string | null;

  /** @param owner the worker whose cookies name its sessions (null: one process) */
  constructor(serverName: string, owner: string | null = null) {
    this.name = `agent_session___${serverName}`;
    this.#key = createHash("sha256").update(`gym-agent-session:${serverName}`).digest();
    this.#owner = owner;
  }

  /** The owner a raw cookie header's marker names (`""`: none), or null without a valid one. */
  ownerOf(cookieHeader: string | undefined): string | null {
    return sessionOwnerFromCookies(cookieHeader, this.name, this.#key);
  }

  /**
   * The session ID the request's cookie names: null without the cookie; `undefined` when the
   * cookie is present but is not a valid marker (forged or malformed).
   */
  read(req: Request): string | null | undefined {
    const raw = parseCookieHeader(req.headers.cookie)[this.name];
    if (raw === undefined) return null;
    return decodeSessionCookie(raw, this.#key) ?? undefined;
  }

  /** Sets the marker on the reply. */
  set(res: Response, sessionId: string): void {
    res.append(
      "Set-Cookie",
      `${this.name}=${encodeSessionCookie(sessionId, this.#key, this.#owner)}; Path=/; HttpOnly; SameSite=Lax`,
    );
  }
}
