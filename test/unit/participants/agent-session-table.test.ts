import { describe, expect, it } from "vitest";
import { CheckpointStateError } from "#sdk/errors.js";
import { episodeId } from "#sdk/identity/episode-id.js";
import { encodeJson } from "#sdk/json/json-value.js";
import {
  AgentSessionEntry,
  AgentSessionTable,
} from "#sdk/participants/agent/agent-session-table.js";
import { exportedSession } from "#sdk/participants/agent/session-checkpoint.js";
import { encodeRecordLine } from "#sdk/store/records-writer.js";
import type { AgentSeedRequest } from "#sdk/wire/agent.js";
import { objectsWalked } from "../../support/objects-walked.js";

const EPISODE = episodeId("r", 0);

function seedRequest(): AgentSeedRequest {
  return {
    agent_session_id: "s",
    episode_id: EPISODE,
    task_id: { taskset: "counting", task_id: "3" },
    tool_accesses: [],
    sandbox_access: null,
  };
}

function tableWith(key: string): {
  table: AgentSessionTable<unknown>;
  entry: AgentSessionEntry<unknown>;
} {
  const table = new AgentSessionTable<unknown>({ receiptWindowMs: () => 0 });
  const entry = new AgentSessionEntry<unknown>(key, EPISODE, seedRequest(), undefined);
  table.add(entry);
  return { table, entry };
}

describe("AgentSessionTable: what a commit exports with a session", () => {
  it("keeps a frozen copy of a kept reply: exported unwalked, and the author's later changes stay out", async () => {
    const { table, entry } = tableWith("s");
    const output = Array.from({ length: 30 }, (_, i) => ({ type: "message", content: `m${i}` }));
    const response = { id: "resp_1", output };
    const stored = await table.runActivation(entry, true, () =>
      Promise.resolve({ response, cookies: { model: "1" } }),
    );
    expect(entry.completedReply).toBe(stored);
    expect(Object.isFrozen(stored.response)).toBe(true);
    expect(stored.response).toEqual(response);
    output.push({ type: "late", content: "after the reply" });
    const session = exportedSession(table, "s", { own: 1 }) as Record<string, unknown>;
    expect(
      (session.completed_reply as { response: { output: unknown[] } }).response.output,
    ).toHaveLength(30);
    // The kept reply costs the commit no walk: as much as a session without one.
    const withoutReply = { ...session, completed_reply: null };
    expect(objectsWalked(() => encodeJson(session))).toBe(
      objectsWalked(() => encodeJson(withoutReply)),
    );
  });

  it("keeps a reply that is not JSON as it is: the commit fails with 422 naming the episode and the path", async () => {
    const { table, entry } = tableWith("s");
    const response = { id: "resp_1", when: new Date(0) };
    await table.runActivation(entry, true, () => Promise.resolve({ response }));
    const record = {
      episode_id: EPISODE,
      session_key: "s",
      session: exportedSession(table, "s", {}),
    };
    let refused: unknown;
    try {
      encodeRecordLine(record as never);
    } catch (error) {
      refused = error;
    }
    expect(refused).toBeInstanceOf(CheckpointStateError);
    expect((refused as CheckpointStateError).status).toBe(422);
    expect((refused as CheckpointStateError).detail).toMatch(
      /episode 'r' is not JSON: \$\.session\.completed_reply\.response\.when: a Date is not JSON/,
    );
  });

  it("does not copy a reply it does not keep", async () => {
    const { table, entry } = tableWith("s");
    const response = { id: "resp_1" };
    const stored = await table.runActivation(entry, false, () => Promise.resolve({ response }));
    expect(stored.response).toBe(response);
    expect(entry.completedReply).toBeNull();
  });

  it("keeps its own frozen copy of a seed request", async () => {
    const table = new AgentSessionTable<unknown>({ receiptWindowMs: () => 0 });
    const request = seedRequest();
    await table.seed({
      key: "s",
      episode: EPISODE,
      request,
      hadCookie: false,
      build: () => Promise.resolve({ state: { n: 1 } }),
      register: () => undefined,
      retiredWhileBuilding: () => Promise.resolve(),
    });
    const kept = table.get("s")?.request;
    expect(kept).toEqual(request);
    expect(kept).not.toBe(request);
    expect(Object.isFrozen(kept?.task_id)).toBe(true);
    (request as { agent_session_id: string }).agent_session_id = "changed by its holder";
    expect(kept?.agent_session_id).toBe("s");
    const session = exportedSession(table, "s", { request: kept }) as Record<string, unknown>;
    expect(objectsWalked(() => encodeJson(session))).toBe(
      objectsWalked(() => encodeJson({ ...session, request: null })),
    );
  });
});
