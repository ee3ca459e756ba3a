/**
 * What a project can be: its kind, its checkpoint mode and (resources servers) its verify
 * declaration, with the words the help and the prompts show for each.
 *
 * @module
 */

/** The participant kinds there is a template for. */
export const KINDS = ["resources", "agent", "environment"] as const;
/** A participant kind. */
export type Kind = (typeof KINDS)[number];

/** Checkpoint modes: a resources server's `checkpointMode`; agents and environments export. */
export const MODES = ["exported", "stateless", "restart_only"] as const;
/** A checkpoint mode. */
export type Mode = (typeof MODES)[number];

/** A resources server's `checkpointVerify` declaration. */
export const VERIFY_MODES = ["wait", "replay"] as const;
/** A verify declaration. */
export type Verify = (typeof VERIFY_MODES)[number];

/** The modes each kind has a template for; the first is the default. */
export const MODES_OF: Readonly<Record<Kind, readonly Mode[]>> = {
  resources: ["exported", "stateless", "restart_only"],
  // An agent or environment that saves nothing is the same template with its hooks (or its
  // checkpointBoundaries) removed, so only the version that checkpoints is offered.
  agent: ["exported"],
  environment: ["exported"],
};

/** One line on each kind, for the help and the prompt. */
export const KIND_HINTS: Readonly<Record<Kind, string>> = {
  resources: "tools, a verifier and per-rollout session state",
  agent: "a turn loop with sessions, boundaries and the session hooks",
  environment: "an episode protocol written as steps with boundaries",
};

/** One line on each mode of a resources server. */
export const MODE_HINTS: Readonly<Record<Mode, string>> = {
  exported: "sessions are exported at each checkpoint and restored after a crash",
  stateless: "tool results depend only on the request: nothing to export",
  restart_only: "nothing is saved: after a crash its rollouts start over",
};

/** One line on each verify declaration. */
export const VERIFY_HINTS: Readonly<Record<Verify, string>> = {
  wait: "/verify waits while a checkpoint is open, and a checkpoint waits for it",
  replay: "/verify may run again after a crash and never holds up a checkpoint",
};

/** Everything that picks a template. */
export interface Choices {
  readonly kind: Kind;
  readonly mode: Mode;
  /** Resources servers only; null for other kinds. */
  readonly verify: Verify | null;
}

/** The template folder (`template-<name>`) of `choices`. */
export function templateName(choices: Choices): string {
  return choices.kind === "resources" ? `resources-${choices.mode}` : choices.kind;
}

/** Whether `value` is one of `allowed` (narrowing it). */
export function isOneOf<T extends string>(allowed: readonly T[], value: unknown): value is T {
  return typeof value === "string" && (allowed as readonly string[]).includes(value);
}
