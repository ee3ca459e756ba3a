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

/**
 * Waits until `phase()` reads `committed` (the participant's state is in a checkpoint: nothing
 * is lost when it stops), `graceMs` passes, or `interrupt` aborts. `phase` is null for a server
 * that takes no part in checkpoints: it waits out the grace (or the interrupt). Polled every
 * `everyMs`: a commit is a rare event and the poll reads one field.
 */
export async function drainBeforeStop(
  phase: (() => string | null) | null,
  graceMs: number,
  interrupt: AbortSignal,
  everyMs = 50,
): Promise<DrainEnd> {
  const end = Date.now() + graceMs;
  for (;;) {
    if (interrupt.aborted) return "interrupted";
    if (phase !== null && phase() === "committed") return "committed";
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
