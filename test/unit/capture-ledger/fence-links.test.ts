/**
 * Fences as hard links when the file system refuses a link: an inode at its link limit
 * (`EMLINK`), or a file system without hard links (`EPERM`). `node:fs` is wrapped so `linkSync`
 * fails on demand; the files are real, in a real temporary directory.
 */
import { readFileSync, statSync } from "node:fs";
import path from "node:path";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { EmptyFileBatch, createFileSync } from "#sdk/capture/ledger/file-batch.js";
import { makeTempDir, removeTempDir } from "./helpers.js";

const linkHooks = vi.hoisted(() => ({
  /** The error code the next links fail with, or null. */
  failWith: null as string | null,
  failures: 0,
  /** The error code the next write to a file descriptor fails with, after half its text. */
  failWrite: null as string | null,
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
  const writeFileSync: typeof actual.writeFileSync = (file, data, options) => {
    if (linkHooks.failWrite !== null && typeof file === "number" && typeof data === "string") {
      actual.writeFileSync(file, data.slice(0, data.length / 2));
      throw Object.assign(new Error(`${linkHooks.failWrite}: injected`), {
        code: linkHooks.failWrite,
      });
    }
    actual.writeFileSync(file, data, options);
  };
  const wrapped = { ...actual, linkSync, writeFileSync };
  return { ...wrapped, default: wrapped };
});

let dir: string;
beforeEach(async () => {
  dir = await makeTempDir();
  linkHooks.failWith = null;
  linkHooks.failures = 0;
  linkHooks.failWrite = null;
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

describe("createFileSync when the write fails part-way", () => {
  it("removes the torn file, so the retry writes it whole", () => {
    linkHooks.failWrite = "ENOSPC";
    expect(() => createFileSync(at("t.lineage.jsonl"), '{"model_call_id":"c0"}\n')).toThrow(
      "ENOSPC",
    );
    expect(() => statSync(at("t.lineage.jsonl"))).toThrow();

    linkHooks.failWrite = null;
    expect(createFileSync(at("t.lineage.jsonl"), '{"model_call_id":"c0"}\n')).toBe(true);
    expect(readFileSync(at("t.lineage.jsonl"), "utf8")).toBe('{"model_call_id":"c0"}\n');
    expect(createFileSync(at("t.lineage.jsonl"), "other")).toBe(false);
  });
});
