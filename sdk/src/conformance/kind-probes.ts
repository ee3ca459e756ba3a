/**
 * What the kit does on each kind's data routes, where a check needs to touch them whatever the
 * kind: start a session that a commit exports (resources servers of mode exported, agents), and
 * send a request of one attempt, to see it refused as stale.
 */
import { fromCaptureKey } from "../identity/episode-id.js";
import type { CheckContext } from "./requirement.js";
import { CookieJar, describeReply, type Reply } from "./target.js";
import { expectThat } from "./requirement.js";

/** A session the kit started: its rollout and the client's cookies. */
export interface StartedSession {
  readonly rollout: string;
  readonly jar: CookieJar;
}

/** An agent's `/v1/agent_sessions` body for attempt `attempt` of `rollout`. */
export function agentSeedBody(rollout: string, attempt = 0): Record<string, unknown> {
  return {
    agent_session_id: `${rollout}-s${attempt}`,
    episode_id: { rollout_id: rollout, attempt },
    task_id: { taskset: "conformance", task_id: rollout },
    tool_accesses: [],
  };
}

/** A call a model's `/v1/responses` accepts. */
export const MODEL_CALL = Object.freeze({ model: "conformance", input: "Say hello." });

/** Whether the server keeps sessions a commit exports (so a restore has something to install). */
export function exportsSessions(context: CheckContext): string | null {
  const { kind, mode } = context.profile;
  if (kind === "agent") return null;
  if (kind === "resources" && mode === "exported") return null;
  return `only servers whose sessions a commit exports (resources of mode exported, agents; this is ${kind}${mode === null ? "" : ` of mode ${mode}`})`;
}

/** Starts a session of `rollout` attempt 0 that a commit exports; the start must succeed. */
export async function startSession(
  context: CheckContext,
  rollout: string,
): Promise<StartedSession> {
  const jar = new CookieJar();
  const reply =
    context.profile.kind === "agent"
      ? await context.target.data("/v1/agent_sessions", agentSeedBody(rollout), { jar })
      : await context.target.data("/seed_session", context.seedBody, { rollout, jar });
  expectThat(
    reply.status >= 200 && reply.status < 300,
    () =>
      `the seed of ${rollout} answered ${describeReply(reply)}${context.profile.kind === "resources" ? " (pass the body the server needs with --seed-body)" : ""}`,
  );
  return { rollout, jar };
}

/**
 * A request of the attempt `key` names (a capture key) on the kind's data routes, one a server
 * must refuse with 409 `stale_attempt` once that attempt is retired: a resources seed, an
 * agent seed, an environment `/run`, a model generation call.
 */
export async function attemptRequest(context: CheckContext, key: string): Promise<Reply> {
  const episode = fromCaptureKey(key);
  const { target } = context;
  switch (context.profile.kind) {
    case "resources":
      return await target.data("/seed_session", context.seedBody, {
        rollout: key,
        jar: new CookieJar(),
      });
    case "agent":
      return await target.data(
        "/v1/agent_sessions",
        agentSeedBody(episode.rollout_id, episode.attempt),
        { jar: new CookieJar() },
      );
    case "environment":
      return await target.data("/run", {
        episode_id: { rollout_id: episode.rollout_id, attempt: episode.attempt },
        task: context.task,
      });
    case "model":
      return await target.data("/v1/responses", MODEL_CALL, { rollout: key });
    default: {
      const never: never = context.profile.kind;
      throw new Error(`unknown kind ${String(never)}`);
    }
  }
}
