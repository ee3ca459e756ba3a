/**
 * Episode steps (see docs/episode-steps.md): blocking, boundaries, wait and replay steps, restarts,
 * retire, exports and notifications. Episodes are driven by hand through deferreds; nothing sleeps.
 */
import { describe, expect, it, vi } from "vitest";
import { EpisodeError } from "#sdk/errors.js";
import { EpisodeAlreadyRunningError, EpisodeRetiredError } from "#sdk/steps/episode-errors.js";
import { EpisodeSteps } from "#sdk/steps/episode-steps.js";
import { deferred } from "#sdk/util/deferred.js";
import type { JsonValue } from "#sdk/json/json-value.js";
import { StepFailure, aborted, manualStep, settleMicrotasks, track } from "./helpers.js";

/** A signal that has already fired: a retire cut short at once. */
function cutShort(): AbortSignal {
  return AbortSignal.abort(new Error("retire deadline"));
}

/** A signal that never fires. */
const NEVER = new AbortController().signal;

describe("blocking", () => {
  it("an episode between steps blocks", () => {
    const steps = new EpisodeSteps();
    steps.begin("a");
    expect(steps.blockerCount()).toBe(1);
    expect(steps.blockers()).toEqual(["a"]);
    expect(steps.ready()).toBe(false);
  });

  it("an episode inside a wait step blocks", async () => {
    const steps = new EpisodeSteps();
    steps.begin("a");
    await steps.boundary("a", { next: 1 });
    steps.closeAdmission();
    const step = manualStep();
    const done = track(steps.step("a", "wait", step.fn));
    expect(steps.stateOf("a")).toBe("wait_step");
    expect(steps.blockers()).toEqual(["a"]);
    step.succeed("x");
    await done.promise;
  });

  it("an episode inside a replay step does not block", async () => {
    const steps = new EpisodeSteps();
    steps.begin("a");
    await steps.boundary("a", { next: 1 });
    steps.closeAdmission();
    const step = manualStep();
    const done = track(steps.step("a", "replay", step.fn));
    expect(steps.stateOf("a")).toBe("replay_step");
    expect(steps.blockerCount()).toBe(0);
    expect(steps.ready()).toBe(true);
    step.succeed("x");
    steps.openAdmission();
    await done.promise;
  });

  it("an episode parked at a boundary does not block", async () => {
    const steps = new EpisodeSteps();
    steps.begin("a");
    steps.closeAdmission();
    const parked = track(steps.boundary("a", { next: 1 }));
    expect(steps.stateOf("a")).toBe("parked");
    expect(steps.blockerCount()).toBe(0);
    steps.openAdmission();
    await parked.promise;
  });

  it("a restart never blocks, running or inside a wait step", async () => {
    const steps = new EpisodeSteps();
    steps.begin("a", { restart: true });
    expect(steps.blockerCount()).toBe(0);
    steps.closeAdmission();
    const step = manualStep();
    const done = track(steps.step("a", "wait", step.fn));
    expect(steps.stateOf("a")).toBe("wait_step");
    expect(steps.blockerCount()).toBe(0);
    expect(steps.restarts()).toEqual(["a"]);
    step.succeed("x");
    await done.promise;
    expect(steps.blockerCount()).toBe(0);
  });

  it("an episode being retired blocks whatever its state, restarts included", async () => {
    const steps = new EpisodeSteps();
    steps.begin("parked");
    steps.begin("replaying");
    steps.begin("restart", { restart: true });
    steps.closeAdmission();
    const parked = track(steps.boundary("parked", { next: 1 }));
    const step = manualStep();
    const replaying = track(steps.step("replaying", "replay", step.fn));
    expect(steps.blockerCount()).toBe(0);

    await Promise.all(
      ["parked", "replaying", "restart"].map((key) =>
        expect(steps.retire(key, cutShort())).rejects.toThrow("retire deadline"),
      ),
    );
    expect(steps.blockers()).toEqual(["parked", "replaying", "restart"]);
    expect(steps.restarts()).toEqual([]);
    step.fail(new StepFailure("stopped"));
    await settleMicrotasks();
    expect(parked.error()).toBeInstanceOf(EpisodeRetiredError);
    expect(replaying.status()).toBe("rejected");
  });
});

