/**
 * The counter: an `exported` resources server. A tool increments a per-session counter; `/verify`
 * rewards 1.0 only when the count equals the task's target, so the right reward after a crash
 * needs the restored state; the base class's `/aggregate_metrics` sums up many verify responses.
 * See docs/resources-server.md for a walk-through.
 */
import { z } from "zod";
import {
  InvalidRequestError,
  ResourcesServer,
  dataRoute,
  isMainModule,
  resourcesSession,
  serveMain,
  type JsonValue,
  type SessionRouteInput,
} from "gym-participant-sdk";

const Task = z.looseObject({ initial_count: z.int().default(0), target: z.int().optional() });
const NativeSeed = z.looseObject({ resources_session_id: z.string(), task_data: Task });
const Seed = z.union([NativeSeed, Task]);
const Counter = z.strictObject({ count: z.int(), target: z.int().nullable() });
type Counter = z.infer<typeof Counter>;

export default class CounterServer extends ResourcesServer {
  static override checkpointMode = "exported" as const;
  readonly counters = new Map<string, Counter>();

  protected override seedRequestSchema() {
    return Seed;
  }

  protected override seedSession({ body, session }: SessionRouteInput) {
    const native = NativeSeed.safeParse(body);
    const task = native.success ? native.data.task_data : Task.parse(body);
    if (native.success) session.replaceId(native.data.resources_session_id);
    if (!this.counters.has(session.id)) {
      this.counters.set(session.id, { count: task.initial_count, target: task.target ?? null });
    }
    return native.success ? { resources_session_id: session.id } : {};
  }

  protected override tools() {
    return [
      dataRoute({
        method: "post",
        path: "/increment_counter",
        summary: "Add to this session's counter",
        // `count` is required, as in the reference counter: a model that leaves it out made a
        // mistake the tool result should tell it about.
        request: z.strictObject({ count: z.int() }),
        handler: (input) => {
          const id = resourcesSession(input).id;
          const counter = this.counters.get(id);
          // No state for a session nobody seeded: nothing would ever free it.
          if (counter === undefined) return { success: false };
          const count = counter.count + input.body.count;
          if (!Number.isSafeInteger(count)) {
            const message = "count would take the counter past the largest safe integer";
            throw new InvalidRequestError(message, [{ path: ["count"], message }]);
          }
          this.counters.set(id, { ...counter, count });
          return { success: true };
        },
      }),
      dataRoute({
        method: "post",
        path: "/get_counter_value",
        summary: "Read this session's counter",
        handler: (input) => ({ count: this.counters.get(resourcesSession(input).id)?.count ?? 0 }),
      }),
    ];
  }

  protected override verify({ body, session }: SessionRouteInput<Record<string, unknown>>) {
    const counter = this.counters.get(session.id);
    const target = typeof body.expected_count === "number" ? body.expected_count : counter?.target;
    return { reward: counter !== undefined && counter.count === target ? 1.0 : 0.0 };
  }

  protected override closeSession({ session }: SessionRouteInput) {
    this.counters.delete(session.id);
    return { resources_session_id: session.id };
  }

  protected override async exportSessionStates({ sessionIds }: { sessionIds: readonly string[] }) {
    const held = sessionIds.filter((id) => this.counters.has(id)); // a dropped session is left out
    return Object.fromEntries(held.map((id) => [id, this.counters.get(id) as JsonValue]));
  }

  /** Each restored state is checked against this before the hook runs (422 naming the episode). */
  protected override sessionStateSchema() {
    return Counter;
  }

  protected override async restoreSessionStates({ states }: { states: Record<string, JsonValue> }) {
    // Checked already by sessionStateSchema(): every state is a Counter.
    for (const [id, state] of Object.entries(states)) this.counters.set(id, state as Counter);
  }

  protected override async retireSessionState({ sessionId }: { sessionId: string }) {
    this.counters.delete(sessionId);
  }
}

if (isMainModule(import.meta.url)) await serveMain(CounterServer);
