/**
 * What a conformance requirement is: an ID, the group it belongs to, which servers it applies
 * to, the section of the docs that states it, and a check that passes, fails with a reason or
 * is skipped with why. A requirement a server cannot be tested for is skipped, never passed.
 *
 * @see docs/conformance.md
 */
import type { ServerProfile } from "./profile.js";
import type { Target } from "./target.js";

/** What one check found. */
export type Outcome =
  | { readonly result: "pass" }
  | { readonly result: "fail"; readonly reason: string }
  | { readonly result: "skip"; readonly why: string };

/** The check passed. */
export const PASS: Outcome = Object.freeze({ result: "pass" });

/** The check failed; `reason` says what the server did instead, in one line. */
export function fail(reason: string): Outcome {
  return { result: "fail", reason };
}

/** The server cannot be tested for this requirement; `why` says what is missing. */
export function skip(why: string): Outcome {
  return { result: "skip", why };
}

/**
 * Thrown inside a check to fail it at once (what {@link expectThat} throws); the runner turns it
 * into a failed outcome with its message as the reason.
 */
export class CheckFailed extends Error {
  override readonly name = "CheckFailed";
}

/** Fails the running check with `reason` unless `condition` holds. */
export function expectThat(condition: boolean, reason: string | (() => string)): asserts condition {
  if (!condition) throw new CheckFailed(typeof reason === "string" ? reason : reason());
}

/** What a check gets: the server under test, what it declares, and fresh names to use. */
export interface CheckContext {
  readonly target: Target;
  readonly profile: ServerProfile;
  /** A checkpoint ID no earlier check of this run used. */
  checkpointId(): string;
  /** A rollout ID no earlier check of this run used. */
  rolloutId(): string;
  /** A fresh, empty, absolute directory for one commit, visible to the server (same machine). */
  checkpointDir(): Promise<string>;
  /** Unix seconds `seconds` from now: a `deadline_ts`. */
  deadline(seconds?: number): number;
  /** The seed of the hostile slice (printed with a replay command). */
  readonly seed: number;
  /** The body of a resources server's `/seed_session` (`--seed-body`). @default {} */
  readonly seedBody: unknown;
  /** A tool call of a resources server (`--tool`, else read from its OpenAPI document). */
  tool(): Promise<ToolCall | null>;
  /** The `task` of an environment's `/run` (`--task`). */
  readonly task: unknown;
  /**
   * Kills the server and starts it again (a crash, then a fresh process); null when the kit did
   * not launch it (`--launch`), and the crash requirements are skipped.
   */
  readonly restart: (() => Promise<void>) | null;
}

/** One tool route of a resources server and a body it accepts. */
export interface ToolCall {
  readonly path: string;
  readonly body: unknown;
}

/**
 * One requirement of the contract.
 *
 * - `id` is dotted, `<area>.<group>.<name>` (`core.auth.before-body`); `--only` and `--skip`
 *   take an ID or a group (`core.auth`).
 * - `appliesTo` returns null when the requirement applies to the server, else why not (the
 *   requirement is then skipped with that reason).
 * - `docs` is the section of the repository's docs that states it: `docs/<page>.md#<anchor>`.
 */
export interface Requirement {
  readonly id: string;
  /** One line: what a conforming server does. */
  readonly title: string;
  readonly docs: string;
  appliesTo(profile: ServerProfile): string | null;
  check(context: CheckContext): Promise<Outcome>;
}

/** The group of a requirement: its ID without the last segment (`core.auth`). */
export function groupOf(id: string): string {
  const cut = id.lastIndexOf(".");
  return cut < 0 ? id : id.slice(0, cut);
}

/** Applies to every server. */
export function everyServer(): string | null {
  return null;
}

/** How one requirement came out. `expected-fail` and `stale` come from the expected failures. */
export type ResultKind = "pass" | "fail" | "skip" | "expected-fail" | "stale";

/** One line of the report. */
export interface RequirementResult {
  readonly id: string;
  readonly group: string;
  readonly title: string;
  readonly docs: string;
  readonly result: ResultKind;
  /** Why it failed or was skipped; null when it passed. */
  readonly reason: string | null;
  readonly ms: number;
}
