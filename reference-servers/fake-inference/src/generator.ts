/**
 * The decoding loop: emits a reply plan's tokens one at a time, yielding to the event loop after
 * each (as a real engine's step would), and stops at a hold part-way through, so a generation cut
 * finds a call with some but not all of its tokens.
 *
 * @module
 */
import { setImmediate as nextTurn } from "node:timers/promises";
import type { CallEntry } from "./call-log.js";
import type { ReplyPlan } from "./chat-template.js";
import type { HoldGate } from "./holds.js";

/** Inputs of {@link generate}. */
export interface GenerateInput {
  readonly plan: ReplyPlan;
  /** Tokens of the plan already generated (a continued cut's prefix). @default 0 */
  readonly from?: number;
  /** The whole output budget, counted from the plan's first token. */
  readonly limit: number;
  /** The release event the call waits for part-way, or null when it is not held. */
  readonly hold: Promise<void> | null;
  readonly holds: HoldGate;
  /** The call's log entry, kept up to date (`held`, `generated_tokens`). */
  readonly entry: CallEntry;
  /** Once it fires, generation stops (the promise rejects with its reason). */
  readonly signal: AbortSignal;
  /** Called with each token's index in the plan, as it is generated. */
  readonly onToken: (index: number) => void;
}

/** How far a generation got. */
export interface Generated {
  /** Tokens of the plan generated in all (a reused prefix included). */
  readonly count: number;
  /** Whether the budget cut the reply short. */
  readonly truncated: boolean;
}

/**
 * Generates `plan.tokens[from..end)`, `end` being the plan's length or the budget, whichever is
 * smaller. A held call blocks after half of its own tokens (rounded up, so a call with any token
 * to generate has generated one when it blocks).
 */
export async function generate(input: GenerateInput): Promise<Generated> {
  const { plan, entry, signal } = input;
  const from = input.from ?? 0;
  const end = Math.max(from, Math.min(plan.tokens.length, input.limit));
  const holdAt = from + Math.ceil((end - from) / 2);
  for (let index = from; index <= end; index += 1) {
    if (index === holdAt && input.hold !== null) {
      entry.held = true;
      try {
        await input.holds.block(input.hold, signal);
      } finally {
        entry.held = false;
      }
    }
    if (index === end) break;
    input.onToken(index);
    entry.generated_tokens += 1;
    await nextTurn();
    signal.throwIfAborted();
  }
  return { count: end, truncated: end < plan.tokens.length };
}
