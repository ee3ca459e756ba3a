/**
 * Held responses, deferred row publication, calls that wait at closed admission, and the ledger
 * control routes during a checkpoint (see docs/policy-model.md),
 * with the policy model server in front of the real fake inference backend.
 */
import { mkdir } from "node:fs/promises";
import path from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import {
  ANSWER,
  CAPTURE_TOKEN,
  POLL,
  WEATHER_SCRIPT,
  cleanup,
  commit,
  echo,
  exists,
  fakeCalls,
  firstInput,
  hold,
  ledgerControl,
  ledgerRows,
  modelPath,
  openStream,
  prepare,
  probeDeliveries,
  release,
  replyText,
  respond,
  resume,
  setScript,
  startFake,
  startPolicy,
  status,
  tempDir,
  track,
  type ResponseBody,
} from "../../support/policy-harness.js";

afterEach(cleanup);

async function setup(options: { cuts?: boolean } = {}) {
  const fake = await startFake();
  await setScript(fake, WEATHER_SCRIPT);
  const captureDir = await tempDir();
  const policy = await startPolicy(fake, { captureDir, cuts: options.cuts ?? false });
  const deliveries = probeDeliveries(policy);
  return { fake, policy, captureDir, deliveries };
}

const held = { inflight: 1, held: 1, cut: 0, cut_failed: 0, cut_skipped: 0 };

describe("a call generating when a checkpoint opens", () => {
  it("prepare is ready at once; the held call's row is published only after resume, and the commit leaves it out", async () => {
    const { fake, policy, captureDir, deliveries } = await setup();
    const input1 = firstInput();
    const first = await respond(policy.url, "r", { input: input1 }).expect(200);
    expect(deliveries.count()).toBe(1);
    const [entry1] = await fakeCalls(fake);
    const id1 = entry1?.model_call_id as string;

    await hold(fake, { after_calls_per_rollout: 1 });
    const second = track(respond(policy.url, "r", { input: echo(input1, first.body) }));
    await fake.server.holds.whenBlocked(1);

    const prepared = await prepare(policy.url, "c1");
    expect(prepared.phase).toBe("prepared");
    expect(prepared.report).toMatchObject({ ready: true, blockers: [], counts: held });

    // The generation finishes while the checkpoint is open: the worker staged its tokens and
    // answered, and the response now waits at the gate.
    expect(await release(fake)).toBe(1);
    await deliveries.entered(2);
    const entry2 = (await fakeCalls(fake))[1];
    expect(entry2).toMatchObject({ returned: true, capture: "staged" });
    const id2 = entry2?.model_call_id as string;
    // No row for a response the client has not received.
    expect((await ledgerRows(captureDir, "r"))?.map((row) => row.model_call_id)).toEqual([id1]);
    expect((await status(policy.url)).report).toMatchObject({ ready: true, counts: held });

    const { body, records } = await commit(policy, "c1", ["r"]);
    expect(records).toHaveLength(1);
    expect(records[0]?.rows.map((row) => row.model_call_id)).toEqual([id1]);
    expect(records[0]?.generation_cuts).toEqual([]);
    expect(body.episode_ids).toEqual(["r"]);
    expect(body.staging_keys).toEqual([`r/${id1}`]);
    expect(body.staging_keys_by_episode).toEqual({ r: [`r/${id1}`] });
    expect(second.done()).toBe(false);

    await resume(policy.url, "c1");
    const delivered = await second.value;
    expect(delivered.status, JSON.stringify(delivered.body)).toBe(200);
    expect(replyText(delivered.body as ResponseBody)).toBe(ANSWER);
    const rows = (await ledgerRows(captureDir, "r")) ?? [];
    expect(rows.map((row) => row.model_call_id)).toEqual([id1, id2]);
    expect(rows[1]).toMatchObject({ parent_call_id: id1, mode: "token_in" });
  });

  it("a held call whose parent cannot be resolved leaves no failure row in the ledger or the checkpoint", async () => {
    const { fake, policy, captureDir, deliveries } = await setup();
    await respond(policy.url, "r", { input: firstInput() }).expect(200);
    const [entry1] = await fakeCalls(fake);
    // An assistant turn this server never answered: the ledger names no parent for it.
    const forged = [
      ...firstInput(),
      { type: "message", role: "assistant", content: "a reply nobody generated" },
      { type: "message", role: "user", content: "and tomorrow?" },
    ];
    await hold(fake, { after_calls: 1 });
    const orphan = track(respond(policy.url, "r", { input: forged }));
    await fake.server.holds.whenBlocked(1);

    const prepared = await prepare(policy.url, "c1");
    expect(prepared.report).toMatchObject({ ready: true, counts: { inflight: 1, held: 1 } });
    // Undelivered: its row (a failure row here) must not be published yet...
    expect
      .soft((await ledgerRows(captureDir, "r"))?.map((row) => row.model_call_id))
      .toEqual([entry1?.model_call_id]);
    // ...and a checkpoint holds no row of a call whose response the client has not received.
    const { records } = await commit(policy, "c1", ["r"]);
    expect(records[0]?.rows.map((row) => row.model_call_id)).toEqual([entry1?.model_call_id]);

    await release(fake);
    await deliveries.entered(2);
    await resume(policy.url, "c1");
    expect((await orphan.value).status).toBe(200);
    // Delivered now: its failure row is published.
    const rows = (await ledgerRows(captureDir, "r")) ?? [];
    expect(rows).toHaveLength(2);
    expect(rows[1]).toMatchObject({ failure_reason: expect.any(String) });
    expect(Object.keys(rows[1] ?? {}).sort()).toEqual(["failure_reason", "model_call_id"]);
  });
});