describe("begin", () => {
  it("a duplicate begin is refused as already running and leaves the live episode alone", async () => {
    const steps = new EpisodeSteps();
    const signal = steps.begin("a", { continuation: { next: 2 } });
    const step = manualStep();
    const done = track(steps.step("a", "replay", step.fn));

    let refusal: unknown;
    try {
      steps.begin("a");
    } catch (error) {
      refusal = error;
    }
    expect(refusal).toBeInstanceOf(EpisodeAlreadyRunningError);
    expect(refusal).toBeInstanceOf(EpisodeError);
    expect((refusal as EpisodeError).code).toBe("checkpoint_error");
    expect((refusal as EpisodeError).status).toBe(409);
    expect((refusal as EpisodeError).captureKey).toBe("a");
    expect((refusal as Error).message).toContain("already running");
    expect(() => steps.begin("a", { run: async () => "second" })).toThrow(
      EpisodeAlreadyRunningError,
    );

    expect(steps.stateOf("a")).toBe("replay_step");
    expect(signal.aborted).toBe(false);
    expect(steps.exported()).toEqual(new Map([["a", { next: 2 }]]));
    step.succeed("x");
    await done.promise;
  });

  it("begin with run ends the episode when its task settles, with the task's outcome", async () => {
    const steps = new EpisodeSteps();
    const gate = deferred<string>();
    const seen: AbortSignal[] = [];
    const result = track(
      steps.begin("a", {
        run: async (signal) => {
          seen.push(signal);
          await steps.boundary("a", { next: 1 });
          return await steps.step("a", "wait", () => gate.promise);
        },
      }),
    );
    expect(steps.has("a")).toBe(true);
    expect(seen[0]).toBe(steps.signal("a"));
    gate.resolve("done");
    await expect(result.promise).resolves.toBe("done");
    expect(steps.has("a")).toBe(false);

    const failure = new StepFailure("boom");
    await expect(
      steps.begin("b", {
        run: async () => {
          throw failure;
        },
      }),
    ).rejects.toBe(failure);
    expect(steps.size).toBe(0);
  });

  it("the begin signal aborts the episode with its reason", async () => {
    const steps = new EpisodeSteps();
    const client = new AbortController();
    const signal = steps.begin("a", { signal: client.signal });
    const other = steps.begin("b");
    const reason = new Error("client closed");
    client.abort(reason);
    expect(signal.reason).toBe(reason);
    expect(other.aborted).toBe(false);
    await expect(steps.boundary("a", { next: 1 })).rejects.toBe(reason);
  });
});

describe("continuation", () => {
  it("the restored boundary is handed out once and exported until a boundary replaces it", async () => {
    const steps = new EpisodeSteps();
    steps.begin("r-a1", { continuation: { next: "verify" } });
    steps.begin("fresh");
    expect(steps.continuation("r-a1")).toEqual({ next: "verify" });
    expect(steps.continuation("r-a1")).toBeNull();
    expect(steps.continuation("fresh")).toBeNull();
    expect(steps.continuation("unknown")).toBeNull();

    steps.closeAdmission();
    const step = manualStep();
    const done = track(steps.step("r-a1", "replay", step.fn));
    expect(steps.exported()).toEqual(new Map([["r-a1", { next: "verify" }]]));
    step.succeed("x");
    steps.openAdmission();
    await done.promise;
  });
});

