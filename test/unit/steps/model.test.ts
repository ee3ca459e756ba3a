/**
 * Law: over random sequences of begin, boundary, wait/replay steps (succeeding or failing),
 * checkpoint close/open, restart marks, cut-short retires and ends, the runner agrees with a small
 * reference model of the episode-step rules (docs/episode-steps.md) on blockerCount, blockers,
 * exported, restarts and each episode's state.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { EpisodeRetiredError } from "#sdk/steps/episode-errors.js";
import { EpisodeSteps, type EpisodeState, type StepMode } from "#sdk/steps/episode-steps.js";
import type { JsonValue } from "#sdk/json/json-value.js";
import {
  StepFailure,
  manualStep,
  settleMicrotasks,
  track,
  type ManualStep,
  type Tracked,
} from "./helpers.js";

// ---------------------------------------------------------------------------------------------
// Reference model
// ---------------------------------------------------------------------------------------------

interface ModelEpisode {
  state: EpisodeState;
  boundary: JsonValue | null;
  restart: boolean;
  retired: boolean;
  /** The mode of the step in flight, if any. */
  stepping: StepMode | null;
}

interface Model {
  closed: boolean;
  readonly episodes: Map<string, ModelEpisode>;
}

function blocks(e: ModelEpisode): boolean {
  return e.retired || (!e.restart && (e.state === "running" || e.state === "wait_step"));
}

function exportable(e: ModelEpisode): boolean {
  return (e.state === "parked" || e.state === "replay_step") && !e.retired && !e.restart;
}

function sortedKeys(m: Model, keep: (e: ModelEpisode) => boolean): string[] {
  return [...m.episodes]
    .filter(([, e]) => keep(e))
    .map(([key]) => key)
    .sort();
}

/** Held: a replay step ended inside the checkpoint; the episode is between steps. */
function held(e: ModelEpisode): boolean {
  return e.state === "replay_step" && e.stepping === null;
}

/** Episodes a command may act on, each with its eligibility rule. */
const ELIGIBLE = {
  any: () => true,
  boundary: (e: ModelEpisode) => !e.retired && (e.state === "running" || held(e)),
  startStep: (e: ModelEpisode) => !e.retired && e.state === "running",
  endStep: (e: ModelEpisode) => e.stepping !== null,
  end: (e: ModelEpisode) => e.stepping === null && e.state !== "parked",
} satisfies Record<string, (e: ModelEpisode) => boolean>;

/** The `pick`-th (modulo) eligible key, in key order, or undefined when none is eligible. */
function choose(m: Readonly<Model>, pick: number, eligible: (e: ModelEpisode) => boolean) {
  const keys = sortedKeys(m as Model, eligible);
  return keys.length === 0 ? undefined : (keys[pick % keys.length] as string);
}

// ---------------------------------------------------------------------------------------------
// The real system under test
// ---------------------------------------------------------------------------------------------

/** A step in flight: its body, finished by the test, and the promise `step` returned. */
interface RunningStep {
  readonly step: ManualStep<string>;
  readonly result: Tracked<string>;
}

interface Real {
  readonly steps: EpisodeSteps;
  readonly running: Map<string, RunningStep>;
  /**
   * Parks in progress: a boundary's promise, or (`failed`) the promise of a replay step that
   * failed inside a checkpoint. Dropped once the model says the episode left `parked`.
   */
  readonly parked: Map<string, { readonly park: Tracked<unknown>; readonly failed: boolean }>;
}

async function check(m: Model, r: Real): Promise<void> {
  await settleMicrotasks();
  const blockers = sortedKeys(m, blocks);
  expect(r.steps.blockerCount()).toBe(blockers.length);
  expect(r.steps.ready()).toBe(blockers.length === 0);
  expect(r.steps.blockers()).toEqual(blockers);
  expect(r.steps.blockers(2)).toEqual(blockers.slice(0, 2));
  expect([...r.steps.exported()]).toEqual(
    sortedKeys(m, exportable).map((key) => [key, m.episodes.get(key)?.boundary]),
  );
  expect(r.steps.restarts()).toEqual(sortedKeys(m, (e) => e.restart && !e.retired));
  expect(r.steps.size).toBe(m.episodes.size);
  for (const [key, e] of m.episodes) {
    expect(r.steps.stateOf(key), key).toBe(e.state);
    const parked = r.parked.get(key);
    if (parked !== undefined && e.state === "parked") {
      expect(parked.park.status(), `park of ${key}`).toBe("pending");
    } else if (parked !== undefined) {
      // Resumed: a boundary continues; a failed replay step now fails.
      if (parked.failed) expect(parked.park.error()).toBeInstanceOf(StepFailure);
      else expect(parked.park.status(), `park of ${key}`).toBe("fulfilled");
      r.parked.delete(key);
    }
  }
}

