/**
 * Generation cuts, commit, crash and restore (see docs/policy-model.md), with the policy
 * model server in front of the real fake inference backend. A "crash" closes the policy server
 * without resume; the fake backend (its token store) and the capture directory survive, and a
 * fresh policy server on the same directory restores.
 */
import path from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { episodeId } from "#sdk/identity/episode-id.js";
import { RecordsWriter } from "#sdk/store/records-writer.js";
import type { RecordBase } from "#sdk/wire/storage.js";
import {
  ANSWER,
  TOOLS,
  WEATHER_SCRIPT,
  cleanup,
  commit,
  control,
  crash,
  echo,
  exists,
  fakeCalls,
  fakeCuts,
  firstInput,
  hold,
  ledgerControl,
  ledgerFiles,
  ledgerRows,
  settleLedger,
  modelPath,
  openStream,
  POLL,
  prepare,
  release,
  replyText,
  respond,
  restore,
  resume,
  setScript,
  startFake,
  startPolicy,
  status,
  tempDir,
  track,
  type Fake,
  type Policy,
  type ResponseBody,
} from "../../support/policy-harness.js";

afterEach(cleanup);

const cutKeyOf = (key: string, modelCallId: string) => `__generation_cut__/${key}/${modelCallId}`;

/**
 * Rollout r's first call is delivered; its second (the agent's echo plus a tool output) is held
 * part-way in the fake. Answers what the tests need to go on.
 */
async function secondCallHeld(fake: Fake, policy: Policy) {
  const input1 = firstInput();
  const first = await respond(policy.url, "r", { input: input1, tools: TOOLS });
  expect(first.status, JSON.stringify(first.body)).toBe(200);
  const input2 = echo(input1, first.body as ResponseBody);
  await hold(fake, { after_calls_per_rollout: 1 });
  const held = track(respond(policy.url, "r", { input: input2, tools: TOOLS }));
  await fake.server.holds.whenBlocked(1);
  const calls = await fakeCalls(fake);
  const id1 = calls[0]?.model_call_id as string;
  const id2 = calls[1]?.model_call_id as string;
  return { input1, input2, held, id1, id2 };
}

/** Checkpoint c1 of rollout r with its second call cut, then a crash. */
async function checkpointThenCrash() {
  const fake = await startFake();
  await setScript(fake, WEATHER_SCRIPT);
  const captureDir = await tempDir();
  const first = await startPolicy(fake, { captureDir });
  const state = await secondCallHeld(fake, first);
  const prepared = await prepare(first.url, "c1");
  const committed = await commit(first, "c1", ["r"]);
  await crash(first);
  await state.held.value.then(
    () => undefined,
    () => undefined,
  );
  await release(fake); // lifts the hold: re-issued calls run through
  return { fake, captureDir, prepared, ...committed, ...state };
}

