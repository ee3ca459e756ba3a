/**
 * Property: random interleavings of data requests (seed, tool, verify, close) with prepare,
 * commit and resume on a `stateless` or `exported` server, over HTTP through the real control
 * routes. Every request completes (none is refused with 409 `admission_closed`), nothing is
 * counted in flight once every reply is in, and a commit exports exactly the sessions tracked
 * at the cut (none for a stateless server, whose tracking still does not move during the cut).
 */
import { readFile } from "node:fs/promises";
import path from "node:path";
import fc from "fast-check";
import request from "supertest";
import { describe, expect, it } from "vitest";
import type { CheckpointMode, CheckpointVerify } from "#sdk/participants/resources/declarations.js";
import { dataRoute } from "#sdk/server/data-route.js";
import {
  ResourcesServer,
  resourcesSession,
  type SessionRouteInput,
} from "#sdk/server/resources-server.js";
import { encodeSessionCookie } from "#sdk/server/resources/session-cookie.js";
import { SessionSecret } from "#sdk/server/session-secret.js";
import type { JsonValue } from "#sdk/json/json-value.js";
import { makeTempDir, removeTempDir } from "../../support/test-participant.js";
import { CONTROL } from "../../support/control-routes.js";

const TOKEN = "resources-property-token";
const AUTH = `Bearer ${TOKEN}`;
const ROLLOUTS = 3;

/** Lets other requests interleave with a handler (widens the in-flight window). */
const yieldOnce = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

function propertyServer(mode: CheckpointMode, verify: CheckpointVerify) {
  return class Prop extends ResourcesServer {
    static override checkpointMode: CheckpointMode = mode;
    static override checkpointVerify: CheckpointVerify = verify;
    readonly states = new Map<string, number>();

    protected override async seedSession({ session }: SessionRouteInput) {
      await yieldOnce();
      if (!this.states.has(session.id)) this.states.set(session.id, 0);
      return {};
    }

    protected override tools() {
      return [
        dataRoute({
          method: "post",
          path: "/tool",
          summary: "Count",
          handler: async (input) => {
            const id = resourcesSession(input).id;
            await yieldOnce();
            if (this.states.has(id)) this.states.set(id, (this.states.get(id) ?? 0) + 1);
            return { count: this.states.get(id) ?? null };
          },
        }),
      ];
    }

    protected override async verify({ session }: SessionRouteInput<Record<string, unknown>>) {
      await yieldOnce();
      return { reward: this.states.has(session.id) ? 1 : 0 };
    }

    protected override async closeSession({ session }: SessionRouteInput) {
      await yieldOnce();
      this.states.delete(session.id);
      return { resources_session_id: session.id };
    }

    protected override exportSessionStates({ sessionIds }: { sessionIds: readonly string[] }) {
      const held = sessionIds.filter((id) => this.states.has(id));
      return Promise.resolve(
        Object.fromEntries(held.map((id) => [id, this.states.get(id) as JsonValue])),
      );
    }

    protected override restoreSessionStates() {
      return Promise.resolve();
    }

    protected override retireSessionState({ sessionId }: { sessionId: string }) {
      this.states.delete(sessionId);
      return Promise.resolve();
    }
  };
}

type Op =
  | { kind: "seed_session" | "tool" | "verify" | "close_session"; r: number; closeFollows: boolean }
  | { kind: "prepare" | "commit" | "resume" };

const dataOp = fc.record({
  kind: fc.constantFrom(
    "seed_session" as const,
    "tool" as const,
    "verify" as const,
    "close_session" as const,
  ),
  r: fc.integer({ min: 0, max: ROLLOUTS - 1 }),
  closeFollows: fc.boolean(),
});
const controlOp = fc.record({
  kind: fc.constantFrom("prepare" as const, "commit" as const, "resume" as const),
});
const ops = fc.array(
  fc.oneof({ weight: 3, arbitrary: dataOp }, { weight: 2, arbitrary: controlOp }),
  {
    minLength: 1,
    maxLength: 24,
  },
);

