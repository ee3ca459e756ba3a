/**
 * The policy model server in front of the real fake inference backend: token lineage across the
 * calls of one rollout, untagged calls, malformed rollout
 * prefixes, and streaming refused under worker-owned capture.
 */
import request from "supertest";
import { afterEach, describe, expect, it } from "vitest";
import {
  ANSWER,
  TOOLS,
  WEATHER_SCRIPT,
  cleanup,
  echo,
  fakeCalls,
  firstInput,
  ledgerControl,
  ledgerFiles,
  ledgerRows,
  replyText,
  respond,
  setScript,
  startFake,
  startPolicy,
  tempDir,
  type ResponseBody,
} from "../../support/policy-harness.js";

afterEach(cleanup);

async function captured() {
  const fake = await startFake();
  await setScript(fake, WEATHER_SCRIPT);
  const captureDir = await tempDir();
  const policy = await startPolicy(fake, { captureDir });
  return { fake, policy, captureDir };
}

describe("token lineage of one rollout", () => {
  it("the second call, echoing the first reply and a tool output, is captured token_in under the first", async () => {
    const { fake, policy, captureDir } = await captured();
    const input1 = firstInput();
    const first = await respond(policy.url, "r", { input: input1, tools: TOOLS });
    expect(first.status, JSON.stringify(first.body)).toBe(200);
    const reply1 = first.body as ResponseBody;
    expect(reply1.output.map((item) => item.type)).toEqual(["function_call"]);

    const input2 = echo(input1, reply1);
    const second = await respond(policy.url, "r", { input: input2, tools: TOOLS });
    expect(second.status, JSON.stringify(second.body)).toBe(200);
    expect(replyText(second.body as ResponseBody)).toBe(ANSWER);

    // The worker captured both calls: a text root, then a child on the parent's exact tokens.
    const calls = await fakeCalls(fake);
    expect(calls).toHaveLength(2);
    expect(calls.map((c) => c.capture)).toEqual(["staged", "staged"]);
    expect(calls.map((c) => c.rollout)).toEqual(["r", "r"]);
    const [id1, id2] = calls.map((c) => c.model_call_id as string);

    const rows = (await ledgerRows(captureDir, "r")) ?? [];
    expect(rows.map((row) => row.model_call_id)).toEqual([id1, id2]);
    const [row1, row2] = rows as [Record<string, unknown>, Record<string, unknown>];
    expect(row1).toMatchObject({
      parent_call_id: null,
      mode: "text",
      prev_len: 0,
      staging_key: `r/${id1}`,
      staging_chain: [`r/${id1}`],
      response_id: reply1.id,
    });
    expect(row1.cum_len).toBe(row1.delta_len);
    expect(row2).toMatchObject({
      parent_call_id: id1,
      mode: "token_in",
      prev_len: row1.cum_len,
      staging_key: `r/${id2}`,
      staging_chain: [`r/${id1}`, `r/${id2}`],
      response_id: (second.body as ResponseBody).id,
    });
    expect(row2.cum_len).toBe((row1.cum_len as number) + (row2.delta_len as number));
    expect(row2.cum_len as number).toBeGreaterThan(row1.cum_len as number);

    // A third turn echoing the text answer extends the chain once more.
    const input3 = [
      ...input2,
      ...(second.body as ResponseBody).output,
      { type: "message", role: "user", content: "Thanks! And tomorrow?" },
    ];
    await respond(policy.url, "r", { input: input3, tools: TOOLS }).expect(200);
    const id3 = (await fakeCalls(fake))[2]?.model_call_id as string;
    expect((await fakeCalls(fake))[2]?.capture).toBe("staged");
    const row3 = ((await ledgerRows(captureDir, "r")) ?? [])[2];
    expect(row3).toMatchObject({
      parent_call_id: id2,
      mode: "token_in",
      prev_len: row2.cum_len,
      staging_chain: [`r/${id1}`, `r/${id2}`, `r/${id3}`],
    });

    // The manifest the training framework reads says the same.
    const manifest = await ledgerControl(policy.url, "get", "/rollouts/r/manifest").expect(200);
    expect(manifest.body.failures).toEqual([]);
    expect(
      (manifest.body.records as Record<string, unknown>[]).map((r) => [
        r.model_call_id,
        r.parent_call_id,
      ]),
    ).toEqual([
      [id1, null],
      [id2, id1],
      [id3, id2],
    ]);
  });

  it("calls of another rollout neither read nor write this rollout's ledger", async () => {
    const { fake, policy, captureDir } = await captured();
    const reply = (await respond(policy.url, "r", { input: firstInput() }).expect(200))
      .body as ResponseBody;
    // The same echo under another rollout has no parent there: it is a fresh text root.
    const other = await respond(policy.url, "q", { input: firstInput() }).expect(200);
    expect((other.body as ResponseBody).output[0]?.type).toBe("function_call");
    await respond(policy.url, "q", {
      input: echo(firstInput(), other.body as ResponseBody),
    }).expect(200);
    expect((await ledgerRows(captureDir, "r"))?.map((row) => row.response_id)).toEqual([reply.id]);
    const q = (await ledgerRows(captureDir, "q")) ?? [];
    expect(q.map((row) => row.mode)).toEqual(["text", "token_in"]);
    expect((await fakeCalls(fake)).map((c) => c.capture)).toEqual(["staged", "staged", "staged"]);
  });
});