describe("the cut round at prepare", () => {
  it("cuts a held call: the fake lists it, prepare counts cut=1, and the commit carries the cut's staging keys", async () => {
    const fake = await startFake();
    await setScript(fake, WEATHER_SCRIPT);
    const captureDir = await tempDir();
    const policy = await startPolicy(fake, { captureDir });
    const { id1, id2, held } = await secondCallHeld(fake, policy);

    const prepared = await prepare(policy.url, "c1");
    expect(prepared.phase).toBe("prepared");
    expect(prepared.report).toMatchObject({
      ready: true,
      blockers: [],
      counts: { inflight: 1, held: 1, cut: 1, cut_failed: 0, cut_skipped: 0 },
    });
    expect(await fakeCuts(fake)).toEqual([[id2]]);
    // A cut never stops a generation: the call is still held in the fake.
    expect((await fakeCalls(fake))[1]).toMatchObject({ held: true, returned: false });

    const cutKey = cutKeyOf("r", id2);
    const { body, records } = await commit(policy, "c1", ["r"]);
    const expectedKeys = [cutKey, `r/${id1}`].sort();
    expect(body.episode_ids).toEqual(["r"]);
    expect(body.staging_keys).toEqual(expectedKeys);
    expect(body.staging_keys_by_episode).toEqual({ r: expectedKeys });
    expect(records).toHaveLength(1);
    const [record] = records;
    expect(record?.episode_id).toEqual({ rollout_id: "r", attempt: 0 });
    expect(record?.rows.map((row) => row.model_call_id)).toEqual([id1]);
    expect(record?.generation_cuts).toHaveLength(1);
    const cut = record?.generation_cuts[0];
    expect(cut?.model_call_id).toBe(id2);
    expect(cut?.continuation).toMatchObject({
      source_capture_key: "r",
      source_model_call_id: id2,
      staging_keys: [cutKey],
    });
    expect(cut?.continuation.prefix_token_count as number).toBeGreaterThan(0);

    await release(fake);
    await resume(policy.url, "c1");
    expect((await held.value).status).toBe(200);
  });

  it("never cuts a constrained-decoding call (cut_skipped), and cuts the others of the same round", async () => {
    const fake = await startFake();
    await setScript(fake, WEATHER_SCRIPT);
    const captureDir = await tempDir();
    const policy = await startPolicy(fake, { captureDir });
    await hold(fake, { after_calls: 0 });
    const forced = track(
      respond(policy.url, "f", { input: firstInput(), tools: TOOLS, tool_choice: "required" }),
    );
    const free = track(respond(policy.url, "g", { input: firstInput(), tools: TOOLS }));
    await fake.server.holds.whenBlocked(2);
    const byRollout = new Map((await fakeCalls(fake)).map((c) => [c.rollout, c.model_call_id]));

    const prepared = await prepare(policy.url, "c1");
    expect(prepared.report).toMatchObject({
      ready: true,
      counts: { inflight: 2, held: 2, cut: 1, cut_failed: 0, cut_skipped: 1 },
    });
    expect(await fakeCuts(fake)).toEqual([[byRollout.get("g")]]);
    const { records } = await commit(policy, "c1", ["f", "g"]);
    expect(records.map((r) => [r.episode_id.rollout_id, r.generation_cuts.length])).toEqual([
      ["g", 1],
    ]);

    await release(fake);
    await resume(policy.url, "c1");
    expect((await forced.value).status).toBe(200);
    expect((await free.value).status).toBe(200);
  });

  it("a cut the backend refuses only costs regeneration: cut_failed=1, prepare ready, no cut in the commit", async () => {
    const fake = await startFake({ controlToken: "another-token" });
    await setScript(fake, WEATHER_SCRIPT);
    const captureDir = await tempDir();
    const policy = await startPolicy(fake, { captureDir });
    const { id1, held } = await secondCallHeld(fake, policy);
    const prepared = await prepare(policy.url, "c1");
    expect(prepared.phase).toBe("prepared");
    expect(prepared.report).toMatchObject({
      ready: true,
      counts: { inflight: 1, held: 1, cut: 0, cut_failed: 1, cut_skipped: 0 },
    });
    expect(await fakeCuts(fake)).toEqual([]);
    const { body, records } = await commit(policy, "c1", ["r"]);
    expect(records[0]?.generation_cuts).toEqual([]);
    expect(body.staging_keys).toEqual([`r/${id1}`]);
    await release(fake);
    await resume(policy.url, "c1");
    expect((await held.value).status).toBe(200);
  });
});

describe("commit scope", () => {
  it("a commit without episode_ids is refused with 409 checkpoint_error", async () => {
    const fake = await startFake();
    await setScript(fake, WEATHER_SCRIPT);
    const policy = await startPolicy(fake, { captureDir: await tempDir() });
    await respond(policy.url, "r", { input: firstInput() }).expect(200);
    await prepare(policy.url, "c1");
    const refused = await control(policy.url, "commit", {
      checkpoint_id: "c1",
      checkpoint_dir: await tempDir(),
    });
    expect(refused.status, JSON.stringify(refused.body)).toBe(409);
    expect(refused.body.error.code).toBe("checkpoint_error");
    expect(refused.body.error.detail).toMatch(/episode_ids/);
    // A refusal is not stored: the same checkpoint commits once the scope is given.
    const { records } = await commit(policy, "c1", ["r"]);
    expect(records.map((r) => r.episode_id.rollout_id)).toEqual(["r"]);
  });
});

