/**
 * What a server declares about itself, read once from its status reply: the kind and instance,
 * and for a resources server its checkpoint and verify modes. Requirements choose by it.
 */
import { PARTICIPANT_KINDS, type ParticipantKind } from "../wire/control.js";

/** A resources server's `checkpointMode`, as its status reports it. */
export type ResourcesMode = "restart_only" | "stateless" | "exported";

/** What the kit knows of the server under test. */
export interface ServerProfile {
  readonly kind: ParticipantKind;
  readonly instance: string;
  /** Resources servers only: `mode` of the status; null for other kinds or when not reported. */
  readonly mode: ResourcesMode | null;
  /** Resources servers only: `verify` of the status (`wait` or `replay`). */
  readonly verify: "wait" | "replay" | null;
  /** Worker processes the status reports (`workers`), 1 when it reports none. */
  readonly workers: number;
}

const MODES: readonly ResourcesMode[] = ["restart_only", "stateless", "exported"];

/** Whether `value` is a participant kind. */
export function isParticipantKind(value: unknown): value is ParticipantKind {
  return typeof value === "string" && (PARTICIPANT_KINDS as readonly string[]).includes(value);
}

/**
 * The profile a status reply declares; null when its `kind` is not a participant kind (the
 * status check reports that).
 */
export function profileOf(status: Readonly<Record<string, unknown>>): ServerProfile | null {
  const { kind, instance, mode, verify, workers } = status;
  if (!isParticipantKind(kind)) return null;
  return {
    kind,
    instance: typeof instance === "string" ? instance : "",
    mode:
      kind === "resources" && MODES.includes(mode as ResourcesMode)
        ? (mode as ResourcesMode)
        : null,
    verify: kind === "resources" && (verify === "wait" || verify === "replay") ? verify : null,
    workers: typeof workers === "number" && Number.isSafeInteger(workers) ? workers : 1,
  };
}

/** One line naming what the server declares, for the report's header. */
export function describeProfile(profile: ServerProfile): string {
  const parts: string[] = [`${profile.kind} '${profile.instance}'`];
  if (profile.mode !== null) parts.push(`mode ${profile.mode}`);
  if (profile.verify !== null) parts.push(`verify ${profile.verify}`);
  if (profile.workers !== 1) parts.push(`${profile.workers} workers`);
  return parts.join(", ");
}
