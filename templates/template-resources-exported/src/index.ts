/**
 * %PACKAGE_NAME%: an `exported` resources server. Each session adds amounts to a running total;
 * `/verify` rewards a total equal to the task's `target`. Totals are exported at every checkpoint
 * and restored after a crash, so a rollout continued in a fresh process is verified on its real
 * total. Run it: `npm run serve` (it builds first); see README.md.
 */
import { z } from "zod";
import { SessionStateServer, isMainModule, serveMain } from "gym-participant-sdk";
import type { VerifyInput } from "gym-participant-sdk";

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

export default class TallyServer extends SessionStateServer<number> {
  static override checkpointVerify = "wait";
  /** One session's state: its total. Restored states are checked against it first. */
  protected override readonly stateSchema = z.number();

  protected override initialState() {
    return 0;
  }

  protected override tools() {
    return [
      // `/add {"amount": n}` adds to the calling session's total (none for an unseeded session).
      this.stateTool({
        path: "/add",
        summary: "Add an amount to this session's total",
        request: AddRequestSchema,
        reply: TotalReplySchema,
        examples: { request: { amount: 2 }, reply: { total: 2 } },
        handler: (call) => {
          if (call.state !== undefined) call.setState(call.state + call.body.amount);
          return { total: this.states.get(call.session.id) ?? null };
        },
      }),
    ];
  }

  override readonly verifyRequest = VerifyRequestSchema;

  protected override verify({ body, session }: VerifyInput<this>) {
    return { reward: this.states.get(session.id) === body.target ? 1 : 0 };
  }
}

if (isMainModule(import.meta.url)) await serveMain(TallyServer);