describe("one cut per episode", () => {
  it("of two undelivered calls of one attempt, the commit keeps the cut of the one admitted last", async () => {
    const fake = await startFake();
    await setScript(fake, WEATHER_SCRIPT);
    const captureDir = await tempDir();
    const policy = await startPolicy(fake, { captureDir });
    const gate = policy.server.participant?.gate;
    await hold(fake, { after_calls: 0 });
    const older = track(respond(policy.url, "r", { input: firstInput(), tools: TOOLS }));
    await fake.server.holds.whenBlocked(1);
    // The clock moves on before the retry is admitted (admission times are compared).
    const firstAdmitted = Math.max(...[...(gate?.tickets ?? [])].map((t) => t.admittedAt));
    await expect.poll(() => Date.now() / 1000 > firstAdmitted, POLL).toBe(true);
    const retry = [...firstInput(), { type: "message", role: "user", content: "please hurry" }];
    const newer = track(respond(policy.url, "r", { input: retry, tools: TOOLS }));
    await fake.server.holds.whenBlocked(2);
    const [oldId, newId] = (await fakeCalls(fake)).map((c) => c.model_call_id as string);

    const prepared = await prepare(policy.url, "c1");
    expect(prepared.report.counts).toMatchObject({ inflight: 2, held: 2, cut: 2 });
    expect((await fakeCuts(fake)).map((round) => [...round].sort())).toEqual([
      [oldId, newId].sort(),
    ]);
    const { body, records } = await commit(policy, "c1", ["r"]);
    expect(records[0]?.generation_cuts.map((c) => c.model_call_id)).toEqual([newId]);
    expect(body.staging_keys).toEqual([cutKeyOf("r", newId as string)]);

    await release(fake);
    await resume(policy.url, "c1");
    expect((await older.value).status).toBe(200);
    expect((await newer.value).status).toBe(200);
  });
});

