/**
 * The policy gate, transport-free (see docs/policy-model.md): admission and waiting calls, held
 * responses, readiness, the cut round's selection, and the gate part of retire.
 */
import { describe, expect, it } from "vitest";
import { RetiredAttempts } from "#sdk/control/retired-attempts.js";
import { GymError } from "#sdk/errors.js";
import { episodeId, type EpisodeId } from "#sdk/identity/episode-id.js";
import {
  CallRetiredError,
  PolicyGate,
  type PolicyGateOptions,
  type Ticket,
} from "#sdk/participants/model/policy-gate.js";
import { flush } from "../../support/test-participant.js";

const r0 = episodeId("r", 0);
const r1 = episodeId("r", 1);
const r2 = episodeId("r", 2);
const q0 = episodeId("q", 0);

/** A gate over fresh retired marks, counting its change notifications. */
function makeGate(options: Omit<PolicyGateOptions, "retired" | "onChange"> = {}) {
  const retired = new RetiredAttempts();
  const state = { changes: 0 };
  const gate = new PolicyGate({ ...options, retired, onChange: () => (state.changes += 1) });
  return { gate, retired, state };
}

/** Tracks a promise's outcome without awaiting it. */
function watch<T>(promise: Promise<T>) {
  const state = {
    settled: false,
    value: undefined as T | undefined,
    error: null as unknown,
  };
  promise.then(
    (value) => {
      state.settled = true;
      state.value = value;
    },
    (error: unknown) => {
      state.settled = true;
      state.error = error;
    },
  );
  return state;
}

/** The error code `promise` rejects with ("ok" when it resolves). */
async function code(promise: Promise<unknown>): Promise<string> {
  try {
    await promise;
  } catch (error) {
    if (error instanceof GymError) return error.code;
    throw error;
  }
  return "ok";
}

/** Polls (bounded, no sleeps) until `check` holds. */
async function until(check: () => boolean, rounds = 50): Promise<void> {
  for (let i = 0; i < rounds && !check(); i++) await flush(1);
  expect(check()).toBe(true);
}

/** Admits a call of `episode` while admission is open. */
async function admitted(gate: PolicyGate, episode: EpisodeId | null): Promise<Ticket> {
  return await gate.admit(episode);
}

/** Gives `ticket` a capture context (as the capture middleware does). */
function capture(ticket: Ticket, modelCallId: string): Ticket {
  ticket.capture = { modelCallId, requestItems: [{ role: "user", content: modelCallId }] };
  return ticket;
}

