/**
 * An agent's session hooks are typed by what they produce: a restore returns its sessions (a
 * hook that returns nothing, or a state of another type, does not compile) and there is no
 * install call to forget. The `@ts-expect-error` lines are checked by the repository's
 * typecheck (npm run lint): each fails the lint if the typing it pins were missing.
 */
import { describe, expect, expectTypeOf, it } from "vitest";
import {
  AgentServer,
  type AgentSessionsExport,
  type AgentSessionsRestore,
  type RebuiltAgentSession,
  type RespondResult,
  type RestoreAgentSessionsInput,
} from "#sdk/index.js";

interface Turns {
  readonly turns: number;
}

class Base extends AgentServer<Turns> {
  static override checkpointSessionsSupported = true;
  protected override respond(): Promise<RespondResult> {
    return Promise.resolve({ response: {} });
  }
  protected override exportAgentSessions(): AgentSessionsExport {
    return new Map<string, Record<string, unknown>>();
  }
  protected override restoreAgentSessions({
    sessions,
  }: RestoreAgentSessionsInput): AgentSessionsRestore<Turns> {
    return new Map(sessions.map((s) => [s.sessionKey, { request: null, state: { turns: 0 } }]));
  }
  protected override retireAgentSession() {
    return Promise.resolve();
  }
}

describe("agent session hook typing", () => {
  it("a restore returns its sessions rebuilt; returning nothing or another state is refused", () => {
    class ReturnsNothing extends Base {
      // @ts-expect-error a restore must return the sessions it rebuilt
      protected override async restoreAgentSessions(): Promise<void> {}
    }
    class WrongState extends Base {
      // @ts-expect-error the rebuilt state must be the server's State
      protected override restoreAgentSessions() {
        return new Map([["s", { request: null, state: { turns: "many" } }]]);
      }
    }
    class PlainObject extends Base {
      protected override restoreAgentSessions() {
        const out: Record<string, RebuiltAgentSession<Turns>> = {};
        out["__proto__"] = { request: null, state: { turns: 1 } };
        return out;
      }
    }
    expect([ReturnsNothing, WrongState, PlainObject]).toHaveLength(3);
    expectTypeOf<Map<string, RebuiltAgentSession<Turns>>>().toExtend<AgentSessionsRestore<Turns>>();
    expectTypeOf<Record<string, { a: 1 }>>().toExtend<AgentSessionsExport>();
  });

  it("there is no install call: restored sessions are only what the hook returns", () => {
    class Installs extends Base {
      protected override restoreAgentSessions({ sessions }: RestoreAgentSessionsInput) {
        // @ts-expect-error installRestoredSession is gone
        this.installRestoredSession("s", null, { turns: 0 });
        return super.restoreAgentSessions({ sessions, signal: new AbortController().signal });
      }
    }
    expect(Installs.name).toBe("Installs");
  });
});
