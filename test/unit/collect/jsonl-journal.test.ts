import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { JournalCorruptError, JsonlJournal } from "#sdk/collect/jsonl-journal.js";
import { DispatchLog } from "#sdk/collect/dispatch-log.js";
import { episodeId } from "#sdk/identity/episode-id.js";

let dir: string;
beforeEach(() => {
  dir = mkdtempSync(path.join(tmpdir(), "gym-journal-"));
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

describe("JsonlJournal", () => {
  it("reads back every complete line and cuts off a torn last write", async () => {
    const file = path.join(dir, "j.jsonl");
    writeFileSync(file, '{"a":1}\n\n{"a":2}\n{"a":');
    const seen: unknown[] = [];
    const journal = await JsonlJournal.open(file, (value) => seen.push(value));
    expect(seen).toEqual([{ a: 1 }, { a: 2 }]);
    expect(journal.tornBytes).toBe(5);
    await journal.append({ a: 3 });
    await journal.close();
    expect(readFileSync(file, "utf8")).toBe('{"a":1}\n\n{"a":2}\n{"a":3}\n');
  });

  it("refuses a bad line that is not the last write, naming it", async () => {
    const file = path.join(dir, "j.jsonl");
    writeFileSync(file, '{"a":1}\nnot json\n{"a":2}\n');
    const opened = JsonlJournal.open(file, () => undefined);
    await expect(opened).rejects.toBeInstanceOf(JournalCorruptError);
    await expect(opened).rejects.toThrow(/j\.jsonl:2/);
  });

  it("group-commits appends made together into one write, in order", async () => {
    const file = path.join(dir, "j.jsonl");
    const journal = await JsonlJournal.open(file, () => undefined);
    await Promise.all(Array.from({ length: 200 }, (_, i) => journal.append({ i })));
    await journal.close();
    const lines = readFileSync(file, "utf8").trim().split("\n");
    expect(lines.map((line) => (JSON.parse(line) as { i: number }).i)).toEqual(
      Array.from({ length: 200 }, (_, i) => i),
    );
  });
});

describe("DispatchLog", () => {
  it("keeps the newest attempt logged per rollout across opens", async () => {
    const file = path.join(dir, "dispatch.log");
    const log = await DispatchLog.open(file);
    await log.record(episodeId("r-1", 0));
    await log.record(episodeId("r-1", 2));
    await log.record(episodeId("r-2", 0));
    await log.close();
    const again = await DispatchLog.open(file);
    expect(again.newestAttempt("r-1")).toEqual(episodeId("r-1", 2));
    expect(again.newestAttempt("r-2")).toEqual(episodeId("r-2", 0));
    expect(again.newestAttempt("r-3")).toBeNull();
    await again.close();
  });

  it("refuses a line that is JSON but no dispatch entry", async () => {
    const file = path.join(dir, "dispatch.log");
    writeFileSync(file, '{"rollout_id":"r","attempt":-1}\n');
    await expect(DispatchLog.open(file)).rejects.toThrow(/not a dispatch entry/);
  });
});
