/**
 * The failpoint registry: off by default, armed by name from a test or from `GYM_FAILPOINTS`,
 * raising errors shaped like the file system's own or killing the process outright; and every
 * listed point placed exactly once in the SDK's sources.
 */
import { readFileSync, readdirSync, statSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { afterEach, describe, expect, it } from "vitest";
import {
  FAILPOINT_ACTIONS,
  FAILPOINTS,
  armFromEnvironment,
  armedFailpoints,
  clearFailpoints,
  failpoint,
  parseFailpoints,
  setFailpoint,
} from "#sdk/util/failpoints.js";
import { runCommand } from "../../../demo/gym-process.js";

const SDK_SRC = fileURLToPath(new URL("../../../sdk/src", import.meta.url));
const REGISTRY = path.join(SDK_SRC, "util", "failpoints.ts");

afterEach(() => {
  clearFailpoints();
});

/** What `failpoint(name)` threw, or null. */
function thrownBy(name: (typeof FAILPOINTS)[number]): NodeJS.ErrnoException | null {
  try {
    failpoint(name);
    return null;
  } catch (error) {
    return error as NodeJS.ErrnoException;
  }
}

describe("in a test", () => {
  it("nothing is armed by default, and an unarmed point does nothing", () => {
    expect(armedFailpoints().size).toBe(0);
    for (const name of FAILPOINTS) expect(thrownBy(name)).toBeNull();
  });

  it.each([
    ["eio", "EIO", -5],
    ["enospc", "ENOSPC", -28],
    ["eacces", "EACCES", -13],
    ["erofs", "EROFS", -30],
  ] as const)("%s throws an Error with code %s and errno %d, like fs", (action, code, errno) => {
    setFailpoint("commit.rename", action);
    const error = thrownBy("commit.rename");
    expect(error).toBeInstanceOf(Error);
    expect(error).toMatchObject({ code, errno, syscall: "commit.rename" });
    expect(error?.message).toContain("failpoint commit.rename");
    // Only the armed point fires.
    expect(thrownBy("commit.link")).toBeNull();
  });

  it("fires on every pass until disarmed; `after` lets the first passes through", () => {
    setFailpoint("restore.read", "eio", { after: 2 });
    expect(thrownBy("restore.read")).toBeNull();
    expect(thrownBy("restore.read")).toBeNull();
    expect(thrownBy("restore.read")?.code).toBe("EIO");
    expect(thrownBy("restore.read")?.code).toBe("EIO");
    setFailpoint("restore.read", null);
    expect(thrownBy("restore.read")).toBeNull();
  });

  it("refuses unknown names, actions and counts", () => {
    expect(() => setFailpoint("commit.nowhere" as never, "eio")).toThrow(RangeError);
    expect(() => setFailpoint("commit.rename", "explode" as never)).toThrow(/known: crash, eio/);
    expect(() => setFailpoint("commit.rename", "eio", { after: -1 })).toThrow(RangeError);
  });
});

describe("GYM_FAILPOINTS", () => {
  it("parses name=action and name=action@N (fire from the N-th pass)", () => {
    expect(parseFailpoints(" commit.records.fsync=eio , restore.install=crash@2,")).toEqual([
      { name: "commit.records.fsync", action: "eio", after: 0 },
      { name: "restore.install", action: "crash", after: 1 },
    ]);
    armFromEnvironment({ GYM_FAILPOINTS: "commit.link=enospc@3" });
    expect(armedFailpoints()).toEqual(new Map([["commit.link", "enospc"]]));
    expect(thrownBy("commit.link")).toBeNull();
    expect(thrownBy("commit.link")).toBeNull();
    expect(thrownBy("commit.link")?.code).toBe("ENOSPC");
  });

  it.each([
    ["commit.nowhere=eio", /unknown failpoint "commit.nowhere" \(known: commit.records.written/],
    ["commit.link=explode", /unknown action "explode" \(known: crash, eio/],
    ["commit.link", /is not name=action/],
    ["commit.link=eio@0", /is not name=action/],
  ])("refuses %j naming what is known", (text, message) => {
    expect(() => parseFailpoints(text)).toThrow(message);
  });

  it("an unset or empty variable arms nothing", () => {
    armFromEnvironment({});
    armFromEnvironment({ GYM_FAILPOINTS: "" });
    expect(armedFailpoints().size).toBe(0);
  });

  const script = (body: string): string[] => [
    "--import",
    "tsx",
    "--input-type=module",
    "-e",
    `import { failpoint } from ${JSON.stringify(REGISTRY)};\n${body}`,
  ];

  it("crash kills the process with SIGKILL at once: no finally, no exit handler", async () => {
    const done = await runCommand(
      process.execPath,
      script(
        'process.on("exit", () => console.log("exit handler ran"));\n' +
          'console.log("before");\n' +
          'try { failpoint("commit.link"); console.log("after"); } finally { console.log("finally ran"); }',
      ),
      { env: { ...process.env, GYM_FAILPOINTS: "commit.link=crash" }, timeoutMs: 30_000 },
    );
    expect(done.signal).toBe("SIGKILL");
    expect(done.stdout.trim().split("\n")).toEqual(["before"]);
  });

  it("a process started with an unknown failpoint fails at start, naming it", async () => {
    const done = await runCommand(process.execPath, script('console.log("started");'), {
      env: { ...process.env, GYM_FAILPOINTS: "restore.nowhere=crash" },
      timeoutMs: 30_000,
    });
    expect(done.code).not.toBe(0);
    expect(done.stdout).not.toContain("started");
    expect(done.stderr).toContain('unknown failpoint "restore.nowhere"');
  });
});

/** Every `.ts` file under `dir`. */
function sources(dir: string): string[] {
  return readdirSync(dir).flatMap((entry) => {
    const file = path.join(dir, entry);
    if (statSync(file).isDirectory()) return sources(file);
    return file.endsWith(".ts") ? [file] : [];
  });
}

describe("placement", () => {
  it("every listed point is reached from exactly one place in the SDK", () => {
    const calls = new Map<string, string[]>();
    for (const file of sources(SDK_SRC)) {
      if (file === REGISTRY) continue;
      const text = readFileSync(file, "utf8");
      for (const match of text.matchAll(/\bfailpoint\("([a-z.]+)"\)/g)) {
        const name = match[1] as string;
        calls.set(name, [...(calls.get(name) ?? []), path.relative(SDK_SRC, file)]);
      }
    }
    expect([...calls.keys()].sort()).toEqual([...FAILPOINTS].sort());
    for (const [name, files] of calls) expect(files, name).toHaveLength(1);
  });

  it("every action is listed once", () => {
    expect(new Set(FAILPOINT_ACTIONS).size).toBe(FAILPOINT_ACTIONS.length);
  });
});
