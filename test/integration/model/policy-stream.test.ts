/**
 * Streaming responses (`stream: true` without capture) through the policy gate: a response starts
 * only with its first data chunk, so headers and keep-alive comments neither reach the client early
 * nor block a prepare; a stream that has produced only keep-alives when a checkpoint opens is held
 * until resume; a stream whose answer already started is the one thing prepare waits for, and it
 * finishes while admission is closed.
 *
 * The fake backend's event stream opens with a `: keep-alive` comment and a role chunk with empty
 * content; a held call blocks after half its tokens, so a one-word answer blocks right after the
 * role token, before its word. A probe on the gate's delivery records, when the server decides
 * the response starts, how far the fake had generated and whether the client had a response head.
 */
import request from "supertest";
import { afterEach, describe, expect, it } from "vitest";
import {
  POLL,
  QUESTION,
  TOOLS,
  WEATHER_SCRIPT,
  cleanup,
  fakeCalls,
  hold,
  openStream,
  prepare,
  probeDeliveries,
  release,
  respond,
  resume,
  setScript,
  sseEvents,
  startFake,
  startPolicy,
  status,
  tempDir,
  type Fake,
  type Policy,
  type StreamClient,
} from "../../support/policy-harness.js";

afterEach(cleanup);

/** The one-word answer: its role token, then its word (2 tokens; held after the first). */
const WORD = "done";

async function setup(answer: string, capture: boolean) {
  const fake = await startFake();
  await setScript(fake, { default: [{ content: answer }] });
  const policy = await startPolicy(fake, { captureDir: capture ? await tempDir() : null });
  await hold(fake, { after_calls: 0 });
  return { fake, policy };
}

/**
 * Watches the deliveries of `policy`: at each, the tokens the fake's first call had generated,
 * how many calls it held blocked, and whether `client()` had its response head.
 */
function watchStart(policy: Policy, fake: Fake, client: () => StreamClient | null) {
  return probeDeliveries(policy, () => ({
    generated: fake.server.calls.calls()[0]?.generated_tokens,
    blocked: fake.server.holds.blocked,
    head: client()?.gotHead() ?? false,
  }));
}

/** A round trip through the policy server, so bytes it already wrote have reached the client. */
async function roundTrip(policy: Policy): Promise<void> {
  await request(policy.url).get("/health").expect(200);
}

function expectWholeStream(text: string, answer: string): void {
  const events = sseEvents(text);
  expect(events[0]?.event).toBe("response.created");
  const deltas = events
    .filter((e) => e.event === "response.output_text.delta")
    .map((e) => (e.data as { delta: string }).delta)
    .join("");
  expect(deltas).toBe(answer);
  const completed = events.at(-1);
  expect(completed?.event).toBe("response.completed");
  const response = (completed?.data as { response: { output: { content: { text: string }[] }[] } })
    .response;
  expect(response.output[0]?.content[0]?.text).toBe(answer);
}

async function fakeReturned(fake: Fake): Promise<void> {
  await expect.poll(async () => (await fakeCalls(fake))[0]?.returned, POLL).toBe(true);
}

describe("an event stream starts with its first data chunk", () => {
  it.each([
    ["a tagged stream on a server without capture", false, "/ng-rollout/r/v1/responses"],
    ["an untagged stream on a capturing server", true, "/v1/responses"],
  ])("%s sends nothing for headers and keep-alives", async (_what, capture, route) => {
    const { fake, policy } = await setup(WORD, capture);
    let client: StreamClient | null = null;
    const starts = watchStart(policy, fake, () => client);
    client = openStream(policy.url, route, { input: QUESTION, stream: true });
    // The fake sent its headers, keep-alive and empty role chunk, then blocked before the word.
    await fake.server.holds.whenBlocked(1);
    await roundTrip(policy);
    expect(client.gotHead()).toBe(false);
    // Not started: held, not streaming.
    expect((await status(policy.url)).report).toMatchObject({
      ready: true,
      blockers: [],
      counts: { inflight: 1, held: 1 },
    });

    await release(fake);
    const done = await client.done;
    expect(done.status).toBe(200);
    expect(done.headers["content-type"]).toMatch(/^text\/event-stream/);
    expectWholeStream(done.text, WORD);
    // The response started once, at the word: after the fake generated it, with nothing sent.
    expect(starts.snapshots).toEqual([{ generated: 2, blocked: 0, head: false }]);
    expect((await fakeCalls(fake))[0]).toMatchObject({ stream: true, capture: null });
  });
});

