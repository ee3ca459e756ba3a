import { ConfigError } from "../../errors.js";

/** How a resources server's sessions take part in checkpoints. */
export const CHECKPOINT_MODES = ["restart_only", "stateless", "exported"] as const;
/**
 * One checkpoint mode.
 * - `restart_only` (the default): nothing of a session is saved; its rollout is a restart.
 * - `stateless`: tool results depend only on the request; nothing is exported.
 * - `exported`: the server implements the session hooks; its state is exported and restored.
 */
export type CheckpointMode = (typeof CHECKPOINT_MODES)[number];

/** Whether `/verify` may run again after a crash. */
export const CHECKPOINT_VERIFY_MODES = ["wait", "replay"] as const;
/**
 * One verify declaration.
 * - `wait` (the default): a checkpoint waits for `/verify` like any request.
 * - `replay`: `/verify` may run again after a crash and leaves checkpointed state unchanged, so a
 *   checkpoint does not wait for it.
 */
export type CheckpointVerify = (typeof CHECKPOINT_VERIFY_MODES)[number];

/** The route that seeds a session unless a server declares others. */
export const SEED_SESSION_PATH = "/seed_session";
/** The route that ends a session and frees its state. */
export const CLOSE_SESSION_PATH = "/close_session";
/** The route that verifies (and, unless a close follows, ends) a session. */
export const VERIFY_PATH = "/verify";

/** Refuses a declaration outside its allowed values, naming the class, attribute and values. */
export function checkDeclaration<T extends string>(
  className: string,
  attribute: string,
  value: unknown,
  allowed: readonly T[],
): T {
  if (typeof value === "string" && (allowed as readonly string[]).includes(value))
    return value as T;
  throw new ConfigError(
    `${className} declares ${attribute} = ${JSON.stringify(value)}; allowed values: ${allowed
      .map((v) => JSON.stringify(v))
      .join(", ")}`,
  );
}