describe("PolicyGate admission", () => {
  it("admits at once while open: a ticket with a 32-hex ID and its capture key, served from then on", async () => {
    const { gate } = makeGate();
    expect(gate.accepting).toBe(true);
    expect(gate.served).toBe(false);
    const before = Date.now() / 1000;
    const t = await gate.admit(r1);
    expect(t.ticketId).toMatch(/^[0-9a-f]{32}$/);
    expect(t.captureKey).toBe("r-a1");
    expect(t.episode).toEqual(r1);
    expect(t.admittedAt).toBeGreaterThanOrEqual(before);
    expect(t.admittedAt).toBeLessThanOrEqual(Date.now() / 1000);
    expect(t.responseStarted).toBe(false);
    expect(gate.tickets.has(t)).toBe(true);
    expect(gate.served).toBe(true);
    const u = await gate.admit(null);
    expect(u.captureKey).toBe("");
    expect(u.ticketId).not.toBe(t.ticketId);
    gate.exit(t);
    gate.exit(u);
    expect(gate.tickets.size).toBe(0);
    expect(gate.served).toBe(true); // served stays set after the calls left
  });

  it("refuses a tagged call of a retired attempt at once with stale_attempt, and admits the next attempt", async () => {
    const { gate, retired } = makeGate();
    retired.mark([r1]);
    expect(await code(gate.admit(r0))).toBe("stale_attempt");
    expect(await code(gate.admit(r1))).toBe("stale_attempt");
    expect(gate.served).toBe(false);
    expect(gate.tickets.size).toBe(0);
    await gate.close(null);
    // Refused even while closed: it does not wait for resume first.
    expect(await code(gate.admit(r1))).toBe("stale_attempt");
    expect(gate.waitingCount).toBe(0);
    gate.open();
    const t = await gate.admit(r2);
    expect(t.captureKey).toBe("r-a2");
  });

  it("makes a call arriving while closed wait: no ticket, not counted, not undelivered, admitted after open", async () => {
    const { gate } = makeGate();
    const running = capture(await admitted(gate, q0), "c-running");
    await gate.close(null);
    expect(gate.accepting).toBe(false);
    const before = gate.report();
    const waiting = watch(gate.admit(r1));
    await flush();
    expect(waiting.settled).toBe(false);
    expect(gate.waitingCount).toBe(1);
    expect([...gate.tickets]).toEqual([running]);
    expect(gate.report()).toEqual(before);
    expect(gate.report().inflight).toBe(1);
    expect(gate.undeliveredCallIds()).toEqual(new Set(["c-running"]));
    gate.exit(running);
    gate.open();
    await until(() => waiting.settled);
    expect(waiting.error).toBeNull();
    const t = waiting.value as Ticket;
    expect(t.captureKey).toBe("r-a1");
    expect(gate.tickets.has(t)).toBe(true);
    expect(gate.waitingCount).toBe(0);
    expect(gate.report().inflight).toBe(1);
  });

  it("does not count a call that waited as served until it is admitted", async () => {
    const { gate } = makeGate();
    await gate.close(null);
    const waiting = watch(gate.admit(r0));
    await flush();
    expect(gate.served).toBe(false);
    gate.open();
    await until(() => waiting.settled);
    expect(gate.served).toBe(true);
  });

  it("refuses a waiting call with stale_attempt at once when its attempt (or a later one) is marked retired", async () => {
    const { gate, retired } = makeGate();
    await gate.close(null);
    const a0 = watch(gate.admit(r0));
    const a1 = watch(gate.admit(r1));
    const a2 = watch(gate.admit(r2));
    const other = watch(gate.admit(q0));
    await flush();
    expect(gate.waitingCount).toBe(4);
    retired.mark([r1]);
    gate.refuseWaiting([r1]);
    await until(() => a0.settled && a1.settled);
    expect(gate.accepting).toBe(false); // refused while admission is still closed
    expect(a0.error).toMatchObject({ code: "stale_attempt" });
    expect(a1.error).toMatchObject({ code: "stale_attempt", captureKey: "r-a1" });
    expect(a2.settled).toBe(false);
    expect(other.settled).toBe(false);
    expect(gate.waitingCount).toBe(2);
    expect(gate.tickets.size).toBe(0);
    gate.open();
    await until(() => a2.settled && other.settled);
    expect(a2.error).toBeNull();
    expect(other.error).toBeNull();
  });

  it("keeps a waiting call refused after the marks are forgotten and admission reopens", async () => {
    const { gate, retired } = makeGate();
    await gate.close(null);
    const waiting = watch(gate.admit(r1));
    await flush();
    // The mark, the forget and the reopen all happen before the waiting call runs again.
    retired.mark([r1]);
    gate.refuseWaiting([r1]);
    retired.forget(["r"]);
    gate.open();
    await until(() => waiting.settled);
    expect(waiting.error).toMatchObject({ code: "stale_attempt" });
    expect(gate.served).toBe(false);
    expect(gate.tickets.size).toBe(0);
    expect(gate.waitingCount).toBe(0);
    // A new call of the forgotten rollout is admitted again.
    const t = await gate.admit(r1);
    expect(t.captureKey).toBe("r-a1");
  });

  it("never refuses or tracks untagged calls: they wait while closed and are admitted after open", async () => {
    const { gate, retired } = makeGate();
    await gate.close(null);
    const untagged = watch(gate.admit(null));
    await flush();
    expect(gate.waitingCount).toBe(0); // waiting, but not tracked by rollout
    retired.mark([r2]);
    gate.refuseWaiting([r2]);
    await gate.retire(r2, new AbortController().signal);
    await flush();
    expect(untagged.settled).toBe(false);
    expect(gate.tickets.size).toBe(0);
    gate.open();
    await until(() => untagged.settled);
    expect(untagged.error).toBeNull();
    expect((untagged.value as Ticket).captureKey).toBe("");
    expect((untagged.value as Ticket).episode).toBeNull();
  });

  it("stops waiting when the call's own signal aborts, leaving no tracked waiter", async () => {
    const { gate } = makeGate();
    await gate.close(null);
    const abort = new AbortController();
    const waiting = watch(gate.admit(r0, abort.signal));
    await flush();
    expect(gate.waitingCount).toBe(1);
    const reason = new Error("client went away");
    abort.abort(reason);
    await until(() => waiting.settled);
    expect(waiting.error).toBe(reason);
    expect(gate.waitingCount).toBe(0);
    gate.open();
    expect(gate.served).toBe(false);
  });
});