describe("crash and restore", () => {
  it("a fresh server restores the rows and the cut; the re-issued call continues the prefix and answers as an uncut call", async () => {
    const { fake, captureDir, dir, records, prepared, input1, input2, id1, id2 } =
      await checkpointThenCrash();
    expect(prepared.report.counts).toMatchObject({ cut: 1 });
    const checkpointed = records[0]?.rows ?? [];
    const cut = records[0]?.generation_cuts[0];

    const fresh = await startPolicy(fake, { captureDir });
    const restored = await restore(fresh, "c2", dir, ["r"]);
    expect(restored.status, JSON.stringify(restored.body)).toBe(200);
    expect(restored.body).toMatchObject({ phase: "restored", restored: ["r-a1"] });
    await settleLedger(fresh);

    // r's rows now live under r-a1, stamped with the key they were staged under; r is retired.
    const imported = (await ledgerRows(captureDir, "r-a1")) ?? [];
    expect(imported).toEqual(checkpointed.map((row) => ({ ...row, capture_key: "r" })));
    expect(await ledgerRows(captureDir, "r")).toBeNull();
    expect(await exists(path.join(captureDir, "r.lineage.retired"))).toBe(true);
    expect(await exists(path.join(captureDir, "r-a1.lineage.retired"))).toBe(false);
    expect((await status(fresh.url)).restored_generation_cuts).toEqual(["r-a1"]);
    // Admission stays closed until resume: the ledger routes refuse to retire or delete.
    const busy = await ledgerControl(fresh.url, "post", "/rollouts/delete", {
      rollout_ids: ["zz"],
    });
    expect(busy.status).toBe(409);
    // Attempt r is retired on the restored server.
    const stale = await respond(fresh.url, "r", { input: input2, tools: TOOLS });
    expect(stale.status).toBe(409);
    expect(stale.body.error.code).toBe("stale_attempt");

    await resume(fresh.url, "c2");
    const reissued = await respond(fresh.url, "r-a1", { input: input2, tools: TOOLS });
    expect(reissued.status, JSON.stringify(reissued.body)).toBe(200);
    const calls = await fakeCalls(fake);
    const continued = calls.at(-1);
    expect(continued).toMatchObject({
      rollout: "r-a1",
      continued_from: id2,
      capture: "staged",
      returned: true,
    });
    expect(continued?.reused_prefix_tokens).toBeGreaterThan(0);
    expect(continued?.reused_prefix_tokens).toBe(cut?.continuation.prefix_token_count);

    // What an uncut call of the same conversation answers, on the same backend.
    const ref1 = await respond(fresh.url, "ref", { input: input1, tools: TOOLS }).expect(200);
    const ref2 = await respond(fresh.url, "ref", {
      input: echo(input1, ref1.body as ResponseBody),
      tools: TOOLS,
    }).expect(200);
    expect((await fakeCalls(fake)).at(-1)).toMatchObject({ continued_from: null });
    expect(replyText(reissued.body as ResponseBody)).toBe(replyText(ref2.body as ResponseBody));
    expect(replyText(reissued.body as ResponseBody)).toBe(ANSWER);

    // Lineage continues by fingerprint: the replacement's call is a child of the carried-over one.
    const manifest = await ledgerControl(fresh.url, "get", "/rollouts/r-a1/manifest");
    expect(manifest.status, JSON.stringify(manifest.body)).toBe(200);
    const rows = manifest.body.records as Record<string, unknown>[];
    expect(rows.map((r) => [r.model_call_id, r.parent_call_id, r.capture_key])).toEqual([
      [id1, null, "r"],
      [continued?.model_call_id, id1, null],
    ]);
    expect(rows[1]).toMatchObject({ mode: "token_in", prev_len: rows[0]?.cum_len });
    expect((await ledgerControl(fresh.url, "get", "/rollouts/r/manifest")).status).toBe(410);
    expect(await ledgerFiles(captureDir)).toContain("r-a1.lineage.started");
    // Consumed once its response started.
    expect((await status(fresh.url)).restored_generation_cuts).toEqual([]);
  });

  it.each([
    ["an untagged call", null],
    ["a call of another rollout", "q"],
  ])(
    "restore into a server that has served %s is refused with 409 checkpoint_error, writing nothing",
    async (_what, key) => {
      const { fake, captureDir, dir } = await checkpointThenCrash();
      const before = await ledgerFiles(captureDir);
      const used = await startPolicy(fake, { captureDir: await tempDir() });
      await respond(used.url, key, { input: firstInput() }).expect(200);
      const usedFiles = await ledgerFiles(used.captureDir as string);

      const refused = await restore(used, "c2", dir, ["r"]);
      expect(refused.status, JSON.stringify(refused.body)).toBe(409);
      expect(refused.body.error.code).toBe("checkpoint_error");
      expect(await ledgerFiles(used.captureDir as string)).toEqual(usedFiles);
      expect(await ledgerFiles(captureDir)).toEqual(before);
      expect((await status(used.url)).phase).toBe("idle");
      expect((await status(used.url)).restored_generation_cuts).toEqual([]);
      // Same capture directory: refused just the same, and the checkpointed episode untouched.
      const shared = await startPolicy(fake, { captureDir, name: "policy" });
      await respond(shared.url, key, { input: firstInput() }).expect(200);
      const refusedToo = await restore(shared, "c3", dir, ["r"]);
      expect(refusedToo.status).toBe(409);
      expect(refusedToo.body.error.code).toBe("checkpoint_error");
      expect(await ledgerRows(captureDir, "r-a1")).toBeNull();
    },
  );

  it("a stored ledger row that is not an object is a 422 invalid_checkpoint_state naming the episode; nothing is imported", async () => {
    const fake = await startFake();
    const captureDir = await tempDir();
    const dir = await tempDir();
    // The store writes any JSON; the model's record schema is what refuses the row.
    const corrupt = {
      episode_id: episodeId("r"),
      rows: [{ model_call_id: "c1" }, 7],
      generation_cuts: [],
    };
    await new RecordsWriter({
      checkpointDir: dir,
      kind: "model",
      instance: "policy",
      checkpointId: "bad",
    }).write([corrupt as RecordBase]);
    const fresh = await startPolicy(fake, { captureDir });

    const refused = await restore(fresh, "bad", dir, ["r"]);

    expect(refused.status, JSON.stringify(refused.body)).toBe(422);
    expect(refused.body.error.code).toBe("invalid_checkpoint_state");
    expect(refused.body.error.detail).toMatch(/episode 'r'.*a ledger row is a JSON object/);
    expect(await ledgerFiles(captureDir)).toEqual([]);
  });

  it("restore into a server without a capture ledger is refused with 409 checkpoint_error", async () => {
    const { fake, dir } = await checkpointThenCrash();
    const bare = await startPolicy(fake, { captureDir: null });
    const refused = await restore(bare, "c2", dir, ["r"]);
    expect(refused.status, JSON.stringify(refused.body)).toBe(409);
    expect(refused.body.error.code).toBe("checkpoint_error");
    expect(refused.body.error.detail).toMatch(/capture ledger/);
  });

  it("restoring the same checkpoint again after the replacement made a call yields exactly the checkpointed rows", async () => {
    const { fake, captureDir, dir, records, input2 } = await checkpointThenCrash();
    const second = await startPolicy(fake, { captureDir });
    expect((await restore(second, "c2", dir, ["r"])).status).toBe(200);
    await resume(second.url, "c2");
    await respond(second.url, "r-a1", { input: input2, tools: TOOLS }).expect(200);
    expect(await ledgerRows(captureDir, "r-a1")).toHaveLength(2);
    expect(await ledgerFiles(captureDir)).toContain("r-a1.lineage.started");
    await crash(second);

    const third = await startPolicy(fake, { captureDir });
    const again = await restore(third, "c3", dir, ["r"]);
    expect(again.status, JSON.stringify(again.body)).toBe(200);
    await settleLedger(third);
    expect(await ledgerRows(captureDir, "r-a1")).toEqual(
      (records[0]?.rows ?? []).map((row) => ({ ...row, capture_key: "r" })),
    );
    expect(await ledgerFiles(captureDir)).not.toContain("r-a1.lineage.started");
    // The cut is held again and continues once more.
    await resume(third.url, "c3");
    await respond(third.url, "r-a1", { input: input2, tools: TOOLS }).expect(200);
    const last = (await fakeCalls(fake)).at(-1);
    expect(last?.reused_prefix_tokens).toBeGreaterThan(0);
  });

  it("an unclaimed restored cut is exported again by the next checkpoint, so a second crash still continues the prefix", async () => {
    const { fake, captureDir, dir, input2, id1, id2 } = await checkpointThenCrash();
    const second = await startPolicy(fake, { captureDir });
    expect((await restore(second, "c2", dir, ["r"])).status).toBe(200);
    await resume(second.url, "c2");

    // Nothing re-issued yet: the next checkpoint carries the restored cut for r-a1.
    await prepare(second.url, "c3");
    const { dir: dir3, body, records } = await commit(second, "c3", ["r-a1"]);
    const cutKey = cutKeyOf("r", id2);
    expect(body.episode_ids).toEqual(["r-a1"]);
    expect(body.staging_keys).toEqual([cutKey, `r/${id1}`].sort());
    expect(body.staging_keys_by_episode).toEqual({ "r-a1": [cutKey, `r/${id1}`].sort() });
    expect(records[0]?.generation_cuts.map((c) => c.model_call_id)).toEqual([id2]);
    expect(records[0]?.rows.map((row) => [row.model_call_id, row.capture_key])).toEqual([
      [id1, "r"],
    ]);
    await crash(second);

    const third = await startPolicy(fake, { captureDir });
    const restored = await restore(third, "c4", dir3, ["r-a1"]);
    expect(restored.status, JSON.stringify(restored.body)).toBe(200);
    expect(restored.body.restored).toEqual(["r-a2"]);
    expect((await status(third.url)).restored_generation_cuts).toEqual(["r-a2"]);
    // Attempts 0 and 1 are retired; the target is not.
    await settleLedger(third);
    const files = await ledgerFiles(captureDir);
    expect(files).toEqual(expect.arrayContaining(["r.lineage.retired", "r-a1.lineage.retired"]));
    expect(files).not.toContain("r-a2.lineage.retired");
    await resume(third.url, "c4");
    const reissued = await respond(third.url, "r-a2", { input: input2, tools: TOOLS });
    expect(reissued.status).toBe(200);
    expect(replyText(reissued.body as ResponseBody)).toBe(ANSWER);
    expect((await fakeCalls(fake)).at(-1)).toMatchObject({
      rollout: "r-a2",
      continued_from: id2,
      capture: "staged",
    });
    // A chain of restores keeps each row's original stamp.
    const manifest = await ledgerControl(third.url, "get", "/rollouts/r-a2/manifest").expect(200);
    expect((manifest.body.records as Record<string, unknown>[]).map((r) => r.capture_key)).toEqual([
      "r",
      null,
    ]);
  });

  it("a commit whose scope leaves out a restored attempt nothing started deletes its ledger without a fence; a started one is kept", async () => {
    const fake = await startFake();
    await setScript(fake, WEATHER_SCRIPT);
    const captureDir = await tempDir();
    const first = await startPolicy(fake, { captureDir });
    const replies = new Map<string, ResponseBody>();
    for (const key of ["r", "q"]) {
      const res = await respond(first.url, key, { input: firstInput(), tools: TOOLS }).expect(200);
      replies.set(key, res.body as ResponseBody);
    }
    await prepare(first.url, "c1");
    const { dir } = await commit(first, "c1", ["q", "r"]);
    await crash(first);

    const second = await startPolicy(fake, { captureDir });
    expect((await restore(second, "c2", dir, ["q", "r"])).status).toBe(200);
    await resume(second.url, "c2");
    // q's replacement starts; r's does not.
    const q2 = echo(firstInput(), replies.get("q") as ResponseBody);
    await respond(second.url, "q-a1", { input: q2, tools: TOOLS }).expect(200);
    expect(await ledgerRows(captureDir, "r-a1")).toHaveLength(1);

    await prepare(second.url, "c3");
    const { records } = await commit(second, "c3", []);
    expect(records).toEqual([]);
    // r-a1: deleted, not fenced (the controller may still run it); q-a1: left alone.
    expect(await ledgerRows(captureDir, "r-a1")).toBeNull();
    expect(await exists(path.join(captureDir, "r-a1.lineage.retired"))).toBe(false);
    expect(await ledgerRows(captureDir, "q-a1")).toHaveLength(2);
    expect(await exists(path.join(captureDir, "q-a1.lineage.retired"))).toBe(false);
    await resume(second.url, "c3");
    // The controller starts r over as attempt 1: it is served and captured afresh.
    await respond(second.url, "r-a1", { input: firstInput(), tools: TOOLS }).expect(200);
    expect((await ledgerRows(captureDir, "r-a1"))?.map((row) => row.mode)).toEqual(["text"]);
  });
});

