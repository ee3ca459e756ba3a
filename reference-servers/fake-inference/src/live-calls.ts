/**
 * The captured calls this backend is generating right now, by model call ID: what a generation
 * cut can snapshot. A call leaves when its reply is sent (or it fails).
 *
 * @module
 */
import type { ActiveCall } from "./sdk-capture.js";

/** One captured call in flight, with the tokens it generated so far. */
export interface LiveCall {
  readonly call: ActiveCall;
  /** The engine prompt: the request's tokens, plus a continued cut's reused generated tokens. */
  readonly enginePrompt: readonly number[];
  /** The tokens this call generated itself, appended as they are generated. */
  readonly generated: number[];
  /** One log probability per generated token. */
  readonly logprobs: number[];
  /** The call's whole output budget (a continuation keeps its source call's). */
  readonly effectiveOutputLimit: number;
  /** Set once generation has ended and the reply is being staged and sent. */
  finishReason: "stop" | "length" | null;
}

/** The captured calls in flight. */
export class LiveCalls {
  readonly #byId = new Map<string, LiveCall>();

  /** Registers a call; answers the function that removes it again. */
  add(live: LiveCall): () => void {
    const id = live.call.modelCallId;
    this.#byId.set(id, live);
    return () => {
      // A newer call with the same ID (a client retry) stays registered.
      if (this.#byId.get(id) === live) this.#byId.delete(id);
    };
  }

  /** The call in flight with this model call ID, if any. */
  get(modelCallId: string): LiveCall | undefined {
    return this.#byId.get(modelCallId);
  }
}