describe("boundary", () => {
  it("outside a checkpoint a boundary continues at once and is recorded", async () => {
    const steps = new EpisodeSteps();
    steps.begin("a");
    const recorded = track(steps.boundary("a", { next: 1 }));
    await settleMicrotasks();
    expect(recorded.status()).toBe("fulfilled");
    expect(steps.stateOf("a")).toBe("running");

    const step = manualStep();
    const done = track(steps.step("a", "replay", step.fn));
    steps.closeAdmission();
    expect(steps.exported()).toEqual(new Map([["a", { next: 1 }]]));
    step.succeed("x");
    steps.openAdmission();
    await done.promise;
  });

  it("inside a checkpoint a boundary parks until admission opens", async () => {
    const steps = new EpisodeSteps();
    steps.begin("a");
    steps.closeAdmission();
    const parked = track(steps.boundary("a", { next: 1 }));
    await settleMicrotasks();
    expect(parked.status()).toBe("pending");
    expect(steps.exported()).toEqual(new Map([["a", { next: 1 }]]));

    steps.openAdmission();
    await parked.promise;
    expect(steps.stateOf("a")).toBe("running");
    expect(steps.blockers()).toEqual(["a"]);
  });

  it("a checkpoint closed again before the parked episode woke keeps it parked", async () => {
    const steps = new EpisodeSteps();
    steps.begin("a");
    steps.closeAdmission();
    const parked = track(steps.boundary("a", { next: 1 }));
    steps.openAdmission();
    steps.closeAdmission();
    await settleMicrotasks();
    expect(parked.status()).toBe("pending");
    expect(steps.stateOf("a")).toBe("parked");
    expect(steps.ready()).toBe(true);

    steps.openAdmission();
    await parked.promise;
    expect(steps.stateOf("a")).toBe("running");
  });

  it("retiring a parked episode rejects its boundary with EpisodeRetiredError", async () => {
    const steps = new EpisodeSteps();
    const signal = steps.begin("a");
    steps.closeAdmission();
    const parked = track(steps.boundary("a", { next: 1 }));
    const retire = track(steps.retire("a", NEVER));
    await settleMicrotasks();
    expect(parked.status()).toBe("rejected");
    expect(parked.error()).toBeInstanceOf(EpisodeRetiredError);
    expect(parked.error()).toBe(signal.reason);
    expect(retire.status()).toBe("pending");
    steps.end("a");
    await retire.promise;
  });

  it("a restart does not park at a boundary inside a checkpoint", async () => {
    const steps = new EpisodeSteps();
    steps.begin("a", { restart: true });
    steps.closeAdmission();
    await steps.boundary("a", { next: 1 });
    expect(steps.stateOf("a")).toBe("running");
    expect(steps.exported().size).toBe(0);
  });

  it("a boundary function is called once, and only when its state is kept", async () => {
    const steps = new EpisodeSteps();
    steps.begin("kept");
    steps.begin("restart", { restart: true });
    const build = vi.fn((): JsonValue => ({ next: "verify" }));
    await steps.boundary("kept", build);
    expect(build).toHaveBeenCalledTimes(1);
    await steps.boundary("restart", build);
    expect(build).toHaveBeenCalledTimes(1);

    steps.closeAdmission();
    const step = manualStep();
    const done = track(steps.step("kept", "replay", step.fn));
    expect(steps.exported()).toEqual(new Map([["kept", { next: "verify" }]]));
    expect(build).toHaveBeenCalledTimes(1);
    step.succeed("x");
    steps.openAdmission();
    await done.promise;
  });

  it("a parked episode is released with its signal's reason when the begin signal aborts", async () => {
    const steps = new EpisodeSteps();
    const client = new AbortController();
    steps.begin("a", { signal: client.signal });
    steps.closeAdmission();
    const parked = track(steps.boundary("a", { next: 1 }));
    const reason = new Error("shutdown");
    client.abort(reason);
    await settleMicrotasks();
    expect(parked.error()).toBe(reason);
    expect(steps.blockers()).toEqual(["a"]);
  });
});

