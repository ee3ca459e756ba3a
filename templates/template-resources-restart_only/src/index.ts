/**
 * %PACKAGE_NAME%: a `restart_only` resources server, the fail-closed default for state nobody
 * audited yet. Each session adds amounts to a running total and `/verify` rewards a total equal
 * to the task's `target`, but nothing is saved: a checkpoint reports its live rollouts as
 * restarts, and after a crash the controller starts them over. Turn it into an `exported` server
 * by implementing the three session hooks (see README.md).
 */
import { z } from "zod";
import {
  ResourcesServer,
  dataRoute,
  isMainModule,
  resourcesSession,
  serveMain,
  type CloseSessionInput,
  type SeedInput,
  type VerifyInput,
} from "gym-participant-sdk";

/** `/add`'s body: what to add. A body without a numeric `amount` is refused with 422 naming it. */
const AddRequestSchema = z.strictObject({
  amount: z.number().meta({ description: "What to add to this session's total" }),
});

/** `/add`'s reply: the session's total after the call (null for a session nobody seeded). */
const TotalReplySchema = z.strictObject({ total: z.number().nullable() });

/**
 * `/verify`'s body: the fields the verifier reads (the environment sends more, kept as they
 * are). The SDK answers with these fields plus `reward` and its defaults.
 */
const VerifyRequestSchema = z
  .looseObject({ target: z.number().meta({ description: "The total that earns a reward" }) })
  .meta({ example: { target: 5 } });

/** The tool: `/add {"amount": n}` adds to the calling session's total. */
function addTool(totals: Map<string, number>) {
  return dataRoute({
    method: "post",
    path: "/add",
    summary: "Add an amount to this session's total",
    request: AddRequestSchema,
    reply: TotalReplySchema,
    examples: { request: { amount: 2 }, reply: { total: 2 } },
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
  static override checkpointMode = "restart_only";
  static override checkpointVerify = "wait";
  readonly totals = new Map<string, number>();

  protected override seedSession(input: SeedInput<this>) {
    this.totals.set(input.session.id, 0);
    return super.seedSession(input);
  }

  protected override tools() {
    return [addTool(this.totals)];
  }

  override readonly verifyRequest = VerifyRequestSchema;

  protected override verify({ body, session }: VerifyInput<this>) {
    return { reward: this.totals.get(session.id) === body.target ? 1 : 0 };
  }

  protected override closeSession(input: CloseSessionInput) {
    this.totals.delete(input.session.id);
    return super.closeSession(input);
  }

  /** Runs when a rollout's attempt is retired (in every mode): free what the session holds. */
  protected override async retireSessionState({ sessionId }: { sessionId: string }) {
    this.totals.delete(sessionId);
  }
}

if (isMainModule(import.meta.url)) await serveMain(TallyServer);