describe("a checkpoint while a stream has produced only keep-alives", () => {
  it("prepare is ready at once and the stream's data is held until resume", async () => {
    const { fake, policy } = await setup(WORD, true);
    let client: StreamClient | null = null;
    const starts = watchStart(policy, fake, () => client);
    client = openStream(policy.url, "/v1/responses", { input: QUESTION, stream: true });
    await fake.server.holds.whenBlocked(1);

    const prepared = await prepare(policy.url, "c1");
    expect(prepared.phase).toBe("prepared");
    expect(prepared.report).toMatchObject({
      ready: true,
      blockers: [],
      counts: { inflight: 1, held: 1, cut: 0, cut_failed: 0 },
    });

    // The backend finishes; the first answer chunk waits at the gate.
    await release(fake);
    await fakeReturned(fake);
    await starts.entered(1);
    expect(starts.snapshots).toEqual([{ generated: 2, blocked: 0, head: false }]);
    await roundTrip(policy);
    expect(client.gotHead()).toBe(false);
    expect(client.text()).toBe("");
    expect((await status(policy.url)).report).toMatchObject({
      ready: true,
      counts: { inflight: 1, held: 1 },
    });

    await resume(policy.url, "c1");
    const done = await client.done;
    expect(done.status).toBe(200);
    expectWholeStream(done.text, WORD);
  });
});

describe("a stream whose answer already started", () => {
  it("blocks prepare until it ends, and finishes while admission is closed", async () => {
    const answer = "one two three four";
    const { fake, policy } = await setup(answer, true);
    const client = openStream(policy.url, "/v1/responses", { input: QUESTION, stream: true });
    await fake.server.holds.whenBlocked(1);
    // Half the answer was generated before the hold: it reached the client.
    await client.head;
    await expect.poll(() => client.text().includes("response.output_text.delta"), POLL).toBe(true);

    const early = await prepare(policy.url, "c1", { deadline_ts: Date.now() / 1000 + 0.3 });
    expect(early.phase).toBe("preparing");
    expect(early.report.ready).toBe(false);
    expect(early.report.blockers).toHaveLength(1);
    expect(early.report.counts).toMatchObject({ inflight: 1, held: 0 });

    // Admission stays closed; the started stream still runs to its end.
    await release(fake);
    const done = await client.done;
    expect(done.status).toBe(200);
    expectWholeStream(done.text, answer);

    const prepared = await prepare(policy.url, "c1");
    expect(prepared.phase).toBe("prepared");
    expect(prepared.report).toMatchObject({ ready: true, blockers: [], counts: { inflight: 0 } });
    await resume(policy.url, "c1");
  });
});

describe("a streamed reply", () => {
  it("completes with the same output items as the JSON reply, tool calls included", async () => {
    const fake = await startFake();
    await setScript(fake, WEATHER_SCRIPT);
    const policy = await startPolicy(fake, { captureDir: null });
    const json = await respond(policy.url, null, { input: QUESTION, tools: TOOLS }).expect(200);
    const streamed = await respond(policy.url, null, {
      input: QUESTION,
      tools: TOOLS,
      stream: true,
    });
    expect(streamed.status).toBe(200);
    const completed = sseEvents(streamed.text).find((e) => e.event === "response.completed");
    const output = (completed?.data as { response: { output: Record<string, unknown>[] } }).response
      .output;
    const shape = (items: Record<string, unknown>[]) =>
      items.map(({ type, name, arguments: args, call_id }) => ({ type, name, args, call_id }));
    expect(shape(output)).toEqual(
      shape((json.body as { output: Record<string, unknown>[] }).output),
    );
    expect(shape(output)).toEqual([
      { type: "function_call", name: "get_weather", args: '{"city":"Paris"}', call_id: "call_0_0" },
    ]);
  });
});