describe("restored cuts", () => {
  it("are claimed only by a re-issued call with the same request digest and without constrained decoding", async () => {
    const { fake, captureDir, dir, input2, id2 } = await checkpointThenCrash();
    const fresh = await startPolicy(fake, { captureDir });
    expect((await restore(fresh, "c2", dir, ["r"])).status).toBe(200);
    await resume(fresh.url, "c2");

    // Constrained decoding never continues a cut.
    const forced = await respond(fresh.url, "r-a1", {
      input: input2,
      tools: TOOLS,
      tool_choice: "required",
    });
    expect(forced.status, JSON.stringify(forced.body)).toBe(200);
    expect((await fakeCalls(fake)).at(-1)).toMatchObject({ rollout: "r-a1", continued_from: null });
    expect((await status(fresh.url)).restored_generation_cuts).toEqual(["r-a1"]);

    // A differently rendered call of the same attempt does not get it either.
    const other = [...input2.slice(0, -1), { ...(input2.at(-1) as object), output: "rainy" }];
    const differs = await respond(fresh.url, "r-a1", { input: other, tools: TOOLS });
    expect(differs.status, JSON.stringify(differs.body)).toBe(200);
    expect((await fakeCalls(fake)).at(-1)).toMatchObject({ rollout: "r-a1", continued_from: null });
    expect((await status(fresh.url)).restored_generation_cuts).toEqual(["r-a1"]);

    const same = await respond(fresh.url, "r-a1", { input: input2, tools: TOOLS });
    expect(same.status).toBe(200);
    expect((await fakeCalls(fake)).at(-1)).toMatchObject({
      continued_from: id2,
      capture: "staged",
    });
    expect((await status(fresh.url)).restored_generation_cuts).toEqual([]);
  });

  it("a newer cut of the re-issued call replaces the restored cut: the commit exports it and a retry continues it", async () => {
    const { fake, captureDir, dir, input2, id1, id2 } = await checkpointThenCrash();
    const second = await startPolicy(fake, { captureDir });
    expect((await restore(second, "c2", dir, ["r"])).status).toBe(200);
    await resume(second.url, "c2");

    // The re-issued call continues the restored cut, and is held again part-way.
    await hold(fake, { after_calls: (await fakeCalls(fake)).length });
    const reissued = openStream(second.url, modelPath("r-a1"), { input: input2, tools: TOOLS });
    await fake.server.holds.whenBlocked(1);
    const continuing = (await fakeCalls(fake)).at(-1);
    expect(continuing).toMatchObject({ rollout: "r-a1", continued_from: id2 });
    const id3 = continuing?.model_call_id as string;

    const prepared = await prepare(second.url, "c3");
    expect(prepared.report.counts).toMatchObject({ inflight: 1, held: 1, cut: 1 });
    expect((await fakeCuts(fake)).at(-1)).toEqual([id3]);
    const newerKey = cutKeyOf("r-a1", id3);
    const { body, records } = await commit(second, "c3", ["r-a1"]);
    expect(records[0]?.generation_cuts.map((c) => c.model_call_id)).toEqual([id3]);
    expect(records[0]?.generation_cuts[0]?.continuation).toMatchObject({
      source_capture_key: "r-a1",
      source_model_call_id: id3,
    });
    // Only the newer cut's staged rows are kept, not the restored cut's.
    expect(body.staging_keys).toEqual([newerKey, `r/${id1}`].sort());
    await resume(second.url, "c3");

    // The call ends before its response starts; its retry continues the newer cut.
    reissued.abort();
    await expect.poll(async () => (await status(second.url)).report.counts.inflight, POLL).toBe(0);
    await release(fake);
    const retry = await respond(second.url, "r-a1", { input: input2, tools: TOOLS });
    expect(retry.status, JSON.stringify(retry.body)).toBe(200);
    expect(replyText(retry.body as ResponseBody)).toBe(ANSWER);
    const last = (await fakeCalls(fake)).at(-1);
    expect(last).toMatchObject({ continued_from: id3, capture: "staged" });
    expect(last?.reused_prefix_tokens).toBeGreaterThan(continuing?.reused_prefix_tokens as number);
  });
});

