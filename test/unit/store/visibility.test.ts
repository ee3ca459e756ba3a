/**
 * What a machine sees of a participant's committed state (the controller's check that a
 * checkpoint directory is shared), the host a manifest records, and the restore's refusals
 * that name the machine and the writer's host when state is missing here.
 */
import { rm, truncate, unlink, writeFile } from "node:fs/promises";
import { hostname } from "node:os";
import path from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { CheckpointNotSharedError, CheckpointStateError, GymError } from "#sdk/errors.js";
import { stateHere } from "#sdk/store/visibility.js";
import {
  INSTANCE,
  KIND,
  expectStateError,
  makeTempDir,
  pdirOf,
  read,
  rec,
  removeTempDir,
  writer,
} from "./helpers.js";

let dir: string;

beforeEach(async () => {
  dir = await makeTempDir();
});

afterEach(async () => {
  await removeTempDir(dir);
});

const location = () => ({ checkpointDir: dir, kind: KIND, instance: INSTANCE });

describe("the host a manifest records", () => {
  it("is written when given, and a participant's own `host` extra wins", async () => {
    expect(await writer(dir, { host: "gpu-node-1" }).write([rec("r")])).toMatchObject({
      host: "gpu-node-1",
    });
    const other = await makeTempDir();
    try {
      const manifest = await writer(other, {
        host: "gpu-node-1",
        manifestExtra: { host: "mine" },
      }).write([]);
      expect(manifest.host).toBe("mine");
    } finally {
      await removeTempDir(other);
    }
  });

  it("is absent when not given", async () => {
    expect(await writer(dir).write([])).not.toHaveProperty("host");
  });
});

describe("stateHere", () => {
  it("finds whole state whole, and names what is missing or different", async () => {
    const manifest = await writer(dir, { host: "h" }).write([rec("r")]);
    const pdir = pdirOf(dir);
    expect(await stateHere(location(), manifest)).toMatchObject({ path: pdir, problem: null });
    expect((await stateHere(location(), { ...manifest, checkpoint_id: "other" })).problem).toBe(
      'its manifest.json is another commit\'s (checkpoint "ckpt-1")',
    );

    await truncate(path.join(pdir, manifest.records_file));
    expect((await stateHere(location(), manifest)).problem).toBe(
      `its records file ${manifest.records_file} is empty`,
    );
    await unlink(path.join(pdir, manifest.records_file));
    expect((await stateHere(location(), manifest)).problem).toBe(
      `its manifest is there but not its records file ${manifest.records_file}`,
    );
    await writeFile(path.join(pdir, "manifest.json"), '{"schema_version": 1, "ki');
    expect((await stateHere(location(), manifest)).problem).toBe(
      "its manifest.json is not whole (not JSON)",
    );
    await unlink(path.join(pdir, "manifest.json"));
    expect((await stateHere(location(), manifest)).problem).toBe(
      "its directory holds no manifest.json",
    );
    await rm(path.join(dir, "gym"), { recursive: true });
    expect((await stateHere(location(), manifest)).problem).toBe("it is not there");
    // Without an expected manifest (before a restore) only presence is checked.
    expect((await stateHere(location(), null)).problem).toBe("it is not there");
  });
});

describe("a restore that finds state missing on this machine", () => {
  it("names the manifest's path and this machine when the directory is not there", async () => {
    const error = await expectStateError(
      read(dir),
      `missing manifest ${path.join(pdirOf(dir), "manifest.json")}`,
      `on this machine (${hostname()})`,
      `(${pdirOf(dir)} is not there)`,
      "not a node-local disk",
    );
    expect(error.captureKey).toBeNull();
  });

  it("names the host that wrote the manifest when its records file is not here", async () => {
    const manifest = await writer(dir, { host: "gpu-node-1" }).write([rec("r")]);
    await unlink(path.join(pdirOf(dir), manifest.records_file));
    await expectStateError(
      read(dir),
      `cannot read checkpoint state ${path.join(pdirOf(dir), manifest.records_file)}`,
      `its manifest was written on host gpu-node-1, this is ${hostname()}`,
    );
  });
});

describe("CheckpointNotSharedError", () => {
  it("is a typed invalid_checkpoint_state naming every server, path and writer host", () => {
    const error = new CheckpointNotSharedError(
      "commit",
      [
        {
          server: "policy",
          path: "/ckpt/c-3/gym/model/policy",
          host: "gpu-node-1",
          address: "127.0.0.2",
          problem: "it is not there",
        },
        {
          server: "env",
          path: "/ckpt/c-3/gym/environment/env",
          host: null,
          address: null,
          problem: "it is not there",
        },
      ],
      "login-1",
    );
    expect(error).toBeInstanceOf(CheckpointNotSharedError);
    expect(error).toBeInstanceOf(CheckpointStateError);
    expect(error).toBeInstanceOf(GymError);
    expect(error.name).toBe("CheckpointNotSharedError");
    expect(error.code).toBe("invalid_checkpoint_state");
    expect(error.status).toBe(422);
    expect(error.message).toBe(
      "policy wrote /ckpt/c-3/gym/model/policy on host gpu-node-1 (127.0.0.2), but it is not " +
        "there on this machine (login-1); env wrote /ckpt/c-3/gym/environment/env, but it is " +
        "not there on this machine (login-1): the checkpoint directory must be on a file " +
        "system every machine shares (NFS, Lustre, CephFS), not a node-local disk",
    );
  });
});
