import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { freshCheckpointId } from "#sdk/cli/ckpt/common.js";
import { parseCaptureKeys, readEpisodesFile } from "#sdk/cli/ckpt/episodes.js";
import { commitScope } from "#sdk/cli/ckpt/scope.js";
import { splitList } from "#sdk/cli/defaults.js";
import { UsageError } from "#sdk/cli/output.js";
import { PrepareResult } from "#sdk/client/coordination.js";
import { captureKey, episodeId } from "#sdk/identity/episode-id.js";
import { CheckpointIdSchema, type PrepareReply } from "#sdk/wire/control.js";

const temp = mkdtempSync(path.join(tmpdir(), "gym-ckpt-scope-"));
afterAll(() => rmSync(temp, { recursive: true, force: true }));

function reply(restarts: string[] = []): PrepareReply {
  return {
    phase: "prepared",
    report: { ready: true, blockers: [], blocker_count: 0, counts: {}, restarts },
  };
}

const keys = (episodes: readonly { rollout_id: string; attempt: number }[] | null) =>
  episodes === null ? null : episodes.map((e) => captureKey(e as never));

describe("the commit scope", () => {
  const clean = new PrepareResult(true, { env: reply(), res: reply() });
  const withRestarts = new PrepareResult(true, { env: reply(), agent: reply(["b-a1"]) });
  const inFlight = [episodeId("a"), episodeId("b", 1), episodeId("c")];

  it("is null (everything held) with --scope all", () => {
    expect(commitScope("x", withRestarts, "all", null)).toBeNull();
  });

  it("is null for continued when the prepare reported no restarts", () => {
    expect(commitScope("x", clean, "continued", null)).toBeNull();
  });

  it("is the named episodes minus the restarts when an episodes list is given", () => {
    expect(keys(commitScope("x", withRestarts, "continued", inFlight))).toEqual(["a", "c"]);
    expect(keys(commitScope("x", clean, "continued", inFlight))).toEqual(["a", "b-a1", "c"]);
  });

  it("needs the episodes when the prepare reported restarts", () => {
    try {
      commitScope("ckpt-9", withRestarts, "continued", null);
      expect.unreachable();
    } catch (error) {
      expect(error).toBeInstanceOf(UsageError);
      expect((error as UsageError).message).toMatch(/ckpt-9 reported 1 restart\(s\) \(b-a1\)/);
      expect((error as UsageError).hint).toMatch(/--episodes FILE/);
    }
  });

  it("refuses --scope all with --episodes", () => {
    expect(() => commitScope("x", clean, "all", inFlight)).toThrow(/cannot be combined/);
  });
});

describe("episode lists", () => {
  it("reads capture keys one per line, skipping blanks and comments", () => {
    const file = path.join(temp, "episodes.txt");
    writeFileSync(file, "# in flight\ntask-1\n\n  task-2-a3  # restored twice\r\n");
    expect(readEpisodesFile(file).map(captureKey)).toEqual(["task-1", "task-2-a3"]);
  });

  it("names the line of a bad capture key", () => {
    const file = path.join(temp, "bad.txt");
    writeFileSync(file, "task-1\nbad key\n");
    expect(() => readEpisodesFile(file)).toThrow(UsageError);
    expect(() => readEpisodesFile(file)).toThrow(`${file}:2`);
  });

  it("refuses a missing file as bad usage", () => {
    expect(() => readEpisodesFile(path.join(temp, "none.txt"))).toThrow(UsageError);
  });

  it("parses comma lists of capture keys", () => {
    expect(parseCaptureKeys(splitList("r, r-a2,", "--episodes"), "--episodes")).toEqual([
      episodeId("r"),
      episodeId("r", 2),
    ]);
    expect(() => splitList(" , ", "--episodes")).toThrow(/at least one/);
    expect(() => parseCaptureKeys(["-x"], "--episodes")).toThrow(/not a capture key/);
  });
});

describe("fresh checkpoint IDs", () => {
  it("are ckpt-<UTC timestamp>-<4 hex> and valid checkpoint IDs", () => {
    const id = freshCheckpointId(new Date("2025-03-04T05:06:07.890Z"));
    expect(id).toMatch(/^ckpt-20250304T050607Z-[0-9a-f]{4}$/);
    expect(CheckpointIdSchema.safeParse(id).success).toBe(true);
    expect(freshCheckpointId()).not.toBe(freshCheckpointId());
  });
});