describe("steps", () => {
  it("a wait step holds up the checkpoint, then the episode parks at the boundary after it", async () => {
    const steps = new EpisodeSteps();
    steps.begin("a");
    await steps.boundary("a", { next: "close" });
    const step = manualStep();
    const done = track(steps.step("a", "wait", step.fn));
    steps.closeAdmission();
    expect(steps.ready()).toBe(false);
    expect(steps.exported().size).toBe(0);

    step.succeed("closed");
    await expect(done.promise).resolves.toBe("closed");
    expect(steps.stateOf("a")).toBe("running");
    expect(steps.ready()).toBe(false);
    const parked = track(steps.boundary("a", { next: "verify" }));
    expect(steps.ready()).toBe(true);
    expect(steps.exported()).toEqual(new Map([["a", { next: "verify" }]]));
    steps.openAdmission();
    await parked.promise;
  });

  it("a replay step that ends outside a checkpoint leaves the episode running", async () => {
    const steps = new EpisodeSteps();
    steps.begin("a");
    await expect(steps.step("a", "replay", () => 7)).resolves.toBe(7);
    expect(steps.stateOf("a")).toBe("running");
    expect(steps.blockers()).toEqual(["a"]);
  });

  it("a replay step that ends inside a checkpoint stays at the boundary before it until the next boundary parks it", async () => {
    const steps = new EpisodeSteps();
    steps.begin("a");
    await steps.boundary("a", { next: "invoke" });
    const step = manualStep<string>();
    const done = track(steps.step("a", "replay", step.fn));
    steps.closeAdmission();
    step.succeed("reply");
    await expect(done.promise).resolves.toBe("reply");

    expect(steps.stateOf("a")).toBe("replay_step");
    expect(steps.ready()).toBe(true);
    expect(steps.exported()).toEqual(new Map([["a", { next: "invoke" }]]));

    const parked = track(steps.boundary("a", { next: "close", response: "reply" }));
    expect(steps.stateOf("a")).toBe("parked");
    expect(steps.ready()).toBe(true);
    expect(steps.exported()).toEqual(new Map([["a", { next: "close", response: "reply" }]]));
    steps.openAdmission();
    await parked.promise;
  });

  it("an episode held after a replay step runs again once admission opens", async () => {
    const steps = new EpisodeSteps();
    steps.begin("a");
    steps.closeAdmission();
    await steps.step("a", "replay", () => "x");
    expect(steps.stateOf("a")).toBe("replay_step");
    steps.openAdmission();
    expect(steps.stateOf("a")).toBe("running");
    steps.closeAdmission();
    expect(steps.blockers()).toEqual(["a"]);
    expect(steps.exported().size).toBe(0);
  });

  it("a step started while held after a replay step waits for resume, so readiness never regresses", async () => {
    const steps = new EpisodeSteps();
    steps.begin("a");
    await steps.boundary("a", { next: 1 });
    steps.closeAdmission();
    await steps.step("a", "replay", () => "x");
    const body = vi.fn(() => "y");
    const next = track(steps.step("a", "wait", body));
    await settleMicrotasks();
    expect(body).not.toHaveBeenCalled();
    expect(steps.ready()).toBe(true);
    expect(steps.exported()).toEqual(new Map([["a", { next: 1 }]]));

    steps.openAdmission();
    await expect(next.promise).resolves.toBe("y");
    expect(body).toHaveBeenCalledTimes(1);
  });

  it("a replay step that fails inside a checkpoint clears the boundary, parks without blocking, and fails after resume", async () => {
    const steps = new EpisodeSteps();
    steps.begin("a");
    await steps.boundary("a", { next: "invoke" });
    const step = manualStep();
    const done = track(steps.step("a", "replay", step.fn));
    steps.closeAdmission();
    const failure = new StepFailure("agent failed");
    step.fail(failure);
    await settleMicrotasks();

    expect(done.status()).toBe("pending");
    expect(steps.stateOf("a")).toBe("parked");
    expect(steps.ready()).toBe(true);
    expect(steps.exported()).toEqual(new Map([["a", null]]));

    steps.openAdmission();
    await expect(done.promise).rejects.toBe(failure);
    expect(steps.stateOf("a")).toBe("running");
  });

  it("a replay step that fails outside a checkpoint fails at once and the episode runs", async () => {
    const steps = new EpisodeSteps();
    steps.begin("a");
    await steps.boundary("a", { next: 1 });
    const failure = new StepFailure("seed failed");
    await expect(
      steps.step("a", "replay", () => {
        throw failure;
      }),
    ).rejects.toBe(failure);
    expect(steps.stateOf("a")).toBe("running");
    steps.closeAdmission();
    steps.step("a", "replay", () => new Promise<never>(() => {})).catch(() => {});
    expect(steps.exported()).toEqual(new Map([["a", { next: 1 }]]));
  });

  it("a retire stops an episode parked after its replay step failed", async () => {
    const steps = new EpisodeSteps();
    steps.begin("a");
    steps.closeAdmission();
    const step = manualStep();
    const done = track(steps.step("a", "replay", step.fn));
    step.fail(new StepFailure("failed"));
    await settleMicrotasks();
    expect(steps.stateOf("a")).toBe("parked");

    const retire = track(steps.retire("a", NEVER));
    await settleMicrotasks();
    expect(done.error()).toBeInstanceOf(EpisodeRetiredError);
    expect(steps.exported().size).toBe(0);
    steps.end("a");
    await retire.promise;
  });

  it("steps and boundaries of one episode run one at a time", async () => {
    const steps = new EpisodeSteps();
    steps.begin("a");
    const step = manualStep();
    const done = track(steps.step("a", "wait", step.fn));
    await expect(steps.step("a", "wait", () => 1)).rejects.toThrow("inside a step");
    await expect(steps.boundary("a", { next: 1 })).rejects.toThrow("inside a step");
    step.succeed("x");
    await done.promise;
  });

  it("a step does not start once the episode's signal has fired", async () => {
    const steps = new EpisodeSteps();
    steps.begin("a", { signal: AbortSignal.abort(new Error("gone")) });
    const body = vi.fn(() => 1);
    await expect(steps.step("a", "wait", body)).rejects.toThrow("gone");
    expect(body).not.toHaveBeenCalled();
  });

  it("a step's function gets the episode's signal", async () => {
    const steps = new EpisodeSteps();
    const signal = steps.begin("a");
    await expect(steps.step("a", "replay", (s) => s)).resolves.toBe(signal);
  });

  it("steps and boundaries of an unknown episode are refused", async () => {
    const steps = new EpisodeSteps();
    await expect(steps.boundary("nope", {})).rejects.toThrow("not running");
    await expect(steps.step("nope", "wait", () => 1)).rejects.toThrow("not running");
  });
});

