/** The counter, an `exported` resources server (docs/resources-server.md): a tool adds to a
 * per-session count; `/verify` rewards 1.0 only when the count equals the task's target. */
import { z } from "zod";
import { SessionStateServer, isMainModule, serveMain } from "gym-participant-sdk";
import type { SeedInput, VerifyInput } from "gym-participant-sdk";

const Task = z.looseObject({ initial_count: z.int().default(0), target: z.int().optional() });
const NativeSeed = z.looseObject({ resources_session_id: z.string(), task_data: Task });
const Counter = z.strictObject({ count: z.int(), target: z.int().nullable() }); // int: safe integers

export default class CounterServer extends SessionStateServer<z.infer<typeof Counter>> {
  protected override readonly stateSchema = Counter;
  // A native seed carries the task in `task_data`; a legacy seed is the task itself.
  override readonly seedRequest = z.union([NativeSeed.transform((seed) => seed.task_data), Task]);
  override readonly verifyRequest = z.looseObject({ expected_count: z.number().optional() });
  protected override initialState({ body: task }: SeedInput<this>) {
    return { count: task.initial_count, target: task.target ?? null };
  }
  protected override tools() {
    return [
      this.stateTool({
        path: "/increment_counter",
        summary: "Add to this session's counter",
        request: z.strictObject({ count: z.int() }), // required: a model leaving it out is told
        reply: z.strictObject({ success: z.boolean() }), // false: a session nobody seeded
        examples: { request: { count: 2 }, reply: { success: true } },
        handler: ({ body, state, setState }) => ({
          success: state !== undefined && setState({ ...state, count: state.count + body.count }),
        }),
      }),
      this.stateTool({
        path: "/get_counter_value",
        summary: "Read this session's counter",
        reply: z.strictObject({ count: z.int() }), // 0 for a session nobody seeded
        examples: { reply: { count: 2 } },
        handler: ({ state }) => ({ count: state?.count ?? 0 }),
      }),
    ];
  }
  protected override verify({ body, session }: VerifyInput<this>) {
    const counter = this.states.get(session.id);
    const target = body.expected_count ?? counter?.target;
    return { reward: counter !== undefined && counter.count === target ? 1.0 : 0.0 };
  }
}

if (isMainModule(import.meta.url)) await serveMain(CounterServer);