describe("publishing a held call's row at delivery", () => {
  it("a call whose client leaves while it is held has no row, and the rollout goes on", async () => {
    const { fake, policy, captureDir, deliveries } = await setup();
    const input1 = firstInput();
    const first = await respond(policy.url, "r", { input: input1 }).expect(200);
    const id1 = (await fakeCalls(fake))[0]?.model_call_id;
    const input2 = echo(input1, first.body);

    await hold(fake, { after_calls_per_rollout: 1 });
    const client = openStream(policy.url, modelPath("r"), { input: input2 });
    await fake.server.holds.whenBlocked(1);
    await prepare(policy.url, "c1");
    await release(fake);
    await deliveries.entered(2);
    client.abort();
    await expect.poll(async () => (await status(policy.url)).report.counts.inflight, POLL).toBe(0);
    await resume(policy.url, "c1");
    // The worker staged the call, but the client never got it: no row, now or later.
    expect((await fakeCalls(fake))[1]).toMatchObject({ capture: "staged", returned: true });
    expect((await ledgerRows(captureDir, "r"))?.map((row) => row.model_call_id)).toEqual([id1]);

    // Not poisoned: the agent's retry is served and captured under the same parent.
    const retry = await respond(policy.url, "r", { input: input2 });
    expect(retry.status, JSON.stringify(retry.body)).toBe(200);
    const rows = (await ledgerRows(captureDir, "r")) ?? [];
    expect(rows).toHaveLength(2);
    expect(rows[1]).toMatchObject({ parent_call_id: id1, mode: "token_in" });
  });

  it("a ledger write that fails at delivery poisons the call: no answer is sent", async () => {
    const { fake, policy, captureDir, deliveries } = await setup();
    await hold(fake, { after_calls: 0 });
    const call = track(respond(policy.url, "p", { input: firstInput() }));
    await fake.server.holds.whenBlocked(1);
    await prepare(policy.url, "c1");
    await release(fake);
    await deliveries.entered(1);
    // The row cannot be written: its ledger path is taken by a directory.
    await mkdir(path.join(captureDir, "p.lineage.jsonl"), { recursive: true });
    await resume(policy.url, "c1");
    const res = await call.value;
    expect(res.status).toBeGreaterThanOrEqual(500);
    expect(res.body.output).toBeUndefined();
    expect(JSON.stringify(res.body)).not.toContain("function_call");
  });
});

describe("a call arriving while a checkpoint is open", () => {
  it("waits without being admitted (the backend sees nothing) and is served after resume", async () => {
    const { fake, policy, captureDir } = await setup();
    const prepared = await prepare(policy.url, "c1");
    expect(prepared.report).toMatchObject({ ready: true, counts: { inflight: 0, held: 0 } });

    const untagged = track(respond(policy.url, null, { input: firstInput() }));
    const tagged = track(respond(policy.url, "r", { input: firstInput() }));
    const gate = policy.server.participant?.gate;
    await expect.poll(() => gate?.waitingCount, POLL).toBe(1);
    // Not admitted: not counted, and nothing reached the backend.
    expect((await status(policy.url)).report.counts).toMatchObject({ inflight: 0, held: 0 });
    expect(await fakeCalls(fake)).toEqual([]);
    // A waiting call leaves no trace in the commit.
    const { records, body } = await commit(policy, "c1", ["r"]);
    expect(records).toEqual([]);
    expect(body.staging_keys).toEqual([]);
    expect(untagged.done()).toBe(false);
    expect(tagged.done()).toBe(false);

    await resume(policy.url, "c1");
    expect((await tagged.value).status).toBe(200);
    expect((await untagged.value).status).toBe(200);
    expect(gate?.waitingCount).toBe(0);
    const calls = await fakeCalls(fake);
    expect(calls.map((c) => c.rollout).sort()).toEqual([null, "r"]);
    expect((await ledgerRows(captureDir, "r"))?.length).toBe(1);
  });
});

