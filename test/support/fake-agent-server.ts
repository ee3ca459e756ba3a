/**
 * A scripted fake agent server speaking the agent session wire (see docs/agent.md), for
 * environment-server tests. Built on the recording {@link ScriptedServer} (failures, holds,
 * waits: see `fake-resources-server.ts`).
 *
 * ## Routes (each also under `/ng-rollout/<capture key>/`)
 * - `POST /v1/agent_sessions`: `{agent_session_id}` echoed, `Set-Cookie: agent_session=<id>`,
 *   and `x-ng-checkpoint-restart: 1` when `settings.restart`.
 * - `POST /v1/responses` (an activation; the session comes from the `agent_session` cookie,
 *   else 409): `settings.response` (default: an assistant message `"done"`), plus
 *   `settings.activationCookies` as `Set-Cookie`. With `x-ng-agent-activation` equal to the
 *   session's last completed index, it answers with that activation's stored reply instead
 *   (counted in {@link FakeAgentServer.replayed}), as a checkpointing agent does.
 * - `POST /v1/agent_sessions/close`: `{agent_session_id, agent_observations, resources_cookies}`
 *   from `settings.observations` (default `{agent_session_id, activations}`) and
 *   `settings.closeResourcesCookies` (default null); the session is closed (later activations
 *   get 409). {@link FakeAgentServer.snapshotSessions} / `restoreSessions` stand in for the
 *   agent's own checkpoint and restore.
 *
 * @example
 * const agent = await startFakeAgentServer({ observations: { turns: 1 } });
 * const hold = agent.hold("/v1/responses");
 * await hold.arrived;
 * hold.release();
 */
import { ScriptedServer, type FakeCall } from "./fake-resources-server.js";

/** The cookie a fake agent sets on a seed. */
export const AGENT_COOKIE = "agent_session";

/** What the fake agent answers; change them between calls as a test needs. */
export interface FakeAgentSettings {
  /** Send `x-ng-checkpoint-restart: 1` on seed replies. @default false */
  restart: boolean;
  /** The activation reply; null: an assistant message `"done"`. @default null */
  response: Record<string, unknown> | null;
  /** Cookies set on activation replies. @default {} */
  activationCookies: Record<string, string>;
  /** `agent_observations` of close replies; undefined: `{agent_session_id, activations}`. */
  observations?: unknown;
  /** `resources_cookies` of close replies. @default null */
  closeResourcesCookies: Record<string, string> | null;
}

/** A fake agent server. */
export interface FakeAgentServer extends ScriptedServer {
  readonly settings: FakeAgentSettings;
  /** Activations answered from a stored reply. */
  readonly replayed: FakeCall[];
  /** A copy of the sessions, as an agent checkpoint would keep them. */
  snapshotSessions(): Map<string, FakeSession>;
  /** Replaces the sessions with a snapshot, as an agent restore would. */
  restoreSessions(snapshot: Map<string, FakeSession>): void;
}

/** An agent session as the fake keeps it. */
export interface FakeSession {
  /** The index of the last completed activation. */
  completed: number;
  /** Its reply. */
  reply: Record<string, unknown> | null;
  closed: boolean;
}

/** The reply of an activation: an assistant message. */
export function fakeResponse(id: string, text = "done"): Record<string, unknown> {
  return {
    id,
    object: "response",
    status: "completed",
    output: [
      {
        type: "message",
        id: `msg-${id}`,
        role: "assistant",
        status: "completed",
        content: [{ type: "output_text", text, annotations: [] }],
      },
    ],
  };
}

/** Starts a fake agent server on a free port. */
export async function startFakeAgentServer(
  settings: Partial<FakeAgentSettings> = {},
): Promise<FakeAgentServer> {
  const s: FakeAgentSettings = {
    restart: false,
    response: null,
    activationCookies: {},
    closeResourcesCookies: null,
    ...settings,
  };
  const sessions = new Map<string, FakeSession>();
  const server: FakeAgentServer = Object.assign(new ScriptedServer(), {
    settings: s,
    replayed: [] as FakeCall[],
    snapshotSessions: () => structuredClone(sessions),
    restoreSessions: (snapshot: Map<string, FakeSession>) => {
      sessions.clear();
      for (const [id, session] of structuredClone(snapshot)) sessions.set(id, session);
    },
  });
  const idOf = (call: FakeCall): string =>
    String((call.body as { agent_session_id?: unknown } | undefined)?.agent_session_id);
  server
    .route("/v1/agent_sessions", (call) => {
      const id = idOf(call);
      if (!sessions.has(id)) sessions.set(id, { completed: 0, reply: null, closed: false });
      const headers: Record<string, string> = { "set-cookie": `${AGENT_COOKIE}=${id}; Path=/` };
      if (s.restart) headers["x-ng-checkpoint-restart"] = "1";
      return { headers, body: { agent_session_id: id } };
    })
    .route("/v1/responses", (call) => {
      const session = sessions.get(call.cookies[AGENT_COOKIE] ?? "");
      if (session === undefined || session.closed) {
        return { status: 409, body: { detail: "Unknown or closing agent_session_id" } };
      }
      const cookies = Object.entries(s.activationCookies).map(([k, v]) => `${k}=${v}; Path=/`);
      const headers = cookies.length > 0 ? { "set-cookie": cookies } : undefined;
      const index = Number(call.headers["x-ng-agent-activation"]);
      if (index === session.completed && session.reply !== null) {
        server.replayed.push(call);
        return { headers, body: session.reply };
      }
      session.completed += 1;
      session.reply = s.response ?? fakeResponse(`resp-${call.n}`);
      return { headers, body: session.reply };
    })
    .route("/v1/agent_sessions/close", (call) => {
      const id = idOf(call);
      const observations =
        "observations" in s && s.observations !== undefined
          ? s.observations
          : { agent_session_id: id, activations: sessions.get(id)?.completed ?? 0 };
      const session = sessions.get(id);
      if (session !== undefined) session.closed = true;
      return {
        body: {
          agent_session_id: id,
          agent_observations: observations,
          resources_cookies: s.closeResourcesCookies,
        },
      };
    });
  await server.listen();
  return server;
}
