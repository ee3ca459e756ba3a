/**
 * What the checks share: asserting a reply's status and code, reading the status, and opening
 * a checkpoint that is always resumed afterwards, so each check leaves the server idle.
 */
import { CheckFailed, expectThat, type CheckContext } from "./requirement.js";
import { describeReply, errorCodeOf, type Reply } from "./target.js";

/** Fails unless `reply` is `status` with the envelope's `code` (any code when null). */
export function expectRefusal(
  reply: Reply,
  status: number,
  code: string | null,
  what: string,
): void {
  const envelope = errorCodeOf(reply);
  expectThat(
    reply.status === status && (code === null ? envelope !== null : envelope === code),
    () =>
      `${what}: expected HTTP ${status}${code === null ? " with the error envelope" : ` ${code}`}, got ${describeReply(reply)}`,
  );
}

/** Fails unless `reply` is a 2xx with a JSON object body; returns the body. */
export function expectOk(reply: Reply, what: string): Record<string, unknown> {
  expectThat(
    reply.status >= 200 && reply.status < 300,
    () => `${what}: expected a 2xx, got ${describeReply(reply)}${detailOf(reply)}`,
  );
  expectThat(
    typeof reply.json === "object" && reply.json !== null && !Array.isArray(reply.json),
    `${what}: the reply is not a JSON object`,
  );
  return reply.json as Record<string, unknown>;
}

/** ` (detail)` of an error envelope, cut short, or nothing. */
function detailOf(reply: Reply): string {
  const detail = (reply.json as { error?: { detail?: unknown } } | undefined)?.error?.detail;
  return typeof detail === "string" ? ` (${detail.slice(0, 160)})` : "";
}

/** The status reply, which must answer 200 with an object. */
export async function statusOf(context: CheckContext): Promise<Record<string, unknown>> {
  return expectOk(await context.target.status(), "GET status");
}

/** Fails unless the status reports `phase` (and, when given, `checkpointId`). */
export async function expectPhase(
  context: CheckContext,
  phase: string,
  what: string,
  checkpointId?: string | null,
): Promise<void> {
  const status = await statusOf(context);
  expectThat(
    status.phase === phase,
    `${what}: the status reports phase ${JSON.stringify(status.phase)}, expected '${phase}'`,
  );
  if (checkpointId !== undefined) {
    expectThat(
      status.checkpoint_id === checkpointId,
      `${what}: the status reports checkpoint_id ${JSON.stringify(status.checkpoint_id)}, expected ${JSON.stringify(checkpointId)}`,
    );
  }
}

/** A control body: the ID, a deadline 30 s ahead, and `extra`. */
export function body(
  context: CheckContext,
  checkpointId: string,
  extra: Record<string, unknown> = {},
): Record<string, unknown> {
  return { checkpoint_id: checkpointId, deadline_ts: context.deadline(), ...extra };
}

/**
 * Prepares a fresh checkpoint (which must reach `prepared`), runs `inside` with its ID, and
 * resumes it whatever happens.
 */
export async function withPrepared<T>(
  context: CheckContext,
  inside: (checkpointId: string, prepareReply: Reply) => Promise<T>,
): Promise<T> {
  const id = context.checkpointId();
  try {
    const prepared = await context.target.control("prepare", body(context, id));
    const reply = expectOk(prepared, "prepare");
    if (reply.phase !== "prepared") {
      throw new CheckFailed(
        `prepare of an otherwise idle server answered phase ${JSON.stringify(reply.phase)}, expected 'prepared'`,
      );
    }
    return await inside(id, prepared);
  } finally {
    await resumeQuietly(context, id);
  }
}

/** Resumes `checkpointId`, ignoring the reply: cleanup after a check. */
export async function resumeQuietly(context: CheckContext, checkpointId: string): Promise<void> {
  await context.target.control("resume", body(context, checkpointId)).catch(() => undefined);
}