describe("the /training-token-capture segment after a rollout prefix", () => {
  it("is stripped and the call is captured under the prefix's key", async () => {
    const { fake, policy, captureDir } = await captured();
    const res = await request(policy.url)
      .post("/ng-rollout/t-a2/training-token-capture/v1/responses")
      .send({ input: firstInput() });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect((await fakeCalls(fake))[0]).toMatchObject({ rollout: "t-a2", capture: "staged" });
    expect(await ledgerFiles(captureDir)).toEqual(["t-a2.lineage.jsonl"]);
  });
});

describe("untagged calls and rollout prefixes", () => {
  it("an untagged call is served and leaves no ledger row", async () => {
    const { fake, policy, captureDir } = await captured();
    const res = await respond(policy.url, null, { input: firstInput(), tools: TOOLS });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect((res.body as ResponseBody).output[0]).toMatchObject({
      type: "function_call",
      name: "get_weather",
    });
    const [call] = await fakeCalls(fake);
    // Not captured: the worker got no admission.
    expect(call).toMatchObject({ model_call_id: null, capture: null, returned: true });
    expect(await ledgerFiles(captureDir)).toEqual([]);
  });

  it.each([
    ["a key with a character outside the ID alphabet", "bad!id"],
    ["a key that starts with the attempt suffix", "-a1"],
    ["a key whose rollout ends with a reserved attempt suffix", "r-a1-a1"],
  ])(
    "%s is refused with 400 invalid_rollout_id before the backend is called",
    async (_what, key) => {
      const { fake, policy, captureDir } = await captured();
      const res = await request(policy.url)
        .post(`/ng-rollout/${key}/v1/responses`)
        .send({ input: firstInput() });
      expect(res.status, JSON.stringify(res.body)).toBe(400);
      expect(res.body.error.code).toBe("invalid_rollout_id");
      expect(await fakeCalls(fake)).toEqual([]);
      expect(await ledgerFiles(captureDir)).toEqual([]);
    },
  );
});

describe("streaming under worker-owned capture", () => {
  it("stream: true under a rollout prefix is refused with 422, and the backend is not called", async () => {
    const { fake, policy, captureDir } = await captured();
    const res = await respond(policy.url, "r", { input: firstInput(), stream: true });
    expect(res.status, JSON.stringify(res.body)).toBe(422);
    expect(res.body.detail).toMatch(/stream/);
    expect(await fakeCalls(fake)).toEqual([]);
    expect(await ledgerFiles(captureDir)).toEqual([]);
  });

  it("stream: true without a prefix on the same server streams (nothing is captured)", async () => {
    const { fake, policy } = await captured();
    await setScript(fake, { default: [{ content: "plain words" }] });
    const res = await respond(policy.url, null, { input: firstInput(), stream: true });
    expect(res.status).toBe(200);
    expect(res.headers["content-type"]).toMatch(/^text\/event-stream/);
    expect(res.text).toContain("response.completed");
    expect((await fakeCalls(fake))[0]).toMatchObject({ stream: true, capture: null });
  });
});
