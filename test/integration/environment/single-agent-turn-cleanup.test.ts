/**
 * The cleanup entries `single_agent_turn` registers (see docs/environment-server.md):
 * idempotent once successful, retried after a failure, concurrent closes serialized.
 */
import { describe, expect, it } from "vitest";
import { CleanupEntry } from "../../../reference-servers/single-agent-turn/src/cleanup-entry.js";
import { deferred } from "#sdk/util/deferred.js";

describe("CleanupEntry", () => {
  it("runs its close once it succeeded, and passes the per-call bound", async () => {
    const bounds: number[] = [];
    const entry = new CleanupEntry("session", async (timeoutMs) => void bounds.push(timeoutMs), 7);
    expect(entry.active).toBe(true);
    await entry.close();
    await entry.close();
    expect(bounds).toEqual([7]);
    expect(entry.active).toBe(false);
  });

  it("stays active after a failure, so a later close (the unwind) runs it again", async () => {
    let runs = 0;
    const entry = new CleanupEntry(
      "session",
      async () => {
        runs += 1;
        if (runs === 1) throw new Error("close failed");
      },
      1000,
    );
    await expect(entry.close()).rejects.toThrow("close failed");
    expect(entry.active).toBe(true);
    await entry.close();
    expect(runs).toBe(2);
    expect(entry.active).toBe(false);
  });

  it("serializes concurrent closes: the second waits, then finds nothing to do", async () => {
    const gate = deferred<void>();
    let runs = 0;
    const entry = new CleanupEntry(
      "session",
      async () => {
        runs += 1;
        await gate.promise;
      },
      1000,
    );
    const first = entry.close();
    const second = entry.close();
    gate.resolve();
    await Promise.all([first, second]);
    expect(runs).toBe(1);
  });

  it("a close waiting behind a failed one runs the callback again", async () => {
    const gate = deferred<void>();
    let runs = 0;
    const entry = new CleanupEntry(
      "session",
      async () => {
        runs += 1;
        if (runs === 1) {
          await gate.promise;
          throw new Error("first close failed");
        }
      },
      1000,
    );
    const first = entry.close();
    const second = entry.close();
    gate.resolve();
    await expect(first).rejects.toThrow("first close failed");
    await second;
    expect(runs).toBe(2);
  });
});