describe("PolicyGate delivery", () => {
  it("starts a response at once while open, idempotently", async () => {
    const { gate } = makeGate();
    const t = await gate.admit(r0);
    await gate.deliver(t);
    expect(t.responseStarted).toBe(true);
    await gate.deliver(t);
    expect(t.responseStarted).toBe(true);
  });

  it("holds a response while closed and releases it on open", async () => {
    const { gate } = makeGate();
    const t = capture(await gate.admit(r0), "c1");
    await gate.close(null);
    const delivered = watch(gate.deliver(t));
    await flush();
    expect(delivered.settled).toBe(false);
    expect(t.responseStarted).toBe(false);
    expect(gate.report()).toMatchObject({ ready: true, held: 1, streaming: [] });
    expect(gate.undeliveredCallIds()).toEqual(new Set(["c1"]));
    gate.open();
    await until(() => delivered.settled);
    expect(delivered.error).toBeNull();
    expect(t.responseStarted).toBe(true);
    expect(gate.undeliveredCallIds()).toEqual(new Set());
  });

  it("holds through a second close that follows a reopen, until the next open", async () => {
    const { gate } = makeGate();
    const t = await gate.admit(r0);
    await gate.close(null);
    gate.open();
    await gate.close(null);
    const delivered = watch(gate.deliver(t));
    await flush();
    expect(delivered.settled).toBe(false);
    gate.open();
    await until(() => delivered.settled);
    expect(t.responseStarted).toBe(true);
  });

  it("lets a response that started before the close keep streaming; it blocks readiness until it leaves", async () => {
    const { gate } = makeGate();
    const t = await gate.admit(r0);
    await gate.deliver(t);
    await gate.close(null);
    expect(gate.report()).toMatchObject({ ready: false, streaming: ["r"], held: 0 });
    await gate.deliver(t); // already started: not held
    gate.exit(t);
    expect(gate.report()).toMatchObject({ ready: true, streaming: [], inflight: 0 });
  });

  it("never starts the response of a call a retire already cancelled, even while open", async () => {
    const { gate } = makeGate();
    const t = await gate.admit(r1);
    const retiring = watch(gate.retire(r1, new AbortController().signal));
    await flush();
    // The generation came back anyway; the response must not start.
    await expect(gate.deliver(t)).rejects.toBeInstanceOf(CallRetiredError);
    expect(t.responseStarted).toBe(false);
    expect(gate.report()).toMatchObject({ ready: true, streaming: [] });
    gate.exit(t);
    await until(() => retiring.settled);
  });

  it("stops a held response whose attempt is retired, with stale_attempt, without starting it", async () => {
    const { gate } = makeGate();
    const t = await gate.admit(r0);
    await gate.close(null);
    const delivered = watch(gate.deliver(t));
    await flush();
    const retiring = watch(gate.retire(r0, new AbortController().signal));
    await until(() => delivered.settled);
    expect(delivered.error).toBeInstanceOf(CallRetiredError);
    expect(delivered.error).toMatchObject({ code: "stale_attempt" });
    expect(t.responseStarted).toBe(false);
    expect(retiring.settled).toBe(false); // the call has not left yet
    gate.exit(t);
    await until(() => retiring.settled);
    expect(retiring.error).toBeNull();
  });
});