async function run(mode: CheckpointMode, verify: CheckpointVerify, plan: Op[]): Promise<void> {
  const Server = propertyServer(mode, verify);
  const server = new Server({
    name: "p",
    checkpoint: { enabled: true, control_auth_token: TOKEN },
    logLevel: "silent",
  });
  const { url } = await server.listen({ port: 0 });
  const participant = server.participant;
  if (participant === null) throw new Error("no participant");
  const key = SessionSecret.fromControlToken(TOKEN).keyFor("Prop___p");
  const sessions = Array.from({ length: ROLLOUTS }, (_, i) => `s${i}`);
  const tracked = (): string[] => sessions.filter((id) => participant.isOpen(id));
  const control = (op: string, body: Record<string, unknown>) =>
    request(url)
      .post(`${CONTROL}/${op}`)
      .set("Authorization", AUTH)
      .send({ deadline_ts: Date.now() / 1000 + 30, ...body });

  const replies: Promise<request.Response>[] = [];
  const dirs: string[] = [];
  let phase: "idle" | "prepared" | "committed" = "idle";
  let checkpoint = 0;
  let cut: string[] = [];
  try {
    for (const op of plan) {
      if (!("r" in op)) {
        if (op.kind === "prepare" && phase === "idle") {
          checkpoint += 1;
          const res = await control("prepare", { checkpoint_id: `c${checkpoint}` });
          expect(res.body.phase).toBe("prepared");
          cut = tracked();
          phase = "prepared";
        } else if (op.kind === "commit" && phase === "prepared") {
          const dir = await makeTempDir();
          dirs.push(dir);
          const res = await control("commit", {
            checkpoint_id: `c${checkpoint}`,
            checkpoint_dir: dir,
          });
          expect(res.status, JSON.stringify(res.body)).toBe(200);
          expect(tracked()).toEqual(cut);
          const base = path.join(dir, "gym", "resources", "p");
          const manifest = JSON.parse(await readFile(path.join(base, "manifest.json"), "utf8")) as {
            records_file: string;
          };
          const exported = (await readFile(path.join(base, manifest.records_file), "utf8"))
            .split("\n")
            .filter((line) => line.trim() !== "")
            .map((line) => (JSON.parse(line) as { session_id: string }).session_id)
            .sort();
          expect(exported).toEqual(mode === "exported" ? cut : []);
          phase = "committed";
        } else if (op.kind === "resume" && phase !== "idle") {
          await control("resume", { checkpoint_id: `c${checkpoint}` }).expect(200);
          phase = "idle";
        }
        continue;
      }
      let call = request(url)
        .post(`/ng-rollout/r${op.r}/${op.kind}`)
        .set("Cookie", `Prop___p=${encodeSessionCookie(`s${op.r}`, key)}`);
      if (op.kind === "verify" && op.closeFollows) {
        call = call.set("x-ng-checkpoint-close-follows", "1");
      }
      replies.push(Promise.resolve(call.send({})));
    }
    if (phase !== "idle") {
      await control("resume", { checkpoint_id: `c${checkpoint}` }).expect(200);
    }
    for (const reply of await Promise.all(replies)) {
      expect(reply.body?.error?.code).not.toBe("admission_closed");
      expect(reply.status, JSON.stringify(reply.body)).toBe(200);
    }
    await expect
      .poll(() => participant.readiness().counts.inflight, { timeout: 5000, interval: 5 })
      .toBe(0);
    expect(participant.ready()).toBe(true);
  } finally {
    await Promise.allSettled(replies);
    await server.close();
    for (const dir of dirs) await removeTempDir(dir);
  }
}

describe("resources checkpoint interleavings", () => {
  it("every request completes, nothing stays in flight, and a commit exports the sessions tracked at the cut", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom("stateless" as const, "exported" as const),
        fc.constantFrom("wait" as const, "replay" as const),
        ops,
        run,
      ),
      { numRuns: 40 },
    );
  }, 60_000);
});