type Cmd = fc.AsyncCommand<Model, Real>;

/** A command on one episode, chosen when it runs among the eligible ones. */
abstract class OnEpisode implements Cmd {
  /** The key it acted on, for the counterexample. */
  protected key = "?";
  constructor(
    readonly pick: number,
    readonly eligible: (e: ModelEpisode) => boolean,
  ) {}
  check(m: Readonly<Model>): boolean {
    return choose(m, this.pick, this.eligible) !== undefined;
  }
  async run(m: Model, r: Real): Promise<void> {
    this.key = choose(m, this.pick, this.eligible) as string;
    await this.act(this.key, m.episodes.get(this.key) as ModelEpisode, m, r);
    await check(m, r);
  }
  abstract act(key: string, e: ModelEpisode, m: Model, r: Real): Promise<void> | void;
  abstract toString(): string;
}

class Begin implements Cmd {
  constructor(
    readonly key: string,
    readonly restart: boolean,
    readonly continuation: number | null,
  ) {}
  check(m: Readonly<Model>): boolean {
    return !m.episodes.has(this.key);
  }
  async run(m: Model, r: Real): Promise<void> {
    const continuation = this.continuation === null ? null : { restored: this.continuation };
    r.steps.begin(this.key, { restart: this.restart, continuation });
    m.episodes.set(this.key, {
      state: "running",
      boundary: continuation,
      restart: this.restart,
      retired: false,
      stepping: null,
    });
    await check(m, r);
  }
  toString(): string {
    return `begin(${this.key}, restart=${this.restart}, continuation=${this.continuation})`;
  }
}

class DuplicateBegin extends OnEpisode {
  constructor(pick: number) {
    super(pick, ELIGIBLE.any);
  }
  act(key: string, _e: ModelEpisode, _m: Model, r: Real): void {
    expect(() => r.steps.begin(key)).toThrow("already running");
  }
  toString(): string {
    return `duplicateBegin(${this.key})`;
  }
}

class Boundary extends OnEpisode {
  constructor(
    pick: number,
    readonly value: number,
  ) {
    super(pick, ELIGIBLE.boundary);
  }
  act(key: string, e: ModelEpisode, m: Model, r: Real): void {
    r.parked.set(key, { park: track(r.steps.boundary(key, { at: this.value })), failed: false });
    if (e.restart) {
      e.state = "running";
    } else {
      e.boundary = { at: this.value };
      e.state = m.closed ? "parked" : "running";
    }
  }
  toString(): string {
    return `boundary(${this.key}, ${this.value})`;
  }
}

class StartStep extends OnEpisode {
  constructor(
    pick: number,
    readonly mode: StepMode,
  ) {
    super(pick, ELIGIBLE.startStep);
  }
  act(key: string, e: ModelEpisode, _m: Model, r: Real): void {
    const step = manualStep<string>();
    r.running.set(key, { step, result: track(r.steps.step(key, this.mode, step.fn)) });
    e.stepping = this.mode;
    e.state = this.mode === "wait" ? "wait_step" : "replay_step";
  }
  toString(): string {
    return `step(${this.key}, ${this.mode})`;
  }
}

class EndStep extends OnEpisode {
  constructor(
    pick: number,
    readonly ok: boolean,
  ) {
    super(pick, ELIGIBLE.endStep);
  }
  async act(key: string, e: ModelEpisode, m: Model, r: Real): Promise<void> {
    const { step, result } = r.running.get(key) as RunningStep;
    r.running.delete(key);
    const captured = e.stepping === "replay" && m.closed && !e.restart && !e.retired;
    e.stepping = null;
    if (this.ok) step.succeed("done");
    else step.fail(new StepFailure("step failed"));
    if (captured && this.ok) {
      e.state = "replay_step";
    } else if (captured) {
      // The failure clears the boundary and parks; it surfaces when the park ends.
      e.boundary = null;
      e.state = "parked";
      r.parked.set(key, { park: result, failed: true });
    } else {
      e.state = "running";
    }
    await settleMicrotasks();
    if (!captured || this.ok) expect(result.status()).toBe(this.ok ? "fulfilled" : "rejected");
  }
  toString(): string {
    return `endStep(${this.key}, ${this.ok ? "ok" : "fail"})`;
  }
}

