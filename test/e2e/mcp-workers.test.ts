/**
 * The reference counter over MCP with several workers under `gym serve`: every call is sent
 * over a fresh connection (so the cluster spreads them over the workers) and carries only its
 * session token, which names the worker holding the session, so a call another worker accepts
 * reaches that one. A checkpoint with calls waiting on it, a crash, and a restore into a
 * different worker count: every old token still reaches its session (through the alias table)
 * under the replacement's prefix, with the count from before the waiting calls.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { MCP_SESSION_TOKEN_HEADER } from "#sdk/server/resources/mcp-session-token.js";
import { killEverything } from "./helpers.js";
import { CounterDeployment, postFresh, type Reply } from "./workers-harness.js";

const SESSIONS = 6;
/** The counter's config: its tools over MCP. */
const MCP = { expose_tools_over_mcp: true };
const dirs: string[] = [];

afterAll(async () => {
  for (const dir of dirs) {
    await killEverything(dir, [path.join(dir, "run.json")]);
    rmSync(dir, { recursive: true, force: true });
  }
});

/** One stateless 2025-era `tools/call` over a fresh connection, with only the token. */
async function call(
  url: string,
  token: string,
  name: string,
  args: Record<string, unknown>,
  prefix = "",
): Promise<Reply> {
  return await postFresh(
    url,
    `${prefix}/mcp`,
    { jsonrpc: "2.0", id: 1, method: "tools/call", params: { name, arguments: args } },
    {
      headers: {
        accept: "application/json, text/event-stream",
        "mcp-protocol-version": "2025-06-18",
        [MCP_SESSION_TOKEN_HEADER]: token,
      },
    },
  );
}

/** A tool call's structured result (failing the test on anything else). */
function resultOf(reply: Reply, what: string): unknown {
  expect(reply.status, `${what}: ${JSON.stringify(reply.body)}`).toBe(200);
  const body = reply.body as { result?: { isError?: boolean; structuredContent?: unknown } };
  expect(body.result?.isError ?? false, `${what}: ${JSON.stringify(reply.body)}`).toBe(false);
  return body.result?.structuredContent;
}

/** The worker a token names. */
function tokenOwner(token: string): string | null {
  const payload = token.slice(0, token.lastIndexOf("."));
  const data = JSON.parse(Buffer.from(payload, "base64url").toString("utf8")) as {
    owner?: string;
  };
  return data.owner ?? null;
}

describe("the counter over MCP with 2 workers, restored into 3", { timeout: 240_000 }, () => {
  it("routes every call to its session's worker, before and after the restore", async () => {
    const dir = mkdtempSync(path.join(tmpdir(), "gym-mcp-workers-"));
    dirs.push(dir);
    const run = new CounterDeployment(dir);
    await run.serve(2, MCP);

    const tokens: string[] = [];
    for (let i = 0; i < SESSIONS; i++) {
      const seeded = await postFresh(run.url, `/ng-rollout/r${i}/seed_session`, {
        resources_session_id: `s${i}`,
        task_data: { initial_count: 0 },
      });
      expect(seeded.status, JSON.stringify(seeded.body)).toBe(200);
      const access = (seeded.body as { resources_tools: { headers: Record<string, string> } })
        .resources_tools;
      tokens.push(access.headers[MCP_SESSION_TOKEN_HEADER] ?? "");
    }
    // Consecutive connections go to consecutive workers: the sessions live on both.
    expect(new Set(tokens.map(tokenOwner)).size).toBe(2);

    // Two calls per session, each on its own connection: about half land on the other worker.
    for (const [i, token] of tokens.entries()) {
      for (let n = 0; n < 2; n++) {
        const added = await call(run.url, token, "increment_counter", { count: i + 1 });
        expect(resultOf(added, `session ${i}`)).toEqual({ success: true });
      }
    }
    for (const [i, token] of tokens.entries()) {
      const read = await call(run.url, token, "get_counter_value", {});
      expect(resultOf(read, `session ${i}`)).toEqual({ count: 2 * (i + 1) });
    }

    const deadline = (): number => Date.now() / 1000 + 60;
    const prepared = await run.control("prepare", { checkpoint_id: "c1", deadline_ts: deadline() });
    expect(prepared.body.phase).toBe("prepared");
    // Calls made while the checkpoint is open wait for a resume that never comes.
    const waiting = tokens.map((token) => {
      let settled = false;
      const reply = call(run.url, token, "increment_counter", { count: 100 }).finally(() => {
        settled = true;
      });
      reply.catch(() => undefined);
      return { reply, settled: () => settled };
    });
    const checkpointDir = path.join(dir, "checkpoints", "c1");
    const committed = await run.control("commit", {
      checkpoint_id: "c1",
      checkpoint_dir: checkpointDir,
      deadline_ts: deadline(),
      episode_ids: null,
    });
    expect(committed.status, JSON.stringify(committed.body)).toBe(200);
    expect(waiting.map((w) => w.settled())).toEqual(tokens.map(() => false));

    await run.crash();
    // None of the waiting calls was answered: the crash cut them off.
    for (const w of waiting) await expect(w.reply).rejects.toThrow();
    await run.serve(3, MCP);
    const scope = tokens.map((_, i) => ({ rollout_id: `r${i}`, attempt: 0 }));
    const restored = await run.control("restore", {
      checkpoint_id: "c1",
      checkpoint_dir: checkpointDir,
      deadline_ts: deadline(),
      episode_ids: scope,
    });
    expect(restored.status, JSON.stringify(restored.body)).toBe(200);
    expect((await run.control("status")).body.workers).toBe(3);
    expect(
      (await run.control("resume", { checkpoint_id: "c1", deadline_ts: deadline() })).status,
    ).toBe(200);

    for (const [i, token] of tokens.entries()) {
      const prefix = `/ng-rollout/r${i}-a1`;
      // Read on three connections (three workers): always the count from before the waiting calls.
      for (let n = 0; n < 3; n++) {
        const read = await call(run.url, token, "get_counter_value", {}, prefix);
        expect(resultOf(read, `session ${i}`)).toEqual({ count: 2 * (i + 1) });
      }
      const added = await call(run.url, token, "increment_counter", { count: 1 }, prefix);
      expect(resultOf(added, `session ${i}`)).toEqual({ success: true });
      // Without the replacement's prefix the token is still its replaced attempt's.
      const stale = await call(run.url, token, "get_counter_value", {});
      expect(stale.status, `session ${i}`).toBe(409);
      expect((stale.body as { error: { code: string } }).error.code).toBe("stale_attempt");
    }
    for (const [i, token] of tokens.entries()) {
      const read = await call(run.url, token, "get_counter_value", {}, `/ng-rollout/r${i}-a1`);
      expect(resultOf(read, `session ${i}`)).toEqual({ count: 2 * (i + 1) + 1 });
    }
    await run.stop();
  });
});
