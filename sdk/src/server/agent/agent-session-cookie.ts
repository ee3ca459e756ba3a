import type { Request, Response } from "express";
import { parseCookieHeader } from "../../util/cookies.js";
import {
  decodeSessionCookie,
  encodeSessionCookie,
  sessionOwnerFromCookies,
} from "../resources/session-cookie.js";

/**
 * The signed cookie binding a client to an agent session (it carries the
 * `agent_session_id`), signed with a key from the server's session secret: a restored process
 * of the same deployment derives the same key, so it accepts the cookies its predecessor set.
 */
export class AgentSessionCookie {
  readonly name: string;
  readonly #key: Buffer;
  readonly #owner: string | null;

  /**
   * @param keyFor the server's key for a cookie name (see `session-secret.ts`)
   * @param owner the worker whose cookies name its sessions (null: one process)
   */
  constructor(
    serverName: string,
    keyFor: (cookieName: string) => Buffer,
    owner: string | null = null,
  ) {
    this.name = `agent_session___${serverName}`;
    this.#key = keyFor(this.name);
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