describe("restarts", () => {
  it("marking a restart waits until no checkpoint is open, even one closed again before it woke", async () => {
    const steps = new EpisodeSteps();
    steps.begin("a");
    steps.closeAdmission();
    const mark = track(steps.markRestart("a"));
    await settleMicrotasks();
    expect(mark.status()).toBe("pending");
    expect(steps.restarts()).toEqual([]);
    expect(steps.blockers()).toEqual(["a"]);

    steps.openAdmission();
    steps.closeAdmission();
    await settleMicrotasks();
    expect(mark.status()).toBe("pending");

    steps.openAdmission();
    await mark.promise;
    expect(steps.restarts()).toEqual(["a"]);
    expect(steps.blockerCount()).toBe(0);
  });

  it("a restart mark's wait is cancelled by its signal", async () => {
    const steps = new EpisodeSteps();
    steps.begin("a");
    steps.closeAdmission();
    const reason = new Error("seed deadline");
    await expect(steps.markRestart("a", AbortSignal.abort(reason))).rejects.toBe(reason);
    expect(steps.restarts()).toEqual([]);
  });

  it("restarts are listed sorted, never exported, and leave the list when retired", async () => {
    const steps = new EpisodeSteps();
    for (const key of ["c", "a", "b"]) steps.begin(key, { restart: true });
    await steps.markRestart("unknown");
    expect(steps.restarts()).toEqual(["a", "b", "c"]);
    steps.closeAdmission();
    steps.step("a", "replay", () => new Promise<never>(() => {})).catch(() => {});
    expect(steps.exported().size).toBe(0);
    await expect(steps.retire("b", cutShort())).rejects.toThrow();
    expect(steps.restarts()).toEqual(["a", "c"]);
  });
});