describe("ledger control routes", () => {
  it("need the capture bearer; retire and delete are refused while a checkpoint is open and work after resume", async () => {
    const { policy, captureDir } = await setup();
    await respond(policy.url, "r", { input: firstInput() }).expect(200);

    for (const auth of [null, "Bearer wrong", `Bearer ${CAPTURE_TOKEN}x`]) {
      const manifest = await ledgerControl(
        policy.url,
        "get",
        "/rollouts/r/manifest",
        undefined,
        auth,
      );
      expect(manifest.status).toBe(401);
      expect(typeof manifest.body.detail).toBe("string");
      const retire = await ledgerControl(
        policy.url,
        "post",
        "/rollouts/retire",
        { rollout_ids: ["r"] },
        auth,
      );
      expect(retire.status).toBe(401);
    }
    const live = await ledgerControl(policy.url, "get", "/rollouts/r/manifest");
    expect(live.status, JSON.stringify(live.body)).toBe(200);
    expect(live.body).toMatchObject({ schema_version: 2, rollout_id: "r", failures: [] });
    expect(live.body.records).toHaveLength(1);
    const invalid = await ledgerControl(policy.url, "get", "/rollouts/bad!id/manifest");
    expect(invalid.status).toBe(400);

    await prepare(policy.url, "c1");
    for (const op of ["retire", "delete"]) {
      const refused = await ledgerControl(policy.url, "post", `/rollouts/${op}`, {
        rollout_ids: ["r"],
      });
      expect(refused.status, `${op}: ${JSON.stringify(refused.body)}`).toBe(409);
      expect(refused.body.detail).toMatch(/checkpoint/);
    }
    // Reads are never refused, and nothing changed on disk.
    expect((await ledgerControl(policy.url, "get", "/rollouts/r/manifest")).status).toBe(200);
    expect(await ledgerRows(captureDir, "r")).toHaveLength(1);
    expect(await exists(path.join(captureDir, "r.lineage.retired"))).toBe(false);

    await resume(policy.url, "c1");
    const retired = await ledgerControl(policy.url, "post", "/rollouts/retire", {
      rollout_ids: ["r"],
    });
    expect(retired.status, JSON.stringify(retired.body)).toBe(200);
    expect(retired.body).toEqual({ removed: ["r"], absent: [] });
    expect(await exists(path.join(captureDir, "r.lineage.retired"))).toBe(true);
    expect(await ledgerRows(captureDir, "r")).toBeNull();
    const gone = await ledgerControl(policy.url, "get", "/rollouts/r/manifest");
    expect(gone.status).toBe(410);

    const deleted = await ledgerControl(policy.url, "post", "/rollouts/delete", {
      rollout_ids: ["r"],
    });
    expect(deleted.status, JSON.stringify(deleted.body)).toBe(200);
    // A fence-only key is absent; afterwards the key is unused again.
    expect(deleted.body).toEqual({ removed: [], absent: ["r"] });
    const reused = await ledgerControl(policy.url, "get", "/rollouts/r/manifest");
    expect(reused.status).toBe(200);
    expect(reused.body.records).toEqual([]);
  });

  it("a malformed batch is 422 and an invalid rollout ID 400, changing nothing", async () => {
    const { policy, captureDir } = await setup();
    await respond(policy.url, "r", { input: firstInput() }).expect(200);
    const empty = await ledgerControl(policy.url, "post", "/rollouts/retire", { rollout_ids: [] });
    expect(empty.status).toBe(422);
    const extra = await ledgerControl(policy.url, "post", "/rollouts/delete", {
      rollout_ids: ["r"],
      force: true,
    });
    expect(extra.status).toBe(422);
    const invalid = await ledgerControl(policy.url, "post", "/rollouts/retire", {
      rollout_ids: ["r", "bad!id"],
    });
    expect(invalid.status).toBe(400);
    expect(await ledgerRows(captureDir, "r")).toHaveLength(1);
    expect(await exists(path.join(captureDir, "r.lineage.retired"))).toBe(false);
  });
});
