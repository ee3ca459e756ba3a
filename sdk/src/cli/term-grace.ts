/**
 * The term grace (`gym serve --term-grace`): engines announce a preemption with one SIGTERM to
 * every process of the job at once (Slurm's requeue and time limit, a Kubernetes eviction of
 * pods on one node), the controller included. A server that stopped at once would leave the
 * controller's checkpoint-and-stop nobody to checkpoint. With a term grace, a server process
 * takes SIGTERM as "finish up": a participant keeps serving until a checkpoint commits (the
 * controller's stop checkpoint), anything else until the grace passes; repeats of SIGTERM are
 * ignored, and SIGINT stops it at once.
 *
 * @see docs/multi-host.md
 */

/** How `gym serve` tells a server process its term grace, in ms. */
export const TERM_GRACE_ENV = "GYM_TERM_GRACE_MS";

/** The term grace an environment sets (0: none; stop at SIGTERM as usual). */
export function termGraceOf(env: NodeJS.ProcessEnv): number {
  const value = Number(env[TERM_GRACE_ENV] ?? "0");
  return Number.isFinite(value) && value > 0 ? value : 0;
}

/** Why a draining server stops. */
export type DrainEnd = "committed" | "grace passed" | "interrupted";

/** Where a participant's checkpoint stands: its phase, and the checkpoint it is in (if any). */
export interface CheckpointState {
  readonly phase: string;
  readonly checkpointId: string | null;
}

/** What the term grace reads of a control plane (null: the server is no participant). */
export function checkpointStateOf(
  controlPlane: { readonly phase: string; readonly checkpointId: string | null } | null,
): CheckpointState | null {
  return controlPlane === null
    ? null
    : { phase: controlPlane.phase, checkpointId: controlPlane.checkpointId };
}

/**
 * Waits until `state()` reads `committed` for a checkpoint other than the one committed when
 * the drain began (the participant's state is then in the checkpoint the signal asked for:
 * nothing is lost when it stops), `graceMs` passes, or `interrupt` aborts. A checkpoint already
 * committed at the signal (a periodic one not yet resumed) does not count: the stop checkpoint
 * comes after it. `state` is null for a server that takes no part in checkpoints: it waits out
 * the grace (or the interrupt). Polled every `everyMs`: it reads two fields.
 */
export async function drainBeforeStop(
  state: (() => CheckpointState | null) | null,
  graceMs: number,
  interrupt: AbortSignal,
  everyMs = 50,
): Promise<DrainEnd> {
  const end = Date.now() + graceMs;
  const atSignal = state?.() ?? null;
  const before = atSignal?.phase === "committed" ? atSignal.checkpointId : null;
  for (;;) {
    if (interrupt.aborted) return "interrupted";
    const now = state?.() ?? null;
    if (now?.phase === "committed" && now.checkpointId !== before) return "committed";
    const left = end - Date.now();
    if (left <= 0) return "grace passed";
    await new Promise<void>((resolve) => {
      const timer = setTimeout(done, Math.min(everyMs, left));
      function done(): void {
        clearTimeout(timer);
        interrupt.removeEventListener("abort", done);
        resolve();
      }
      interrupt.addEventListener("abort", done, { once: true });
    });
  }
}