describe("retire", () => {
  it("a retire aborts the work once and waits until the episode has ended", async () => {
    const steps = new EpisodeSteps();
    const cleanup = deferred<void>();
    const episode = track(
      steps.begin("a", {
        run: async (signal) => {
          try {
            await steps.step("a", "wait", () => aborted(signal));
          } finally {
            await cleanup.promise;
          }
        },
      }),
    );
    const signal = steps.signal("a");
    const aborts = vi.fn();
    signal.addEventListener("abort", aborts);

    const retire = track(steps.retire("a", NEVER));
    expect(signal.reason).toBeInstanceOf(EpisodeRetiredError);
    expect((signal.reason as EpisodeRetiredError).captureKey).toBe("a");
    await settleMicrotasks();
    expect(retire.status()).toBe("pending");
    expect(steps.has("a")).toBe(true);

    cleanup.resolve();
    await retire.promise;
    expect(episode.status()).toBe("fulfilled");
    expect(steps.has("a")).toBe(false);
    expect(aborts).toHaveBeenCalledTimes(1);
  });

  it("a retire cut short keeps the episode tracked, and a retry waits again without aborting again", async () => {
    const steps = new EpisodeSteps();
    const signal = steps.begin("a");
    await steps.boundary("a", { next: 1 });
    const step = manualStep();
    const running = track(steps.step("a", "replay", step.fn));
    const aborts = vi.fn();
    signal.addEventListener("abort", aborts);

    const cut = new AbortController();
    const first = track(steps.retire("a", cut.signal));
    cut.abort(new Error("retire deadline"));
    await expect(first.promise).rejects.toThrow("retire deadline");

    expect(steps.has("a")).toBe(true);
    steps.closeAdmission();
    expect(steps.blockers()).toEqual(["a"]);
    expect(steps.exported().size).toBe(0);
    expect(() => steps.begin("a")).toThrow(EpisodeAlreadyRunningError);
    steps.openAdmission();

    const retry = track(steps.retire("a", NEVER));
    await settleMicrotasks();
    expect(retry.status()).toBe("pending");
    expect(aborts).toHaveBeenCalledTimes(1);

    step.fail(signal.reason);
    await expect(running.promise).rejects.toBeInstanceOf(EpisodeRetiredError);
    steps.end("a");
    await retry.promise;
    expect(steps.has("a")).toBe(false);
    expect(aborts).toHaveBeenCalledTimes(1);
  });

  it("a retire waits for an episode in its final cleanup without aborting it", async () => {
    const steps = new EpisodeSteps();
    const signal = steps.begin("a");
    steps.finishing("a");
    const retire = track(steps.retire("a", NEVER));
    await settleMicrotasks();
    expect(signal.aborted).toBe(false);
    expect(retire.status()).toBe("pending");
    expect(steps.blockers()).toEqual(["a"]);
    steps.end("a");
    await retire.promise;
  });

  it("an episode being retired neither records nor parks at a boundary", async () => {
    const steps = new EpisodeSteps();
    steps.begin("a");
    await steps.boundary("a", { next: 1 });
    steps.finishing("a");
    const retire = track(steps.retire("a", NEVER));
    steps.closeAdmission();
    const build = vi.fn((): JsonValue => ({ next: 2 }));
    await steps.boundary("a", build);
    expect(build).not.toHaveBeenCalled();
    expect(steps.stateOf("a")).toBe("running");
    steps.end("a");
    await retire.promise;
  });

  it("retiring an episode that is not tracked resolves at once", async () => {
    const steps = new EpisodeSteps();
    await expect(steps.retire("nope", NEVER)).resolves.toBeUndefined();
  });
});

