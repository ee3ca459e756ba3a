/**
 * A checkpoint no commit writes, holding one agent session twice (the last record would win) or
 * one session under two episodes (the second would take it over): the Simple Agent refuses the
 * restore with 422 `invalid_checkpoint_state` naming the session, installs nothing, and restores
 * the checkpoint as committed into the same process afterwards. (The resources, environment and
 * policy-model participants refuse theirs likewise: see restore-crafted.test.ts and the
 * participants' unit tests.)
 */
import { afterEach, describe, expect, it } from "vitest";
import {
  Stack,
  activate,
  agentRecords,
  checkpoint,
  cleanup,
  closeSession,
  control,
  controlStatus,
  ep,
  restoreAndResume,
  seed,
  writeAgentRecords,
  type AgentRecordJson,
} from "../../support/simple-agent-harness.js";

afterEach(cleanup);

/** Two sessions, s1 of rollout r1 and s2 of r2, each after one activation, committed. */
async function committed() {
  const stack = new Stack({ checkpoint: true });
  await stack.model();
  const first = await stack.agent();
  for (const [session, rollout] of [
    ["s1", "r1"],
    ["s2", "r2"],
  ] as const) {
    const cookie = await seed(first.url, session, ep(rollout));
    await activate(first.url, cookie, rollout, { input: `hello ${session}` }, 1).expect(200);
  }
  const scope = [ep("r1"), ep("r2")];
  const dir = await checkpoint([first.url], "c1", scope);
  return { stack, dir, scope, records: await agentRecords(dir) };
}

function bySession(records: readonly AgentRecordJson[], key: string): AgentRecordJson {
  const found = records.find((r) => r.session_key === key);
  if (found === undefined) throw new Error(`no record of session ${key}`);
  return found;
}

describe("a restore of an agent checkpoint holding one session twice", () => {
  it.each([
    [
      "the same session twice",
      (records: AgentRecordJson[]) => [
        ...records,
        { ...bySession(records, "s1"), session: { ...bySession(records, "s1").session } },
      ],
      "agent session 's1' twice (episode 'r1')",
    ],
    [
      "one session under two episodes",
      (records: AgentRecordJson[]) =>
        records.map((r) => (r.session_key === "s2" ? { ...r, session_key: "s1" } : r)),
      "agent session 's1' twice (episodes 'r1' and 'r2')",
    ],
  ])(
    "refuses %s with 422, installs nothing, then restores as committed",
    async (_, craft, named) => {
      const { stack, dir, scope, records } = await committed();
      const crafted = await writeAgentRecords(craft(records), "c1");

      const fresh = await stack.agent();
      const refused = await control(fresh.url, "restore", {
        checkpoint_id: "c2",
        checkpoint_dir: crafted,
        episode_ids: scope,
      });
      expect(refused.status, JSON.stringify(refused.body)).toBe(422);
      expect(refused.body.error.code).toBe("invalid_checkpoint_state");
      expect(refused.body.error.detail).toContain(named);
      const after = (await controlStatus(fresh.url)) as unknown as {
        phase: string;
        report: { counts: { sessions: number } };
      };
      expect(after.phase).toBe("idle");
      expect(after.report.counts.sessions).toBe(0);

      // The checkpoint as committed restores into the same process, both sessions whole.
      await restoreAndResume(fresh.url, "c3", dir, scope);
      for (const [session, rollout] of [
        ["s1", "r1"],
        ["s2", "r2"],
      ] as const) {
        const closed = await closeSession(fresh.url, session, ep(rollout, 1));
        expect(closed.status, JSON.stringify(closed.body)).toBe(200);
        expect(closed.body.agent_observations, session).toMatchObject({ records: [{}] });
      }
    },
  );
});
