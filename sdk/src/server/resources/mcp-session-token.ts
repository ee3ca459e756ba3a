/**
 * MCP session tokens: what a harness calling a resources server's tools over MCP sends instead
 * of a session cookie. A `/seed_session` reply hands one out; `/mcp` reads it back.
 *
 * A token is `<base64url JSON>.<base64url HMAC-SHA256>`, signed like the session cookie but with
 * a key of its own (derived from the same session secret, salted), so neither can pass for the
 * other. Its JSON names:
 * - `sid`: the session;
 * - `tools`: the tool names the session may call, or null for all;
 * - `episode` (checkpointing on only): the capture key of the attempt that seeded it, so a call
 *   from an attempt a restore replaced, or a retired one, is refused like any request of it;
 * - `owner` (several workers only): the worker holding the session, as its cookie names it, so
 *   a call that another worker accepts is passed on to that one.
 *
 * The key is as stable as the session secret: with checkpointing on it survives a restart, so a
 * restored process reads the tokens its predecessor minted.
 *
 * @see docs/mcp.md
 */
import type { IncomingMessage } from "node:http";
import type { Request } from "express";
import { captureKey, fromCaptureKey, type EpisodeId } from "../../identity/episode-id.js";
import { splitRolloutPath } from "../../identity/rollout-prefix.js";
import { decodeSigned, encodeSigned } from "./session-cookie.js";

/** The request header carrying an MCP session token (matched case-insensitively). */
export const MCP_SESSION_TOKEN_HEADER = "X-NeMo-Gym-Session-Token";

/** Separates the token key from the session cookie's, derived from the same secret. */
export const MCP_TOKEN_SALT = "nemo-gym-mcp-session-token";

/** The path of the MCP endpoint. */
export const MCP_PATH = "/mcp";

/** What a valid MCP session token says. */
export interface McpTokenClaims {
  /** The session the calls are made on. */
  readonly sessionId: string;
  /** The attempt that seeded the session; null with checkpointing off. */
  readonly episode: EpisodeId | null;
  /** The tools the session may call; null: every tool. */
  readonly tools: readonly string[] | null;
  /** The worker owning the session, when the server runs several. @default none (one process) */
  readonly owner?: string | null;
}

/** Whether `path` (rollout prefix stripped) is the MCP endpoint or below it. */
export function isMcpPath(path: string): boolean {
  return path === MCP_PATH || path.startsWith(`${MCP_PATH}/`);
}

/** Base64url payload, a dot, base64url signature: anything else is no token of ours. */
const TOKEN_SHAPE = /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/;

/** Mints and reads one server's MCP session tokens (one instance per server). */
export class McpSessionTokens {
  readonly #key: Buffer;
  /** Each request's token is read once, by whichever layer asks first. */
  readonly #read = new WeakMap<Request, McpTokenClaims | null>();

  /** `key`: the server's token key, derived from its session secret with {@link MCP_TOKEN_SALT}. */
  constructor(key: Buffer) {
    this.#key = key;
  }

  /** A signed token for `claims`. */
  mint(claims: McpTokenClaims): string {
    return encodeSigned(
      {
        sid: claims.sessionId,
        tools: claims.tools === null ? null : [...claims.tools],
        ...(claims.episode === null ? {} : { episode: captureKey(claims.episode) }),
        ...(claims.owner === undefined || claims.owner === null ? {} : { owner: claims.owner }),
      },
      this.#key,
    );
  }

  /**
   * The claims of a token, or null when there is none usable: missing, not UTF-8, a bad
   * signature, not a JSON object, or without a session.
   */
  decode(value: string | undefined): McpTokenClaims | null {
    if (value === undefined || !TOKEN_SHAPE.test(value)) return null;
    const data = decodeSigned(value, this.#key);
    if (typeof data !== "object" || data === null || Array.isArray(data)) return null;
    const { sid, tools, episode, owner } = data as Record<string, unknown>;
    if (typeof sid !== "string" || sid.length === 0) return null;
    let allowed: readonly string[] | null = null;
    if (Array.isArray(tools)) {
      if (!tools.every((name): name is string => typeof name === "string")) return null;
      allowed = tools;
    } else if (tools !== null && tools !== undefined) return null;
    let attempt: EpisodeId | null = null;
    if (typeof episode === "string") {
      try {
        attempt = fromCaptureKey(episode);
      } catch {
        return null;
      }
    } else if (episode !== undefined) return null;
    if (owner !== undefined && (typeof owner !== "string" || owner.length === 0)) return null;
    return {
      sessionId: sid,
      episode: attempt,
      tools: allowed,
      ...(owner === undefined ? {} : { owner }),
    };
  }

  /**
   * The worker owning the session of a raw request's token, read before routing: `""` for a
   * token of a one-process server (it names none, as its cookie does); null when the request is
   * not to `/mcp` or carries no usable token.
   */
  ownerOf(req: IncomingMessage): string | null {
    const queryAt = (req.url ?? "").indexOf("?");
    let path = queryAt < 0 ? (req.url ?? "") : (req.url ?? "").slice(0, queryAt);
    const split = splitRolloutPath(path);
    if (split !== null && !("malformed" in split)) path = split.rest;
    if (!isMcpPath(path)) return null;
    const claims = this.claimsOf(req as Request);
    return claims === null ? null : (claims.owner ?? "");
  }

  /** The claims of the token a request carries (read once per request), or null. */
  claimsOf(req: Request): McpTokenClaims | null {
    if (this.#read.has(req)) return this.#read.get(req) ?? null;
    const header = req.headers[MCP_SESSION_TOKEN_HEADER.toLowerCase()];
    const claims = this.decode(typeof header === "string" ? header : undefined);
    this.#read.set(req, claims);
    return claims;
  }
}
