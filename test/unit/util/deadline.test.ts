import { describe, expect, it } from "vitest";
import { awaitUntil } from "../../../sdk/src/util/deadline.js";

describe("awaitUntil with a deadline already past", () => {
  it("counts work that has already settled", async () => {
    expect(await awaitUntil(Promise.resolve(7), Date.now() / 1000 - 1)).toEqual({
      done: true,
      value: 7,
    });
  });

  it("gives up at once on work still running, even if it would finish within the next tick", async () => {
    const work = new Promise<number>((resolve) => setImmediate(() => resolve(1)));
    expect(await awaitUntil(work, Date.now() / 1000 - 1)).toEqual({ done: false });
  });

  it("waits for work that ends before a future deadline", async () => {
    const work = new Promise<number>((resolve) => setImmediate(() => resolve(2)));
    expect(await awaitUntil(work, Date.now() / 1000 + 30)).toEqual({ done: true, value: 2 });
  });
});
