import { recordOperation, recordVolume } from "../telemetry/metrics.js";
import { ATTR } from "../telemetry/names.js";
import { inSpan, timedSpan } from "../telemetry/spans.js";
import type { Operation, Phase } from "../wire/control.js";

/** Who runs an operation: the attributes every figure of it carries. */
export interface OperationOwner {
  /** The participant kind. */
  readonly kind: string;
  /** The server's configured name. */
  readonly instance: string;
}

/**
 * Runs a control operation in its span, `gym.checkpoint.<operation>`, and records its duration
 * and outcome whatever it is. The span names the checkpoint and how many episodes or rollouts
 * the body names (read from the raw body: it may not parse), and on success the phase reached.
 */
export async function inOperationSpan<T>(
  operation: Operation,
  body: unknown,
  owner: OperationOwner,
  run: () => Promise<T>,
  phase: () => Phase,
): Promise<T> {
  const fields = (typeof body === "object" && body !== null ? body : {}) as Record<string, unknown>;
  const attributes: Record<string, string | number> = {
    [ATTR.kind]: owner.kind,
    [ATTR.instance]: owner.instance,
  };
  if (typeof fields.checkpoint_id === "string")
    attributes[ATTR.checkpointId] = fields.checkpoint_id;
  if (Array.isArray(fields.episode_ids)) attributes[ATTR.episodes] = fields.episode_ids.length;
  if (Array.isArray(fields.rollout_ids)) attributes[ATTR.rollouts] = fields.rollout_ids.length;
  const started = performance.now();
  let outcome: "ok" | "error" = "error";
  try {
    return await inSpan(`gym.checkpoint.${operation}`, attributes, async (span) => {
      const reply = await run();
      span.setAttribute(ATTR.phase, phase());
      outcome = "ok";
      return reply;
    });
  } finally {
    recordOperation(operation, owner.kind, outcome, (performance.now() - started) / 1000);
  }
}

/** A commit's figures: what it wrote and when each stretch ended (`performance.now()` values). */
export interface CommitFigures {
  readonly records: number;
  readonly bytes: number;
  readonly startedAt: number;
  readonly exportedAt: number;
  readonly writtenAt: number;
}

/** Records a commit's export and write spans and its volume. */
export function recordCommit(kind: string, figures: CommitFigures): void {
  const { records, bytes, startedAt, exportedAt, writtenAt } = figures;
  const parts = { [ATTR.records]: records, [ATTR.bytes]: bytes };
  timedSpan("gym.checkpoint.export", startedAt, exportedAt, { [ATTR.records]: records });
  timedSpan("gym.checkpoint.write", exportedAt, writtenAt, parts);
  recordVolume("commit", kind, records, bytes);
}

/** A restore's figures: what it read and when each stretch ended (`performance.now()` values). */
export interface RestoreFigures {
  readonly records: number;
  readonly bytes: number;
  readonly startedAt: number;
  readonly readAt: number;
  readonly installedAt: number;
}

/** Records a restore's read and install spans and its volume. */
export function recordRestore(kind: string, figures: RestoreFigures): void {
  const { records, bytes, startedAt, readAt, installedAt } = figures;
  timedSpan("gym.checkpoint.read", startedAt, readAt, {
    [ATTR.records]: records,
    [ATTR.bytes]: bytes,
  });
  timedSpan("gym.checkpoint.install", readAt, installedAt, { [ATTR.records]: records });
  recordVolume("restore", kind, records, bytes);
}