describe("a newer cut of a call that claimed a restored cut", () => {
  it("is consumed with the call's delivery: the next commit exports no cut of a delivered call", async () => {
    const { fake, captureDir, dir, input2, id2 } = await checkpointThenCrash();
    const second = await startPolicy(fake, { captureDir });
    expect((await restore(second, "c2", dir, ["r"])).status).toBe(200);
    await resume(second.url, "c2");

    await hold(fake, { after_calls: (await fakeCalls(fake)).length });
    const reissued = track(respond(second.url, "r-a1", { input: input2, tools: TOOLS }));
    await fake.server.holds.whenBlocked(1);
    expect((await fakeCalls(fake)).at(-1)).toMatchObject({ continued_from: id2 });
    expect((await prepare(second.url, "c3")).report.counts).toMatchObject({ cut: 1 });
    await release(fake);
    await resume(second.url, "c3");
    expect((await reissued.value).status).toBe(200);
    expect((await status(second.url)).restored_generation_cuts).toEqual([]);

    await prepare(second.url, "c4");
    const { records, body } = await commit(second, "c4", ["r-a1"]);
    expect(records[0]?.generation_cuts).toEqual([]);
    expect(body.staging_keys.filter((key) => key.startsWith("__generation_cut__/"))).toEqual([]);
    expect(records[0]?.rows).toHaveLength(2);
  });
});

