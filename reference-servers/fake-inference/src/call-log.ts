/**
 * What tests read back: every call, logged the moment it arrives (before any hold), and the
 * model call IDs each generation-cut round cut.
 *
 * @module
 */
import { z } from "zod";

/** One logged call, as `GET /_ctl/calls` lists it. */
export const CallEntrySchema = z
  .strictObject({
    index: z.int().meta({ description: "Global index, 0-based, in arrival order." }),
    rollout: z.string().nullable().meta({
      description:
        "The call's rollout: `ng_capture.rollout_id`, else the `x-ng-rollout` header, else null.",
    }),
    model_call_id: z
      .string()
      .nullable()
      .meta({ description: "`ng_capture.model_call_id`, or null for an uncaptured call." }),
    n_messages: z.int(),
    stream: z.boolean(),
    held: z.boolean().meta({ description: "Whether the call is blocked on a hold right now." }),
    generated_tokens: z.int().meta({
      description:
        "Tokens this call generated itself (a continuation's reused prefix not included).",
    }),
    returned: z.boolean().meta({ description: "Whether its whole reply was sent." }),
    finish_reason: z.string().nullable(),
    continued_from: z.string().nullable().meta({
      description:
        "The model call whose cut prefix this call continues (from its admission), or null.",
    }),
    reused_prefix_tokens: z.int().meta({
      description: "How many generated tokens of that prefix it reused (0 when it regenerated).",
    }),
    capture: z.enum(["staged", "capture_failed"]).nullable().meta({
      description:
        "The capture outcome: `staged`, `capture_failed`, or null for an uncaptured call.",
    }),
    capture_error: z.string().nullable().meta({ description: "Why capture failed, when it did." }),
  })
  .meta({ id: "FakeInferenceCall" });
/** One logged call; the log updates it as the call goes on. */
export type CallEntry = z.infer<typeof CallEntrySchema>;

/** The fields of a call known on arrival. */
export type Arrival = Pick<
  CallEntry,
  "rollout" | "model_call_id" | "n_messages" | "stream" | "continued_from"
>;

/** The call log and the cut rounds. */
export class CallLog {
  readonly #calls: CallEntry[] = [];
  readonly #perRollout = new Map<string | null, number>();
  readonly #cutRounds: string[][] = [];

  /** Logs an arriving call; answers its entry (updated as the call goes on) and its position. */
  arrive(arrival: Arrival): { entry: CallEntry; index: number; ordinal: number } {
    const index = this.#calls.length;
    const ordinal = this.#perRollout.get(arrival.rollout) ?? 0;
    this.#perRollout.set(arrival.rollout, ordinal + 1);
    const entry: CallEntry = {
      index,
      ...arrival,
      held: false,
      generated_tokens: 0,
      returned: false,
      finish_reason: null,
      reused_prefix_tokens: 0,
      capture: null,
      capture_error: null,
    };
    this.#calls.push(entry);
    return { entry, index, ordinal };
  }

  /** How many calls arrived. */
  get count(): number {
    return this.#calls.length;
  }

  /** A copy of every entry, in arrival order. */
  calls(): CallEntry[] {
    return this.#calls.map((entry) => ({ ...entry }));
  }

  /** Records one cut round: the model call IDs it staged a durable prefix for. */
  recordCutRound(modelCallIds: readonly string[]): void {
    this.#cutRounds.push([...modelCallIds]);
  }

  /** One list of cut model call IDs per cut round, oldest first. */
  cutRounds(): string[][] {
    return this.#cutRounds.map((round) => [...round]);
  }
}
