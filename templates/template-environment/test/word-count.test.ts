/**
 * The word-count environment through the SDK's test kit: a real server in process, `/run` sent
 * as a rollout controller sends it, and every boundary checkpointed and restored into a fresh
 * instance, with the replacement attempt continuing there.
 */
import { afterEach, describe, expect, it } from "vitest";
import {
  startTestServer,
  type TestServer,
  type TestServerOptions,
} from "gym-participant-sdk/testing";
import WordCountEnvironment, { countWords } from "../src/index.js";

const CONFIG = { cleanup_timeout_seconds: 5 };
const run = (task_input: unknown) => ({
  episode_id: { rollout_id: "ep1", attempt: 0 },
  task: { task_id: { taskset: "demo", task_id: "1" }, task_input },
});
const TASK = { documents: ["the quick brown fox", "jumps over the lazy dog"], expected_words: 9 };

const handles: TestServer<WordCountEnvironment>[] = [];
afterEach(async () => {
  for (const handle of handles.splice(0)) await handle.close();
});

async function start(options: TestServerOptions = {}): Promise<TestServer<WordCountEnvironment>> {
  const handle = await startTestServer(WordCountEnvironment, {
    name: "word_count",
    config: CONFIG,
    ...options,
  });
  handles.push(handle);
  return handle;
}

describe("WordCountEnvironment", () => {
  it("counts the words of every document and rewards the right total", async () => {
    const env = await start();
    expect((await env.request("/run", run(TASK))).body).toMatchObject({
      result: { reward: 1, words: 9 },
      failure: null,
    });
    const wrong = await env.request("/run", run({ ...TASK, expected_words: 8 }));
    expect(wrong.body).toMatchObject({ result: { reward: 0, words: 9 } });
  });

  it("loses nothing when checkpointed and restored into a fresh process at every boundary", async () => {
    const env = await start({ checkpointEvery: "boundary" });
    const reply = await env.request("/run", run(TASK));
    expect(reply.body).toMatchObject({ result: { reward: 1, words: 9 }, failure: null });
    // Boundaries: read 0, read 1, verify, return; the last replacement was attempt 4.
    expect(reply.body).toMatchObject({ episode_id: { rollout_id: "ep1", attempt: 4 } });
  });

  it("refuses a malformed task with 422 naming the field, before any episode runs", async () => {
    const reply = await (await start()).request("/run", run({ documents: "not a list" }));
    expect(reply.status).toBe(422);
    expect(reply.body).toMatchObject({
      error: {
        code: "invalid_request",
        issues: expect.arrayContaining([
          expect.objectContaining({ path: ["task", "task_input", "documents"] }),
        ]),
      },
    });
  });

  it("counts words", () => {
    expect(countWords("  two\twords ")).toBe(2);
    expect(countWords("")).toBe(0);
  });
});