describe("PolicyGate readiness report", () => {
  it("blocks only on started responses: streaming keys sorted and de-duplicated, held ones never block", async () => {
    const { gate } = makeGate();
    const b1 = await gate.admit(episodeId("b", 0));
    const b2 = await gate.admit(episodeId("b", 0));
    const a = await gate.admit(episodeId("a", 0));
    const held = await gate.admit(episodeId("c", 0));
    for (const t of [b1, b2, a]) await gate.deliver(t);
    await gate.close(null);
    expect(gate.report()).toEqual({
      ready: false,
      streaming: ["a", "b"],
      inflight: 4,
      held: 1,
      cut: 0,
      cut_failed: 0,
      cut_skipped: 0,
      served: true,
    });
    gate.exit(a);
    gate.exit(b1);
    expect(gate.report()).toMatchObject({ ready: false, streaming: ["b"], inflight: 2 });
    gate.exit(b2);
    expect(gate.report()).toMatchObject({ ready: true, streaming: [], inflight: 1, held: 1 });
    gate.exit(held);
    expect(gate.report()).toMatchObject({ ready: true, inflight: 0, held: 0 });
  });

  it("reports a streaming untagged call under the empty key", async () => {
    const { gate } = makeGate();
    const u = await gate.admit(null);
    await gate.deliver(u);
    expect(gate.report()).toMatchObject({ ready: false, streaming: [""] });
  });

  it("counts undelivered calls by cut state: cut (a record), cut_failed (an ack only), cut_skipped (a restart reason)", async () => {
    const { gate } = makeGate();
    const withRecord = capture(await gate.admit(episodeId("a", 0)), "c-a");
    withRecord.cut = { disposition: "durable_prefix" };
    withRecord.cutRecord = { model_call_id: "c-a" };
    const ackOnly = capture(await gate.admit(episodeId("b", 0)), "c-b");
    ackOnly.cut = { disposition: "durable_failure" };
    const skipped = capture(await gate.admit(episodeId("c", 0)), "c-c");
    skipped.restartReason = "tool_choice:required";
    const skippedWithAck = capture(await gate.admit(episodeId("c", 1)), "c-c1");
    skippedWithAck.restartReason = "guided_json";
    skippedWithAck.cut = { disposition: "durable_failure" };
    const noCapture = await gate.admit(episodeId("d", 0));
    noCapture.cut = { disposition: "durable_failure" };
    noCapture.cutRecord = { model_call_id: "x" };
    noCapture.restartReason = "guided_regex";
    const delivered = capture(await gate.admit(episodeId("e", 0)), "c-e");
    delivered.cutRecord = { model_call_id: "c-e" };
    await gate.deliver(delivered);
    const plain = capture(await gate.admit(episodeId("f", 0)), "c-f");
    expect(gate.report()).toEqual({
      ready: false,
      streaming: ["e"],
      inflight: 7,
      held: 6,
      cut: 1,
      cut_failed: 1,
      cut_skipped: 2,
      served: true,
    });
    expect(gate.undeliveredCallIds()).toEqual(new Set(["c-a", "c-b", "c-c", "c-c1", "c-f"]));
    for (const t of [withRecord, ackOnly, skipped, skippedWithAck, noCapture, delivered, plain]) {
      gate.exit(t);
    }
    expect(gate.report()).toMatchObject({ inflight: 0, held: 0, cut: 0, cut_failed: 0 });
  });

  it("reports a change on admit, close, deliver, exit and open", async () => {
    const { gate, state } = makeGate();
    let seen = state.changes;
    const step = (): number => {
      const delta = state.changes - seen;
      seen = state.changes;
      return delta;
    };
    const t = await gate.admit(r0);
    expect(step()).toBeGreaterThan(0);
    await gate.close(null);
    expect(step()).toBeGreaterThan(0);
    const delivered = watch(gate.deliver(t));
    await flush();
    expect(step()).toBeGreaterThan(0); // held: readiness may have changed
    gate.open();
    await until(() => delivered.settled);
    expect(step()).toBeGreaterThan(0);
    gate.exit(t);
    expect(step()).toBeGreaterThan(0);
    gate.exit(t); // a second exit is a no-op
    expect(step()).toBe(0);
  });
});

