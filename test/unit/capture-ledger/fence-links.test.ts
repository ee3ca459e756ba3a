/**
 * Fences as hard links when the file system refuses a link: an inode at its link limit
 * (`EMLINK`), or a file system without hard links (`EPERM`). `node:fs` is wrapped so `linkSync`
 * fails on demand; the files are real, in a real temporary directory.
 */
import { readFileSync, statSync } from "node:fs";
import path from "node:path";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { EmptyFileBatch } from "../../../sdk/src/capture/ledger/file-batch.js";
import { makeTempDir, removeTempDir } from "./helpers.js";

const linkHooks = vi.hoisted(() => ({
  /** The error code the next links fail with, or null. */
  failWith: null as string | null,
  failures: 0,
}));

vi.mock("node:fs", async (importOriginal) => {
  const actual = await importOriginal<typeof import("node:fs")>();
  const linkSync: typeof actual.linkSync = (existing, newPath) => {
    if (linkHooks.failWith !== null) {
      linkHooks.failures += 1;
      throw Object.assign(new Error(`${linkHooks.failWith}: injected`), {
        code: linkHooks.failWith,
      });
    }
    actual.linkSync(existing, newPath);
  };
  const wrapped = { ...actual, linkSync };
  return { ...wrapped, default: wrapped };
});

let dir: string;
beforeEach(async () => {
  dir = await makeTempDir();
  linkHooks.failWith = null;
  linkHooks.failures = 0;
});
afterEach(async () => {
  await removeTempDir(dir);
});
const at = (name: string): string => path.join(dir, name);

describe("EmptyFileBatch when a link fails", () => {
  it.each(["EMLINK", "EPERM"])(
    "%s: the file is created on its own, empty, and links are tried again from it",
    (code) => {
      const batch = new EmptyFileBatch();
      batch.create(at("a"));
      linkHooks.failWith = code;

      expect(batch.create(at("b"))).toBe(true);
      expect(readFileSync(at("b"), "utf8")).toBe("");
      expect(statSync(at("b")).ino).not.toBe(statSync(at("a")).ino);
      expect(linkHooks.failures).toBe(1);

      linkHooks.failWith = null;
      expect(batch.create(at("c"))).toBe(true);
      expect(statSync(at("c")).ino).toBe(statSync(at("b")).ino);
    },
  );

  it("a link that fails because the fence exists reports it existing and creates nothing", () => {
    const batch = new EmptyFileBatch();
    batch.create(at("a"));
    batch.create(at("b"));

    expect(batch.create(at("b"))).toBe(false);
    expect(statSync(at("a")).nlink).toBe(2);
  });
});
