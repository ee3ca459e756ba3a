/**
 * I/O errors injected at every failpoint of the capture ledger's import, through a policy model
 * server's restore (in process, in front of the fake inference backend): the restore is a typed
 * 409 with nothing installed, and once the fault is cleared the same restore succeeds and the
 * checkpointed attempt is fenced in the capture directory.
 */
import path from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { CaptureLedger } from "#sdk/capture/ledger/capture-ledger.js";
import { RolloutRetiredError } from "#sdk/capture/ledger/errors.js";
import { ERROR_CATALOGUE } from "#sdk/errors.js";
import {
  FAILPOINTS,
  clearFailpoints,
  setFailpoint,
  type FailpointAction,
  type FailpointName,
} from "#sdk/util/failpoints.js";
import {
  cleanup,
  commit,
  crash,
  ledgerFiles,
  prepare,
  restore,
  startFake,
  startPolicy,
  status,
  tempDir,
} from "../../support/policy-harness.js";

const LEDGER_POINTS = FAILPOINTS.filter((point) => point.startsWith("ledger.import."));
const IO_ACTIONS: readonly FailpointAction[] = ["eio", "enospc", "eacces"];

afterEach(async () => {
  clearFailpoints();
  await cleanup();
});

describe("ledger import", () => {
  const cases = LEDGER_POINTS.flatMap((point) => IO_ACTIONS.map((action) => [point, action]));

  it.each(cases)(
    "%s=%s refuses the restore with a typed 409, installs nothing, and a retry restores",
    async (point, action) => {
      const fake = await startFake();
      const captureDir = path.join(await tempDir(), "capture");
      const policy = await startPolicy(fake, { captureDir });
      await prepare(policy.url, "c1");
      const { dir } = await commit(policy, "c1", ["r"]);
      await crash(policy);

      const fresh = await startPolicy(fake, { captureDir });
      setFailpoint(point as FailpointName, action as FailpointAction);
      const refused = await restore(fresh, "c2", dir, ["r"]);
      expect(refused.status, JSON.stringify(refused.body)).toBe(409);
      expect(Object.keys(ERROR_CATALOGUE)).toContain(refused.body.error.code);
      expect(refused.body.error.detail).toContain((action as string).toUpperCase());
      const after = await status(fresh.url);
      expect(after.phase).toBe("idle");
      expect(after.restored_generation_cuts).toEqual([]);
      expect(fresh.server.participant?.restoredPending()).toEqual([]);

      clearFailpoints();
      const retried = await restore(fresh, "c2", dir, ["r"]);
      expect(retried.status, JSON.stringify(retried.body)).toBe(200);
      // No model call ran, so no record: the scope's replacement is what the install took on.
      expect(fresh.server.participant?.restoredPending()).toEqual([
        { rollout_id: "r", attempt: 1 },
      ]);
      // Fenced durably: a process opening the directory now (as after a crash) finds it retired,
      // whether the fence is a file yet or still in the restore's fence list.
      await expect(new CaptureLedger(captureDir).hasRows("r")).rejects.toBeInstanceOf(
        RolloutRetiredError,
      );
      expect(await ledgerFiles(captureDir)).toContain("r.lineage.retired");
    },
  );
});