describe("restore clears dead executions", () => {
  it("of the target and later attempts of each scoped rollout, fences included, never of look-alikes", async () => {
    const { fake, captureDir, dir } = await checkpointThenCrash();
    // A dead execution that ran after the checkpoint: q's attempts 1 and 2 made calls, attempt
    // 3 was retired (a fence), and look-alike rollouts made calls too.
    const dead = await startPolicy(fake, { captureDir });
    for (const key of ["q-a1", "q-a2", "q1-a1", "q-a1x"]) {
      await respond(dead.url, key, { input: firstInput() }).expect(200);
    }
    await ledgerControl(dead.url, "post", "/rollouts/retire", { rollout_ids: ["q-a3"] }).expect(
      200,
    );
    await crash(dead);
    const left = await ledgerFiles(captureDir);
    for (const file of ["q-a1.lineage.jsonl", "q-a2.lineage.jsonl", "q-a3.lineage.retired"]) {
      expect(left).toContain(file);
    }

    const fresh = await startPolicy(fake, { captureDir });
    const restored = await restore(fresh, "c2", dir, ["q", "r"]);
    expect(restored.status, JSON.stringify(restored.body)).toBe(200);
    await settleLedger(fresh);
    const files = await ledgerFiles(captureDir);
    expect(files.filter((f) => /^q-a[0-9]+\./.test(f))).toEqual([]);
    expect(files).toContain("q1-a1.lineage.jsonl");
    expect(files).toContain("q-a1x.lineage.jsonl");
    // Both scoped sources are retired; r-a1 holds r's rows.
    expect(files).toContain("q.lineage.retired");
    expect(files).toContain("r.lineage.retired");
    expect(await ledgerRows(captureDir, "r-a1")).toHaveLength(1);
    await resume(fresh.url, "c2");
    // q's replacement is not fenced: its first call is captured.
    await respond(fresh.url, "q-a1", { input: firstInput() }).expect(200);
    expect(await ledgerRows(captureDir, "q-a1")).toHaveLength(1);
  });
});
