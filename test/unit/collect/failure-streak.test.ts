import { describe, expect, it } from "vitest";
import { FailureWatch } from "#sdk/collect/failure-streak.js";
import type { RolloutRow, RowFailure } from "#sdk/collect/rollout-row.js";

const REFUSED: RowFailure = {
  kind: "refused",
  code: "invalid_request",
  status: 422,
  message: "task.task_input.count: Required",
};
const SERVER_ERROR: RowFailure = {
  kind: "server_error",
  code: "internal_error",
  status: 500,
  message: "boom",
};

function row(n: number, failure: RowFailure | null): RolloutRow {
  return {
    rollout_id: `run-${n}-0`,
    attempt: 0,
    row: n,
    repeat: 0,
    task_id: { taskset: "tasks", task_id: `t${n}` },
    environment: "env",
    status: failure === null ? "finished" : "failed",
    reward: failure === null ? 1 : null,
    result: null,
    failure,
    started_at: "2026-01-01T00:00:00.000Z",
    finished_at: "2026-01-01T00:00:01.000Z",
    seconds: 1,
  };
}

const ids = (rows: readonly RolloutRow[]): number[] => rows.map((r) => r.row);

describe("FailureWatch", () => {
  it("holds failures of one kind and code, and reports the streak at the limit without writing it", () => {
    const watch = new FailureWatch(3);
    expect(watch.ended(row(0, REFUSED))).toEqual({ write: [], streak: null });
    expect(watch.ended(row(1, REFUSED))).toEqual({ write: [], streak: null });
    expect(watch.held).toBe(2);
    const verdict = watch.ended(row(2, REFUSED));
    expect(verdict.write).toEqual([]);
    expect(verdict.streak).toEqual({
      kind: "refused",
      code: "invalid_request",
      status: 422,
      rollouts: 3,
      example: {
        rollout_id: "run-0-0",
        row: 0,
        task_id: { taskset: "tasks", task_id: "t0" },
        message: "task.task_input.count: Required",
      },
    });
    expect(watch.held).toBe(0);
  });

  it("a finished rollout writes the held failures before itself", () => {
    const watch = new FailureWatch(3);
    watch.ended(row(0, REFUSED));
    watch.ended(row(1, REFUSED));
    const verdict = watch.ended(row(2, null));
    expect(ids(verdict.write)).toEqual([0, 1, 2]);
    expect(verdict.streak).toBeNull();
    expect(watch.held).toBe(0);
  });

  it("a failure of another kind or code writes the held ones and starts a streak of its own", () => {
    const watch = new FailureWatch(2);
    watch.ended(row(0, REFUSED));
    const other = watch.ended(row(1, SERVER_ERROR));
    expect(ids(other.write)).toEqual([0]);
    expect(other.streak).toBeNull();
    const otherCode = watch.ended(row(2, { ...SERVER_ERROR, code: "http_502", status: 502 }));
    expect(ids(otherCode.write)).toEqual([1]);
    expect(watch.ended(row(3, { ...SERVER_ERROR, code: "http_502" })).streak?.rollouts).toBe(2);
  });

  it("limit 0 writes every row at once and never stops", () => {
    const watch = new FailureWatch(0);
    for (let n = 0; n < 50; n++) {
      expect(watch.ended(row(n, REFUSED))).toEqual({ write: [row(n, REFUSED)], streak: null });
    }
    expect(watch.held).toBe(0);
  });

  it("drain hands over what is held, once", () => {
    const watch = new FailureWatch(5);
    watch.ended(row(0, REFUSED));
    watch.ended(row(1, REFUSED));
    expect(ids(watch.drain())).toEqual([0, 1]);
    expect(watch.drain()).toEqual([]);
  });
});