describe("PolicyGate close and cut round", () => {
  it("runs one cut round with the calls already on a worker, undelivered and cuttable, and the deadline", async () => {
    const rounds: { keys: string[]; deadline: number | null; accepting: boolean }[] = [];
    const { gate } = makeGate({
      cutRound: async (tickets, deadlineTs) => {
        rounds.push({
          keys: tickets.map((t) => t.captureKey).sort(),
          deadline: deadlineTs,
          accepting: gate.accepting,
        });
        for (const t of tickets) t.cut = { disposition: "durable_failure" };
      },
    });
    const onWorker = capture(await gate.admit(episodeId("a", 0)), "c-a");
    onWorker.backend = "http://w0:8000/v1";
    const noBackend = capture(await gate.admit(episodeId("b", 0)), "c-b");
    const constrained = capture(await gate.admit(episodeId("c", 0)), "c-c");
    constrained.backend = "http://w0:8000/v1";
    constrained.restartReason = "tool_choice:required";
    const started = capture(await gate.admit(episodeId("d", 0)), "c-d");
    started.backend = "http://w1:8000/v1";
    await gate.deliver(started);
    const uncaptured = await gate.admit(episodeId("e", 0));
    uncaptured.backend = "http://w1:8000/v1";
    const second = capture(await gate.admit(episodeId("f", 1)), "c-f");
    second.backend = "http://w1:8000/v1";
    await gate.close(1234.5);
    expect(rounds).toEqual([{ keys: ["a", "f-a1"], deadline: 1234.5, accepting: false }]);
    expect(onWorker.cut).not.toBeNull();
    expect(noBackend.cut).toBeNull();
    expect(gate.report().cut_failed).toBe(2);
  });

  it("runs the cut round with no calls when none is on a worker (a worker of several hands in an empty share)", async () => {
    const rounds: number[] = [];
    const { gate } = makeGate({
      cutRound: async (tickets) => {
        rounds.push(tickets.length);
      },
    });
    capture(await gate.admit(r0), "c1");
    await gate.close(null);
    expect(rounds).toEqual([0]);
    expect(gate.accepting).toBe(false);
  });

  it("clears every live ticket's cut and cut record on open", async () => {
    const { gate } = makeGate();
    const t = capture(await gate.admit(r0), "c1");
    await gate.close(null);
    t.cut = { disposition: "durable_prefix" };
    t.cutRecord = { model_call_id: "c1" };
    expect(gate.report().cut).toBe(1);
    gate.open();
    expect(t.cut).toBeNull();
    expect(t.cutRecord).toBeNull();
    expect(gate.report().cut).toBe(0);
  });
});

describe("PolicyGate retire", () => {
  it("cancels the admitted calls of attempts ≤ N with stale_attempt and waits for them to exit", async () => {
    const { gate } = makeGate();
    const t0 = await gate.admit(r0);
    const t1 = await gate.admit(r1);
    const t2 = await gate.admit(r2);
    const other = await gate.admit(q0);
    const untagged = await gate.admit(null);
    const retiring = watch(gate.retire(r1, new AbortController().signal));
    await flush();
    expect(t0.signal.aborted).toBe(true);
    expect(t1.signal.aborted).toBe(true);
    expect(t1.signal.reason).toBeInstanceOf(CallRetiredError);
    expect(t1.signal.reason).toMatchObject({ code: "stale_attempt", captureKey: "r-a1" });
    expect(t0.cancelled && t1.cancelled).toBe(true);
    expect(t2.signal.aborted || other.signal.aborted || untagged.signal.aborted).toBe(false);
    expect(retiring.settled).toBe(false);
    gate.exit(t1);
    await flush();
    expect(retiring.settled).toBe(false); // t0 still running
    gate.exit(t0);
    await until(() => retiring.settled);
    expect(retiring.error).toBeNull();
    expect([...gate.tickets]).toEqual([t2, other, untagged]);
  });

  it("aborts a ticket through its signal even when the request had its own signal", async () => {
    const { gate } = makeGate();
    const request = new AbortController();
    const t = await gate.admit(r0, request.signal);
    const retiring = watch(gate.retire(r0, new AbortController().signal));
    await flush();
    expect(t.signal.aborted).toBe(true);
    expect(request.signal.aborted).toBe(false);
    gate.exit(t);
    await until(() => retiring.settled);
  });

  it("never cancels untagged calls: a held one stays held through a retire and starts on open", async () => {
    const { gate } = makeGate();
    const streaming = await gate.admit(null);
    await gate.deliver(streaming);
    const held = await gate.admit(null);
    await gate.close(null);
    const delivered = watch(gate.deliver(held));
    await gate.retire(episodeId("r", 9), new AbortController().signal);
    await flush();
    expect(streaming.signal.aborted || held.signal.aborted).toBe(false);
    expect(delivered.settled).toBe(false);
    expect(gate.report()).toMatchObject({ inflight: 2, held: 1, streaming: [""] });
    gate.open();
    await until(() => delivered.settled);
    expect(delivered.error).toBeNull();
    expect(held.responseStarted).toBe(true);
  });

  it("returns only once the waiting calls it refused have left the gate with stale_attempt", async () => {
    const { gate } = makeGate();
    await gate.close(null);
    const waiters = [r0, r1, r1].map((e) => watch(gate.admit(e)));
    await flush();
    expect(gate.waitingCount).toBe(3);
    await gate.retire(r1, new AbortController().signal);
    expect(gate.waitingCount).toBe(0);
    await flush(1);
    expect(waiters.every((w) => w.settled)).toBe(true);
    for (const w of waiters) expect(w.error).toMatchObject({ code: "stale_attempt" });
  });

  it("refuses a waiting call even when the retire is cut short, and the refusal outlives forget", async () => {
    const { gate, retired } = makeGate();
    const running = await gate.admit(r0); // ignores its cancellation for now
    await gate.close(null);
    const waiting = watch(gate.admit(r0));
    await flush();
    retired.mark([r0]);
    gate.refuseWaiting([r0]);
    const deadline = new AbortController();
    const retiring = watch(gate.retire(r0, deadline.signal));
    const reason = new Error("deadline");
    deadline.abort(reason);
    await until(() => retiring.settled && waiting.settled);
    expect(retiring.error).toBe(reason);
    expect(waiting.error).toMatchObject({ code: "stale_attempt" });
    retired.forget(["r"]);
    gate.open();
    await flush();
    expect([...gate.tickets]).toEqual([running]);
    gate.exit(running);
  });

  it("lets a retried retire wait for a call an earlier retire cancelled, without cancelling it again", async () => {
    const { gate } = makeGate();
    const t = await gate.admit(r1);
    let aborts = 0;
    t.signal.addEventListener("abort", () => (aborts += 1));
    const first = new AbortController();
    const firstRetire = watch(gate.retire(r1, first.signal));
    await flush();
    expect(aborts).toBe(1);
    const firstReason: unknown = t.signal.reason;
    first.abort(new Error("first retire's deadline"));
    await until(() => firstRetire.settled);
    expect(firstRetire.error).toBeInstanceOf(Error);
    expect(gate.tickets.has(t)).toBe(true); // its cleanup is still running

    const secondRetire = watch(gate.retire(r2, new AbortController().signal));
    await flush();
    expect(secondRetire.settled).toBe(false);
    expect(aborts).toBe(1);
    expect(t.signal.reason).toBe(firstReason);
    gate.exit(t);
    await until(() => secondRetire.settled);
    expect(secondRetire.error).toBeNull();
  });
});

