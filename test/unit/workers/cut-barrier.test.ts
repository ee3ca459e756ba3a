/**
 * The coordinator's cut barrier: one round for every worker of a close, sent once each worker
 * handed in its calls, left, or the prepare's time ran out; a share that misses the round is
 * not cut (its calls regenerate), and each worker gets the acks of its own calls.
 */
import { afterEach, describe, expect, it, vi } from "vitest";
import { CutBarrier } from "#sdk/workers/cut-barrier.js";
import type { CutCandidate, CutService } from "#sdk/participants/model/cut-service.js";
import { generationCutFailureAck } from "#sdk/capture/generation-cut.js";

afterEach(() => {
  vi.useRealTimers();
});

function candidate(ticket: string): CutCandidate {
  return {
    ticket_id: ticket,
    rollout_id: `r-${ticket}`,
    attempt: 0,
    model_call_id: `call-${ticket}`,
    admitted_at: 1,
    backend: "http://w0:8000/v1",
  };
}

/** A service that records each round's tickets and fails every cut (acks still name them). */
function recording() {
  const rounds: string[][] = [];
  const service: CutService = {
    async cut(candidates) {
      rounds.push(candidates.map((c) => c.ticket_id).sort());
      return new Map(candidates.map((c) => [c.ticket_id, generationCutFailureAck(c)]));
    },
  };
  return { rounds, service };
}

const ids = (acks: { ticket_id: string }[]) => acks.map((ack) => ack.ticket_id);

describe("CutBarrier", () => {
  it("runs one round once every worker handed in its share, and answers each with its own acks", async () => {
    const { rounds, service } = recording();
    const barrier = new CutBarrier(service, [0, 1], Date.now() / 1000 + 30);
    const first = barrier.submit(0, [candidate("a"), candidate("b")]);
    expect(barrier.started).toBe(false);
    const second = barrier.submit(1, [candidate("c")]);
    expect(ids(await first)).toEqual(["a", "b"]);
    expect(ids(await second)).toEqual(["c"]);
    expect(rounds).toEqual([["a", "b", "c"]]);
  });

  it("stops waiting for a worker that left", async () => {
    const { rounds, service } = recording();
    const barrier = new CutBarrier(service, [0, 1], Date.now() / 1000 + 30);
    const first = barrier.submit(0, [candidate("a")]);
    barrier.retain([0]);
    expect(ids(await first)).toEqual(["a"]);
    expect(rounds).toEqual([["a"]]);
    // A share after the round is not cut.
    expect(await barrier.submit(1, [candidate("late")])).toEqual([]);
  });

  it("runs with what it has when the prepare's time is up", async () => {
    vi.useFakeTimers();
    const { rounds, service } = recording();
    const barrier = new CutBarrier(service, [0, 1], Date.now() / 1000 + 5);
    const first = barrier.submit(0, [candidate("a")]);
    await vi.advanceTimersByTimeAsync(5_000);
    expect(ids(await first)).toEqual(["a"]);
    expect(rounds).toEqual([["a"]]);
  });

  it("sends nothing for a round of no calls", async () => {
    const { rounds, service } = recording();
    const barrier = new CutBarrier(service, [0, 1], null);
    expect(await Promise.all([barrier.submit(0, []), barrier.submit(1, [])])).toEqual([[], []]);
    expect(rounds).toEqual([]);
  });
});
