/**
 * A rollout ID has no maximum length: a policy model server captures, commits,
 * restores, retires and forgets a 300-character rollout exactly like a short one, and its ledger
 * and token store hold it under file names that fit the file system.
 */
import { afterEach, describe, expect, it } from "vitest";
import { MAX_FILE_NAME_BYTES, captureFileName } from "#sdk/capture/ledger/files.js";
import {
  ANSWER,
  TOOLS,
  WEATHER_SCRIPT,
  cleanup,
  commit,
  control,
  crash,
  echo,
  ep,
  exists,
  fakeCalls,
  firstInput,
  ledgerControl,
  ledgerFiles,
  prepare,
  replyText,
  respond,
  restore,
  resume,
  setScript,
  startFake,
  startPolicy,
  tempDir,
  type ResponseBody,
} from "../../support/policy-harness.js";
import path from "node:path";

afterEach(cleanup);

const LONG = `r${"x".repeat(299)}`;

async function setup() {
  const fake = await startFake();
  await setScript(fake, WEATHER_SCRIPT);
  const captureDir = await tempDir();
  const policy = await startPolicy(fake, { captureDir });
  return { fake, policy, captureDir };
}

describe("a 300-character rollout ID on the policy model server", () => {
  it("is captured, committed, restored as the next attempt, and continues its lineage", async () => {
    const { fake, policy, captureDir } = await setup();
    const input1 = firstInput();
    const first = await respond(policy.url, LONG, { input: input1, tools: TOOLS });
    expect(first.status, JSON.stringify(first.body)).toBe(200);
    expect((await fakeCalls(fake)).map((call) => call.capture)).toEqual(["staged"]);

    await prepare(policy.url, "c1");
    const { dir, body, records } = await commit(policy, "c1", [LONG]);
    expect(body.episode_ids).toEqual([LONG]);
    expect(records.map((record) => record.rows.length)).toEqual([1]);
    await resume(policy.url, "c1");
    await crash(policy);

    const replacement = await startPolicy(fake, { captureDir });
    const restored = await restore(replacement, "c1", dir, [LONG]);
    expect(restored.status, JSON.stringify(restored.body)).toBe(200);
    expect(restored.body.restored).toEqual([`${LONG}-a1`]);
    await resume(replacement.url, "c1");

    // The replacement's next turn resolves its parent from the imported rows.
    const input2 = echo(input1, first.body as ResponseBody);
    const second = await respond(replacement.url, `${LONG}-a1`, { input: input2, tools: TOOLS });
    expect(second.status, JSON.stringify(second.body)).toBe(200);
    expect(replyText(second.body as ResponseBody)).toBe(ANSWER);
    const manifest = await ledgerControl(
      replacement.url,
      "get",
      `/rollouts/${LONG}-a1/manifest`,
    ).expect(200);
    const calls = manifest.body.records as { parent_call_id: string | null }[];
    expect(calls).toHaveLength(2);
    expect(calls[1]?.parent_call_id).toBe((await fakeCalls(fake))[0]?.model_call_id);

    for (const name of await ledgerFiles(captureDir)) {
      expect(Buffer.byteLength(name)).toBeLessThanOrEqual(MAX_FILE_NAME_BYTES);
    }
  });

  it("is retired (fenced, later calls refused) and forgotten", async () => {
    const { policy, captureDir } = await setup();
    await respond(policy.url, LONG, { input: firstInput() }).expect(200);

    const retired = await control(policy.url, "retire", {
      checkpoint_id: "retire-1",
      episode_ids: [ep(LONG)],
    });
    expect(retired.status, JSON.stringify(retired.body)).toBe(200);
    expect(await exists(path.join(captureDir, captureFileName(LONG, "fence")))).toBe(true);
    const refused = await respond(policy.url, LONG, { input: firstInput() });
    expect(refused.status).toBe(409);
    expect(refused.body.error.code).toBe("stale_attempt");

    const forgotten = await control(policy.url, "forget", {
      checkpoint_id: "forget-1",
      rollout_ids: [LONG],
    });
    expect(forgotten.status, JSON.stringify(forgotten.body)).toBe(200);
    // The ledger control routes take the long key too.
    const deleted = await ledgerControl(policy.url, "post", "/rollouts/delete", {
      rollout_ids: [LONG],
    });
    expect(deleted.status, JSON.stringify(deleted.body)).toBe(200);
    expect(await ledgerFiles(captureDir)).toEqual([]);
    await respond(policy.url, LONG, { input: firstInput() }).expect(200);
  });
});
