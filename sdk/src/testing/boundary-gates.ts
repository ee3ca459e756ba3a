import type { ActivationContext, RespondInput } from "../server/agent/agent-hooks.js";
import type { RunEpisodeInput } from "../server/environment-server.js";
import type { EpisodeHandle } from "../participants/environment/environment-participant.js";
import { deferred, type Deferred } from "../util/deferred.js";

/**
 * An execution held right after it recorded a boundary, until the kit has checkpointed it
 * there: released to go on in this instance, or abandoned with its instance.
 */
export interface HeldBoundary {
  /** The capture key of the held execution (an episode, or a session's activation). */
  readonly captureKey: string;
  /** Lets the execution go on from the boundary, in this instance. */
  release(): void;
}

/**
 * The boundaries of one server instance under `checkpointEvery: "boundary"`: each boundary an
 * episode or an activation records is held here, inside the replay step (environment) or model
 * call (agent) that follows it, so the server counts it as parked at that very boundary while
 * the kit prepares, commits and restores.
 */
export class BoundaryGates {
  /** Held boundaries nobody has taken yet, by capture key, oldest first. */
  readonly #held = new Map<string, HeldBoundary[]>();
  /** The kit waiting for the next held boundary of a key. */
  readonly #waiters = new Map<string, Deferred<HeldBoundary>>();
  #abandoned = false;

  /** Whether the instance was given up (crashed): its final cleanup must not run. */
  get abandoned(): boolean {
    return this.#abandoned;
  }

  /** Gives the instance up: from now on the cleanup of its executions does nothing. */
  abandon(): void {
    this.#abandoned = true;
  }

  /** The next boundary `captureKey` is held at (one held before the call counts). */
  next(captureKey: string): Promise<HeldBoundary> {
    const queue = this.#held.get(captureKey);
    const first = queue?.shift();
    if (queue?.length === 0) this.#held.delete(captureKey);
    if (first !== undefined) return Promise.resolve(first);
    const waiter = deferred<HeldBoundary>();
    this.#waiters.set(captureKey, waiter);
    return waiter.promise;
  }

  /** Stops waiting for `captureKey` (its call ended). */
  stopWaiting(captureKey: string): void {
    this.#waiters.delete(captureKey);
  }

  /**
   * Server side: holds the execution until the kit releases it, or until `signal` fires (the
   * instance was abandoned, or the execution was retired or cancelled).
   */
  hold(captureKey: string, signal: AbortSignal): Promise<void> {
    const released = deferred<void>();
    const onAbort = (): void => released.reject(signal.reason);
    if (signal.aborted) onAbort();
    else signal.addEventListener("abort", onAbort, { once: true });
    const held: HeldBoundary = {
      captureKey,
      release: () => {
        signal.removeEventListener("abort", onAbort);
        released.resolve();
      },
    };
    const waiter = this.#waiters.get(captureKey);
    if (waiter !== undefined) {
      this.#waiters.delete(captureKey);
      waiter.resolve(held);
    } else {
      const queue = this.#held.get(captureKey) ?? [];
      queue.push(held);
      this.#held.set(captureKey, queue);
    }
    return released.promise;
  }

  /** An environment episode's input whose every boundary is held (and whose cleanup obeys abandon). */
  environmentInput(input: RunEpisodeInput): RunEpisodeInput {
    const steps = input.steps;
    const held: EpisodeHandle = {
      episode: steps.episode,
      captureKey: steps.captureKey,
      signal: steps.signal,
      continuation: () => steps.continuation(),
      boundary: async (state) => {
        await steps.boundary(state);
        // A replay step counts as parked at the boundary before it: exactly where a
        // checkpoint taken now would find the episode.
        await steps.step("replay", (signal) => this.hold(steps.captureKey, signal));
      },
      step: (mode, fn) => steps.step(mode, fn),
      markRestart: (signal) => steps.markRestart(signal),
      markRestartFrom: (headers, signal) => steps.markRestartFrom(headers, signal),
    };
    return {
      ...input,
      steps: held,
      // A crashed process runs no final cleanup; an abandoned instance must not either, or it
      // would close what the replacement attempt goes on using.
      onCleanup: (callback) => input.onCleanup(() => (this.#abandoned ? undefined : callback())),
    };
  }

  /** An agent activation's input whose every boundary is held (native sessions only). */
  agentInput<State>(input: RespondInput<State>): RespondInput<State> {
    const activation = input.activation;
    const rollout = input.rollout;
    // Session-less calls and the legacy /run's own turn loop have nothing the kit re-sends.
    if (!activation.tracked || rollout === null || input.session?.request == null) return input;
    const held: ActivationContext = {
      tracked: activation.tracked,
      continuation: activation.continuation,
      signal: activation.signal,
      boundary: async (snapshot) => {
        await activation.boundary(snapshot);
        // A model call right after a boundary counts as parked there.
        await activation.modelCall((signal) => this.hold(rollout.captureKey, signal));
      },
      modelCall: (call) => activation.modelCall(call),
    };
    return { ...input, activation: held };
  }
}

type AnyClass = abstract new (...args: never[]) => object;

/**
 * A subclass of `Base` whose episodes (an environment server's `runEpisode`) or activations (an
 * agent's `respond`) hold at every boundary in `gates`. Other servers are returned as they are.
 * The subclass keeps the base's name, so messages naming the class stay the author's.
 */
export function holdingAtBoundaries<C extends AnyClass>(Base: C, gates: BoundaryGates): C {
  const proto = Base.prototype as Record<string, unknown>;
  const Open = Base as unknown as new (...args: unknown[]) => Record<string, unknown>;
  let Holding: unknown = Base;
  if (typeof proto.runEpisode === "function") {
    Holding = class extends Open {
      runEpisode(input: RunEpisodeInput): unknown {
        return (proto.runEpisode as (i: RunEpisodeInput) => unknown).call(
          this,
          gates.environmentInput(input),
        );
      }
    };
  } else if (typeof proto.respond === "function") {
    Holding = class extends Open {
      respond(input: RespondInput<unknown>): unknown {
        return (proto.respond as (i: RespondInput<unknown>) => unknown).call(
          this,
          gates.agentInput(input),
        );
      }
    };
  }
  if (Holding !== Base) Object.defineProperty(Holding, "name", { value: Base.name });
  return Holding as C;
}