describe("counts and reports", () => {
  it("keeps the blocker count across 10,000 episodes and lists the 100 smallest blockers", async () => {
    const steps = new EpisodeSteps();
    const keys = Array.from({ length: 10_000 }, (_, i) => `rollout-${(i * 7919) % 10_000}`);
    for (const key of keys) steps.begin(key);
    expect(steps.blockerCount()).toBe(10_000);
    const sorted = [...keys].sort();
    expect(steps.blockers(100)).toEqual(sorted.slice(0, 100));

    steps.closeAdmission();
    const even = keys.filter((key) => Number(key.slice(8)) % 2 === 0);
    const parked = even.map((key) => steps.boundary(key, { key }));
    expect(steps.blockerCount()).toBe(5_000);
    const odd = sorted.filter((key) => Number(key.slice(8)) % 2 === 1);
    expect(steps.blockers(100)).toEqual(odd.slice(0, 100));
    expect(steps.blockers(3)).toEqual(odd.slice(0, 3));
    expect(steps.exported().size).toBe(5_000);
    expect(steps.readiness().blocker_count).toBe(5_000);
    expect(steps.readiness().blockers).toHaveLength(100);

    for (const key of odd) steps.end(key);
    expect(steps.blockerCount()).toBe(0);
    expect(steps.blockers()).toEqual([]);
    steps.openAdmission();
    await Promise.all(parked);
    expect(steps.blockerCount()).toBe(5_000);
  });

  it("readiness reports blockers, their count, restarts and tracked episodes", async () => {
    const steps = new EpisodeSteps();
    steps.begin("b");
    steps.begin("a");
    steps.begin("z", { restart: true });
    steps.begin("p");
    steps.closeAdmission();
    const parked = steps.boundary("p", { next: 1 });
    expect(steps.readiness({ pending: 2 })).toEqual({
      ready: false,
      blockers: ["a", "b"],
      blocker_count: 2,
      counts: { episodes: 4, pending: 2 },
      restarts: ["z"],
    });
    steps.end("a");
    steps.end("b");
    expect(steps.readiness().ready).toBe(true);
    steps.openAdmission();
    await parked;
  });
});

describe("exported", () => {
  it("maps parked and replay-step episodes to their latest boundary, null before the first one", async () => {
    const steps = new EpisodeSteps();
    for (const key of ["first-replay", "parked", "running", "waiting", "restart", "retired"]) {
      steps.begin(key, { restart: key === "restart" });
    }
    await steps.boundary("parked", { next: 1 });
    await steps.boundary("retired", { next: 1 });
    const pending = new Promise<never>(() => {});
    steps.step("first-replay", "replay", () => pending).catch(() => {});
    steps.step("waiting", "wait", () => pending).catch(() => {});
    steps.step("restart", "replay", () => pending).catch(() => {});
    steps.step("retired", "replay", () => pending).catch(() => {});
    await expect(steps.retire("retired", cutShort())).rejects.toThrow();
    steps.closeAdmission();
    steps.boundary("parked", { next: 2 }).catch(() => {});

    expect([...steps.exported()]).toEqual([
      ["first-replay", null],
      ["parked", { next: 2 }],
    ]);
    // The same episodes, unsorted, for a caller that sorts its records once itself.
    const visited: [string, JsonValue | null][] = [];
    steps.forEachExported((key, boundary) => visited.push([key, boundary]));
    expect(visited.sort(([a], [b]) => (a < b ? -1 : 1))).toEqual([...steps.exported()]);
    expect(visited[1]?.[1]).toBe(steps.exported().get("parked"));
  });
});

describe("notifications", () => {
  it("onChange is called only while a checkpoint is open", async () => {
    const onChange = vi.fn();
    const steps = new EpisodeSteps({ onChange });
    steps.begin("a");
    await steps.boundary("a", { next: 1 });
    await steps.step("a", "wait", () => 1);
    await steps.step("a", "replay", () => 2);
    await steps.markRestart("a");
    steps.begin("b");
    steps.end("b");
    expect(onChange).not.toHaveBeenCalled();

    steps.begin("c");
    steps.closeAdmission();
    onChange.mockClear();
    const parked = steps.boundary("c", { next: 1 });
    expect(onChange).toHaveBeenCalled();
    onChange.mockClear();
    steps.openAdmission();
    await parked;
    await steps.step("c", "wait", () => 1);
    steps.end("c");
    expect(onChange).not.toHaveBeenCalled();
  });
});