describe("PolicyGate restored targets", () => {
  it("runs onTargetStarted once, before the first call of a restored target is admitted", async () => {
    const started: string[] = [];
    const { gate } = makeGate({
      onTargetStarted: async (key) => {
        await flush(1);
        started.push(key);
      },
    });
    gate.restoredTargets.add("r-a1");
    gate.restoredTargets.add("q-a1");
    const t = await gate.admit(r1);
    expect(started).toEqual(["r-a1"]); // done before admit returned
    expect(gate.restoredTargets.has("r-a1")).toBe(false);
    expect(gate.restoredTargets.has("q-a1")).toBe(true);
    await gate.admit(r1);
    await gate.admit(r2);
    await gate.admit(null);
    expect(started).toEqual(["r-a1"]);
    expect(gate.tickets.has(t)).toBe(true);
  });

  it("does not start a restored target while its call waits at closed admission", async () => {
    const started: string[] = [];
    const { gate } = makeGate({ onTargetStarted: async (key) => void started.push(key) });
    gate.restoredTargets.add("r-a1");
    await gate.close(null);
    const waiting = watch(gate.admit(r1));
    await flush();
    expect(gate.restoredTargets.has("r-a1")).toBe(true);
    expect(started).toEqual([]);
    gate.open();
    await until(() => waiting.settled);
    expect(started).toEqual(["r-a1"]);
    expect(gate.restoredTargets.size).toBe(0);
  });

  it("lets the call leave and rethrows when onTargetStarted fails", async () => {
    const failure = new Error("marker write failed");
    const { gate } = makeGate({ onTargetStarted: () => Promise.reject(failure) });
    gate.restoredTargets.add("r-a1");
    await expect(gate.admit(r1)).rejects.toBe(failure);
    expect(gate.tickets.size).toBe(0);
    expect(gate.report().inflight).toBe(0);
  });
});
