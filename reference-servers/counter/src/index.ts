/** The counter, an `exported` resources server (docs/resources-server.md): a tool adds to a
 * per-session count; `/verify` rewards 1.0 only when the count equals the task's target. */
import { z } from "zod";
import { SessionStateServer, isMainModule, serveMain } from "gym-participant-sdk";
import type { SessionRouteInput } from "gym-participant-sdk";

const Task = z.looseObject({ initial_count: z.int().default(0), target: z.int().optional() });
const NativeSeed = z.looseObject({ resources_session_id: z.string(), task_data: Task });
const Counter = z.strictObject({ count: z.int(), target: z.int().nullable() }); // int: safe integers

export default class CounterServer extends SessionStateServer<z.infer<typeof Counter>> {
  protected override readonly stateSchema = Counter;
  protected override readonly seedSchema = z.union([NativeSeed, Task]);
  protected override initialState({ body }: SessionRouteInput) {
    const task = Task.parse(NativeSeed.safeParse(body).data?.task_data ?? body);
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
        handler: (call) => ({
          success:
            call.state !== undefined &&
            call.setState({ ...call.state, count: call.state.count + call.body.count }),
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
  protected override verify({ body, session }: SessionRouteInput<Record<string, unknown>>) {
    const counter = this.states.get(session.id);
    const target = typeof body.expected_count === "number" ? body.expected_count : counter?.target;
    return { reward: counter !== undefined && counter.count === target ? 1.0 : 0.0 };
  }
}

if (isMainModule(import.meta.url)) await serveMain(CounterServer);
