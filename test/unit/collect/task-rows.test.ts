import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { TaskFileError, readTaskRows, scanTaskFile, taskRow } from "#sdk/collect/task-rows.js";

const OPTIONS = { routeField: "environment" };
let dir: string;
beforeEach(() => {
  dir = mkdtempSync(path.join(tmpdir(), "gym-tasks-"));
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

describe("taskRow", () => {
  it("takes a task as it is, a plain row as its task input, and routes by the field", () => {
    const task = taskRow(
      { task_id: { taskset: "s", task_id: "7" }, task_input: { q: 1 }, environment: "env_a" },
      0,
      1,
      "math.jsonl",
      OPTIONS,
    );
    expect(task).toMatchObject({
      task: { task_id: { taskset: "s", task_id: "7" }, task_input: { q: 1 } },
      environment: "env_a",
    });
    const plain = taskRow({ task_id: 5, question: "2+2" }, 3, 4, "/x/math.train.jsonl", OPTIONS);
    expect(plain.task).toEqual({
      task_id: { taskset: "math", task_id: "5" },
      task_input: { question: "2+2" },
    });
    expect(plain.environment).toBeNull();
    expect(taskRow({ q: 1 }, 9, 10, "t.jsonl", OPTIONS).task.task_id).toEqual({
      taskset: "t",
      task_id: "9",
    });
  });

  it("names the line and the problem of a bad row", () => {
    expect(() => taskRow([1], 0, 3, "t.jsonl", OPTIONS)).toThrow(
      /t\.jsonl:3: a row must be a JSON object/,
    );
    expect(() => taskRow({ environment: 5 }, 0, 2, "t.jsonl", OPTIONS)).toThrow(
      /"environment" must name/,
    );
    expect(() => taskRow({ task_id: { taskset: "s" } }, 0, 2, "t.jsonl", OPTIONS)).toThrow(
      TaskFileError,
    );
  });
});

describe("reading a task file", () => {
  it("skips blank lines, counts and digests rows, keeps the rows asked for", async () => {
    const file = path.join(dir, "tasks.jsonl");
    writeFileSync(file, '{"q":0}\n\n{"q":1,"environment":"e"}\n{"q":2}\n');
    const scan = await scanTaskFile(file, OPTIONS, new Set([2]));
    expect(scan).toMatchObject({ rows: 3, environments: ["e"], unrouted: 2 });
    expect(scan.digest).toMatch(/^[0-9a-f]{64}$/);
    expect(scan.kept.get(2)?.line).toBe(4);
    const rows = [];
    for await (const row of readTaskRows(file, OPTIONS)) rows.push(row.index);
    expect(rows).toEqual([0, 1, 2]);
  });

  it("a line that is not JSON fails with its line number; a missing file is named", async () => {
    const file = path.join(dir, "tasks.jsonl");
    writeFileSync(file, '{"q":0}\n{oops\n');
    await expect(scanTaskFile(file, OPTIONS)).rejects.toThrow(/tasks\.jsonl:2: not JSON/);
    await expect(scanTaskFile(path.join(dir, "none.jsonl"), OPTIONS)).rejects.toThrow(
      /no such file/,
    );
  });
});
