/**
 * %PACKAGE_NAME%: an `exported` resources server. Each session adds amounts to a running total;
 * `/verify` rewards a total equal to the task's `target`. Totals are exported at every checkpoint
 * and restored after a crash, so a rollout continued in a fresh process is verified on its real
 * total. Run it: `npm run serve` (it builds first); see README.md.
 */
import { z } from "zod";
import {
  ResourcesServer,
  dataRoute,
  isMainModule,
  resourcesSession,
  serveMain,
  type JsonValue,
  type SessionRouteInput,
} from "gym-participant-sdk";

const Total = z.number();

/** The tool: `/add {"amount": n}` adds to the calling session's total. */
function addTool(totals: Map<string, number>) {
  return dataRoute({
    method: "post",
    path: "/add",
    summary: "Add an amount to this session's total",
    request: z.strictObject({ amount: z.number() }),
    handler: (input) => {
      const id = resourcesSession(input).id;
      const total = totals.get(id);
      // No total for a session nobody seeded: nothing would ever free it.
      if (total !== undefined) totals.set(id, total + input.body.amount);
      return { total: totals.get(id) ?? null };
    },
  });
}

export default class TallyServer extends ResourcesServer {
  static override checkpointMode = "exported" as const;
  static override checkpointVerify = "wait" as const;
  readonly totals = new Map<string, number>();

  protected override seedSession(input: SessionRouteInput) {
    this.totals.set(input.session.id, 0);
    return super.seedSession(input);
  }

  protected override tools() {
    return [addTool(this.totals)];
  }

  protected override verify({ body, session }: SessionRouteInput<Record<string, unknown>>) {
    return { reward: this.totals.get(session.id) === body.target ? 1 : 0 };
  }

  protected override closeSession(input: SessionRouteInput) {
    this.totals.delete(input.session.id);
    return super.closeSession(input);
  }

  protected override async exportSessionStates({ sessionIds }: { sessionIds: readonly string[] }) {
    const held = sessionIds.filter((id) => this.totals.has(id)); // one left out counts as dropped
    return Object.fromEntries(held.map((id) => [id, this.totals.get(id) ?? 0]));
  }

  protected override async restoreSessionStates({ states }: { states: Record<string, JsonValue> }) {
    const totals = Object.entries(states).map(([id, total]) => [id, Total.parse(total)] as const);
    for (const [id, total] of totals) this.totals.set(id, total); // installed once all are valid
  }

  protected override async retireSessionState({ sessionId }: { sessionId: string }) {
    this.totals.delete(sessionId);
  }
}

if (isMainModule(import.meta.url)) await serveMain(TallyServer);
