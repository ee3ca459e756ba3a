/**
 * How `gym` was invoked decides the prefix of every command its hints print: one case per rule
 * of `invokedAs`, the order they are tried in, and what `processIo` and `commandOf` make of it.
 */
import { describe, expect, it } from "vitest";
import { invokedAs } from "#sdk/cli/invocation.js";
import { commandOf, processIo } from "#sdk/cli/output.js";

const CHECKOUT_MAIN = "/work/repo/sdk/src/cli/main.ts";
const PROJECT_BIN = "/home/u/project/node_modules/.bin/gym";

describe("invokedAs", () => {
  it("is `npm run gym --` under the npm script named gym", () => {
    expect(invokedAs({ npm_lifecycle_event: "gym" }, CHECKOUT_MAIN)).toBe("npm run gym --");
  });

  it("prefers the gym npm script to an executable under node_modules", () => {
    // A project's own `"gym": "gym"` script runs node_modules/.bin/gym.
    expect(invokedAs({ npm_lifecycle_event: "gym" }, PROJECT_BIN)).toBe("npm run gym --");
  });

  it.each([
    PROJECT_BIN,
    "/home/u/project/node_modules/gym-participant-sdk/dist/cli/main.js",
    "/home/u/.npm/_npx/1a2b/node_modules/.bin/gym",
    "C:\\Users\\u\\project\\node_modules\\gym-participant-sdk\\dist\\cli\\main.js",
  ])("is `npx gym` when the executable lies under node_modules: %s", (argv1) => {
    expect(invokedAs({}, argv1)).toBe("npx gym");
  });

  it("is `npx gym` for a checkout's committed bin run by its path (npm links it)", () => {
    expect(invokedAs({}, "/home/u/gym-participant-sdk/sdk/bin/gym.js")).toBe("npx gym");
  });

  it.each(["checkpoint", "npx"])(
    "is `npx gym` under any other npm script (npm_lifecycle_event %s)",
    (event) => {
      expect(invokedAs({ npm_lifecycle_event: event }, "/usr/local/bin/gym")).toBe("npx gym");
    },
  );

  it.each([
    ["npm run openapi in a checkout", { npm_lifecycle_event: "openapi" }],
    ["npx tsx in a checkout", { npm_lifecycle_event: "npx" }],
    ["tsx run by hand in a checkout", {}],
  ])("is `npm run gym --` when the source entry runs: %s", (_case, env) => {
    expect(invokedAs(env, "/work/repo/sdk/src/cli/main.ts")).toBe("npm run gym --");
    expect(invokedAs(env, "C:\\repo\\sdk\\src\\cli\\main.ts")).toBe("npm run gym --");
  });

  it.each([
    ["a global install", "/usr/local/bin/gym"],
    ["a path named like node_modules, not a node_modules segment", "/srv/my_node_modules/gym"],
    ["the built executable run by its path", "/work/repo/sdk/dist/cli/main.js"],
    ["no script at all", undefined],
  ])("is a bare `gym` otherwise: %s", (_case, argv1) => {
    expect(invokedAs({}, argv1)).toBe("gym");
  });

  it("reads an empty npm_lifecycle_event as unset", () => {
    expect(invokedAs({ npm_lifecycle_event: "" }, "/usr/local/bin/gym")).toBe("gym");
  });
});

describe("the command an Io carries", () => {
  it("processIo decides it from this process's environment and argv[1]", () => {
    expect(processIo().command).toBe(invokedAs(process.env, process.argv[1]));
  });

  it("is `gym` when an in-process Io does not say", () => {
    expect(commandOf({})).toBe("gym");
    expect(commandOf({ command: "npx gym" })).toBe("npx gym");
  });
});
