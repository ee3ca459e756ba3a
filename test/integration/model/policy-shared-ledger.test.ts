/**
 * Two policy model servers sharing one run-wide capture ledger (as `policy_model` and
 * `policy_model_reasoning_off` do), in front of one fake inference backend: neither checkpoint
 * holds the row of a call the other server has not delivered, and a restored attempt one server
 * started keeps its ledger when the other server's commit leaves it out of scope (the started
 * marker).
 */
import { afterEach, describe, expect, it } from "vitest";
import {
  TOOLS,
  WEATHER_SCRIPT,
  cleanup,
  commit,
  crash,
  echo,
  fakeCalls,
  firstInput,
  hold,
  ledgerFiles,
  ledgerRows,
  prepare,
  probeDeliveries,
  release,
  respond,
  restore,
  resume,
  setScript,
  startFake,
  startPolicy,
  tempDir,
  track,
  type ResponseBody,
} from "../../support/policy-harness.js";

afterEach(cleanup);

describe("two policy servers sharing a capture ledger", () => {
  it("a completed but undelivered call on one is in neither checkpoint; after restore, a target one started survives the other's commit", async () => {
    const fake = await startFake();
    await setScript(fake, WEATHER_SCRIPT);
    const captureDir = await tempDir();
    const a = await startPolicy(fake, { captureDir, name: "policy" });
    const b = await startPolicy(fake, { captureDir, name: "policy-alt", cuts: false });
    const bDeliveries = probeDeliveries(b);

    const input1 = firstInput();
    const first = await respond(a.url, "r", { input: input1, tools: TOOLS }).expect(200);
    const id1 = (await fakeCalls(fake))[0]?.model_call_id as string;
    const input2 = echo(input1, first.body as ResponseBody);
    await hold(fake, { after_calls: 1 });
    const onB = track(respond(b.url, "r", { input: input2, tools: TOOLS }));
    await fake.server.holds.whenBlocked(1);

    expect((await prepare(a.url, "c1")).report).toMatchObject({ ready: true });
    expect((await prepare(b.url, "c1")).report).toMatchObject({
      ready: true,
      counts: { inflight: 1, held: 1 },
    });
    // B's call completes on the worker and waits at B's gate, undelivered.
    await release(fake);
    await bDeliveries.entered(1);
    expect((await fakeCalls(fake))[1]).toMatchObject({ returned: true, capture: "staged" });

    const fromA = await commit(a, "c1", ["r"]);
    const fromB = await commit(b, "c1", ["r"]);
    for (const { records, body } of [fromA, fromB]) {
      expect(records[0]?.rows.map((row) => row.model_call_id)).toEqual([id1]);
      expect(body.staging_keys).toEqual([`r/${id1}`]);
    }
    expect(onB.done()).toBe(false);

    // Crash of both; fresh servers restore their own checkpoints over the same ledger.
    await crash(a);
    await crash(b);
    const a2 = await startPolicy(fake, { captureDir, name: "policy" });
    const b2 = await startPolicy(fake, { captureDir, name: "policy-alt", cuts: false });
    expect((await restore(a2, "c2", fromA.dir, ["r"])).status).toBe(200);
    expect((await restore(b2, "c2", fromB.dir, ["r"])).status).toBe(200);
    // Each restored ledger holds exactly the checkpointed row; the files follow (deferred).
    for (const server of [a2, b2]) {
      const rows = await server.server.ledger?.rows("r-a1");
      expect(rows?.map((row) => row.model_call_id)).toEqual([id1]);
    }
    expect((await ledgerRows(captureDir, "r-a1"))?.map((row) => row.model_call_id)).toEqual([id1]);
    await resume(a2.url, "c2");
    await resume(b2.url, "c2");

    // The replacement starts on B only; A never sees it start.
    await respond(b2.url, "r-a1", { input: input2, tools: TOOLS }).expect(200);
    expect(await ledgerFiles(captureDir)).toContain("r-a1.lineage.started");
    expect(await ledgerRows(captureDir, "r-a1")).toHaveLength(2);

    // A's next commit no longer names r: A must not delete the ledger B's call wrote to.
    await prepare(a2.url, "c3");
    await commit(a2, "c3", []);
    await resume(a2.url, "c3");
    expect(await ledgerRows(captureDir, "r-a1")).toHaveLength(2);
    expect(await ledgerFiles(captureDir)).toContain("r-a1.lineage.started");
    expect(await ledgerFiles(captureDir)).not.toContain("r-a1.lineage.retired");
  });
});
