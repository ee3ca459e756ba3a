/**
 * Restore: a restore waits for any previous install still running, whatever
 * that install's outcome. The wait follows real file I/O (the read), so this file observes the
 * control plane's bounded waits to know when the second restore has reached it.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import {
  InjectedError,
  flush,
  harness,
  makeTempDir,
  removeTempDir,
  restoreReq,
  writeCheckpoint,
  type Harness,
} from "../../support/test-participant.js";

const bounded = vi.hoisted(() => {
  const state = {
    count: 0,
    waiters: [] as { count: number; resolve: () => void }[],
    /** Resolves once the control plane has started `count` bounded waits in all. */
    reached(count: number): Promise<void> {
      if (state.count >= count) return Promise.resolve();
      return new Promise((resolve) => state.waiters.push({ count, resolve }));
    },
  };
  return state;
});

vi.mock("#sdk/util/deadline.js", async (importOriginal) => {
  const original = await importOriginal<typeof import("#sdk/util/deadline.js")>();
  return {
    ...original,
    awaitUntil: <T>(work: Promise<T>, deadlineTs: number) => {
      bounded.count += 1;
      for (const waiter of bounded.waiters.filter((w) => bounded.count >= w.count)) {
        waiter.resolve();
      }
      return original.awaitUntil(work, deadlineTs);
    },
  };
});

let h: Harness;
let dir: string;

beforeEach(async () => {
  h = harness();
  dir = await makeTempDir();
});

afterEach(async () => {
  vi.useRealTimers();
  h.cp.close();
  await removeTempDir(dir);
});

describe("a restore after an install that outlived its restore", () => {
  it("waits for that install and installs its own records even when that install then fails", async () => {
    await writeCheckpoint(dir, { a: 1 });
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout", "Date"] });
    const install = h.participant.hold("install");
    const first = h.cp.restore(restoreReq("r1", dir, ["a"], { seconds: 10 }));
    first.catch(() => undefined);
    await install.entered();
    await vi.advanceTimersByTimeAsync(10_000);
    await expect(first).rejects.toMatchObject({ code: "deadline_exceeded" });
    const before = bounded.count;
    const second = h.cp.restore(restoreReq("r1", dir, ["a"], { seconds: 100 }));
    // Its read, then its wait for the previous install.
    await bounded.reached(before + 2);
    await flush();
    expect(h.participant.callsOf("closeAdmission")).toHaveLength(1);
    install.fail(new InjectedError("the first install broke"));
    expect((await second).restored).toEqual(["a-a1"]);
    expect(h.cp.phase).toBe("restored");
    expect(h.participant.callsOf("install")).toHaveLength(2);
    expect(h.participant.admissionOpen).toBe(false);
  });
});
