/**
 * The secret a server signs its session cookies with, and the per-cookie keys derived from it.
 *
 * A cookie's key must not be computable from public names (the cookie name is the class and
 * server name), or anyone could forge a cookie naming any session. So the key is derived from a
 * secret: the one configured, else the checkpoint control token (stable across a crash and
 * restore of the same deployment, and already secret), else random bytes (checkpointing off:
 * there is no restore for a cookie to survive).
 *
 * @see docs/resources-server.md#the-session-cookie
 */
import { hkdfSync, randomBytes } from "node:crypto";
import { inspect } from "node:util";
import { ConfigError } from "../errors.js";
import type { CheckpointSettings } from "../wire/settings.js";

/** Where a server's session secret came from (safe to log: it names no value). */
export type SessionSecretSource = "configured" | "control_token" | "random";

/** Separates these keys from any other use of the same secret (the control token's, above all). */
const SALT = "gym-participant-sdk/session-cookie/v1";

/**
 * A server's session secret. Opaque: it never prints, serializes or logs its value, so it can
 * sit in objects that are.
 */
export class SessionSecret {
  /** Where the secret came from. */
  readonly source: SessionSecretSource;
  readonly #material: Buffer;
  readonly #keys = new Map<string, Buffer>();

  private constructor(source: SessionSecretSource, material: Buffer) {
    this.source = source;
    this.#material = material;
  }

  /** A secret given by the deployment file or the server's options (refused when blank). */
  static configured(value: string): SessionSecret {
    // The message names the setting, never the value.
    if (value.trim() === "") {
      throw new ConfigError(
        "the session secret must not be blank: set a long random value, or leave it unset for the default",
      );
    }
    return new SessionSecret("configured", Buffer.from(value, "utf8"));
  }

  /** The default with checkpointing on: a restored process derives the same keys. */
  static fromControlToken(token: string): SessionSecret {
    return new SessionSecret("control_token", Buffer.from(token, "utf8"));
  }

  /**
   * The default with checkpointing off: 32 random bytes, new per process, or the draw a
   * coordinator shares with all its workers.
   */
  static random(shared: string | null = null): SessionSecret {
    return new SessionSecret(
      "random",
      shared === null ? randomBytes(32) : Buffer.from(shared, "utf8"),
    );
  }

  /**
   * The HMAC key of one cookie (HKDF-SHA256 with the cookie name as context), so two cookies of
   * one secret never share a key.
   */
  keyFor(cookieName: string): Buffer {
    let key = this.#keys.get(cookieName);
    if (key === undefined) {
      key = Buffer.from(hkdfSync("sha256", this.#material, SALT, cookieName, 32));
      this.#keys.set(cookieName, key);
    }
    return key;
  }

  /** Never the value. */
  toJSON(): string {
    return `[session secret: ${this.source}]`;
  }

  /** Never the value. */
  toString(): string {
    return this.toJSON();
  }

  /** Never the value. */
  [inspect.custom](): string {
    return this.toJSON();
  }
}

/**
 * A server's session secret: `configured` when given, else derived from the control token with
 * checkpointing on, else random (`sharedRandom`: the draw of a worker's coordinator).
 */
export function resolveSessionSecret(
  configured: string | null | undefined,
  checkpoint: CheckpointSettings,
  sharedRandom: string | null = null,
): SessionSecret {
  if (configured !== undefined && configured !== null) return SessionSecret.configured(configured);
  const token = checkpoint.control_auth_token;
  if (checkpoint.enabled && token !== null && token.trim() !== "") {
    return SessionSecret.fromControlToken(token);
  }
  return SessionSecret.random(sharedRandom);
}