class Close implements Cmd {
  check(m: Readonly<Model>): boolean {
    return !m.closed;
  }
  async run(m: Model, r: Real): Promise<void> {
    r.steps.closeAdmission();
    m.closed = true;
    await check(m, r);
  }
  toString(): string {
    return "closeAdmission()";
  }
}

class Open implements Cmd {
  check(m: Readonly<Model>): boolean {
    return m.closed;
  }
  async run(m: Model, r: Real): Promise<void> {
    r.steps.openAdmission();
    m.closed = false;
    for (const e of m.episodes.values()) {
      if (e.state === "parked" || held(e)) e.state = "running";
    }
    await check(m, r);
  }
  toString(): string {
    return "openAdmission()";
  }
}

class MarkRestart extends OnEpisode {
  constructor(pick: number) {
    super(pick, ELIGIBLE.any);
  }
  override check(m: Readonly<Model>): boolean {
    return !m.closed && super.check(m);
  }
  async act(key: string, e: ModelEpisode, _m: Model, r: Real): Promise<void> {
    await r.steps.markRestart(key);
    e.restart = true;
  }
  toString(): string {
    return `markRestart(${this.key})`;
  }
}

class RetireCutShort extends OnEpisode {
  constructor(pick: number) {
    super(pick, ELIGIBLE.any);
  }
  async act(key: string, e: ModelEpisode, _m: Model, r: Real): Promise<void> {
    await expect(r.steps.retire(key, AbortSignal.abort(new Error("cut short")))).rejects.toThrow(
      "cut short",
    );
    e.retired = true;
    if (e.state === "parked") {
      // Woken: its boundary (or failed step) rejects and it runs its way out.
      e.state = "running";
      const parked = r.parked.get(key);
      r.parked.delete(key);
      await settleMicrotasks();
      expect(parked?.park.error()).toBeInstanceOf(EpisodeRetiredError);
    }
  }
  toString(): string {
    return `retire(${this.key}, cut short)`;
  }
}

class End extends OnEpisode {
  constructor(pick: number) {
    super(pick, ELIGIBLE.end);
  }
  act(key: string, _e: ModelEpisode, m: Model, r: Real): void {
    r.steps.end(key);
    m.episodes.delete(key);
    r.parked.delete(key);
  }
  toString(): string {
    return `end(${this.key})`;
  }
}

const keyArb = fc.constantFrom("a", "b", "c", "d-a1");
const pickArb = fc.nat(7);

/** Every command, weighted so that steps, boundaries and checkpoints dominate the sequences. */
const command = fc.oneof(
  {
    weight: 3,
    arbitrary: fc
      .tuple(keyArb, fc.boolean(), fc.option(fc.nat(9), { freq: 3 }))
      .map(([key, restart, cont]): Cmd => new Begin(key, restart && cont === null, cont)),
  },
  { weight: 1, arbitrary: pickArb.map((pick): Cmd => new DuplicateBegin(pick)) },
  {
    weight: 4,
    arbitrary: fc.tuple(pickArb, fc.nat(99)).map(([p, value]): Cmd => new Boundary(p, value)),
  },
  {
    weight: 4,
    arbitrary: fc
      .tuple(pickArb, fc.constantFrom<StepMode>("wait", "replay"))
      .map(([pick, mode]): Cmd => new StartStep(pick, mode)),
  },
  {
    weight: 4,
    arbitrary: fc.tuple(pickArb, fc.boolean()).map(([pick, ok]): Cmd => new EndStep(pick, ok)),
  },
  { weight: 2, arbitrary: fc.constant<Cmd>(new Close()) },
  { weight: 2, arbitrary: fc.constant<Cmd>(new Open()) },
  { weight: 1, arbitrary: pickArb.map((pick): Cmd => new MarkRestart(pick)) },
  { weight: 1, arbitrary: pickArb.map((pick): Cmd => new RetireCutShort(pick)) },
  { weight: 2, arbitrary: pickArb.map((pick): Cmd => new End(pick)) },
);

describe("episode steps model", () => {
  it("agrees with the reference model on blockers, exports, restarts and states", async () => {
    await fc.assert(
      fc.asyncProperty(fc.commands([command], { maxCommands: 100, size: "max" }), async (cmds) => {
        const real: Real = { steps: new EpisodeSteps(), running: new Map(), parked: new Map() };
        const model: Model = { closed: false, episodes: new Map() };
        await fc.asyncModelRun(() => ({ model, real }), cmds);
      }),
      { numRuns: 80 },
    );
  });
});
