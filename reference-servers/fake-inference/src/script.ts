/**
 * The scripted turn policy: which message the fake model answers with. The turn a call plays is
 * the number of assistant messages already in its conversation (clamped to the script's last
 * turn), so replaying a conversation replays the same answer.
 *
 * @module
 */
import { fromCaptureKey } from "gym-participant-sdk";
import { z } from "zod";
import type { ReplyMessage } from "./chat-template.js";

/** One scripted turn: tool calls, or a final text answer. */
export const TurnSchema = z.union([
  z.strictObject({
    tool_calls: z
      .array(
        z.strictObject({
          name: z.string().min(1),
          arguments: z.record(z.string(), z.unknown()).default({}),
        }),
      )
      .min(1),
  }),
  z.strictObject({ content: z.string() }),
]);
/** One scripted turn. */
export type Turn = z.infer<typeof TurnSchema>;

/**
 * The body of `POST /_ctl/script`; it replaces the whole script. A call uses the script of its
 * rollout (by capture key, then by bare rollout ID), else `default`, else the built-in script:
 * one call of the first tool offered when tools are offered (its required parameters filled in,
 * see {@link exampleArguments}), then `"done"`.
 */
export const ScriptSchema = z
  .strictObject({
    default: z.array(TurnSchema).min(1).optional(),
    per_rollout: z.record(z.string(), z.array(TurnSchema).min(1)).default({}),
  })
  .meta({ id: "FakeInferenceScript" });
/** The scripted turn policy. */
export type Script = z.infer<typeof ScriptSchema>;

const DONE: Turn = { content: "done" };

/** The first tool offered, in chat (`function.name`) or Responses (`name`) form. */
function firstTool(
  tools: readonly unknown[] | undefined,
): { name: string; parameters: unknown } | null {
  const tool = tools?.[0] as
    | { name?: unknown; parameters?: unknown; function?: { name?: unknown; parameters?: unknown } }
    | undefined;
  const name = tool?.function?.name ?? tool?.name;
  if (typeof name !== "string" || name.length === 0) return null;
  return { name, parameters: tool?.function?.parameters ?? tool?.parameters };
}

/** A value of each JSON Schema type a scripted call sends for a required parameter. */
const EXAMPLE_VALUES: Readonly<Record<string, unknown>> = {
  integer: 1,
  number: 1,
  string: "x",
  boolean: true,
  array: [],
  object: {},
};

/**
 * Arguments for a tool's JSON Schema `parameters`: every required property gets a value of its
 * type (`1` for numbers, so a counter's `{count}` increments by one), the others are left out.
 *
 * @example
 * exampleArguments({ type: "object", properties: { count: { type: "integer" } }, required: ["count"] });
 * // { count: 1 }
 */
export function exampleArguments(parameters: unknown): Record<string, unknown> {
  const schema = parameters as { properties?: unknown; required?: unknown } | null | undefined;
  const properties = (schema?.properties ?? {}) as Record<string, { type?: unknown } | undefined>;
  const required = Array.isArray(schema?.required) ? schema.required : [];
  const args: Record<string, unknown> = {};
  for (const key of required) {
    if (typeof key !== "string") continue;
    const type = properties[key]?.type;
    args[key] =
      typeof type === "string" && Object.hasOwn(EXAMPLE_VALUES, type) ? EXAMPLE_VALUES[type] : null;
  }
  return args;
}

function bareRolloutId(key: string): string | null {
  try {
    return fromCaptureKey(key).rollout_id;
  } catch {
    return null;
  }
}

/** What picks a call's turn. */
export interface TurnQuery {
  /** The call's rollout (capture key), or null for an untagged call. */
  readonly rollout: string | null;
  /** The conversation's roles, in order. */
  readonly roles: readonly string[];
  /** The tools the request offers. */
  readonly tools: readonly unknown[] | undefined;
}

/** Holds the current script and answers which message a call generates. */
export class TurnScript {
  #script: Script = { per_rollout: {} };

  /** Replaces the script. */
  set(script: Script): void {
    this.#script = script;
  }

  /**
   * The reply of a call. Tool call IDs are `call_<turn>_<i>`: stable, so a replayed or continued
   * call answers exactly what the original would have.
   */
  replyFor(query: TurnQuery): ReplyMessage {
    const turns = this.#turnsOf(query);
    const played = query.roles.filter((role) => role === "assistant").length;
    const index = Math.min(played, turns.length - 1);
    const turn = turns[index] as Turn;
    if ("content" in turn) return { content: turn.content };
    return {
      toolCalls: turn.tool_calls.map((call, i) => ({
        id: `call_${index}_${i}`,
        name: call.name,
        arguments: JSON.stringify(call.arguments),
      })),
    };
  }

  #turnsOf(query: TurnQuery): readonly Turn[] {
    const { per_rollout: perRollout } = this.#script;
    if (query.rollout !== null) {
      // Own keys only: a rollout named `constructor` has no script unless one was given.
      const own = Object.hasOwn(perRollout, query.rollout) ? perRollout[query.rollout] : undefined;
      if (own !== undefined) return own;
      const bare = bareRolloutId(query.rollout);
      const shared =
        bare === null || !Object.hasOwn(perRollout, bare) ? undefined : perRollout[bare];
      if (shared !== undefined) return shared;
    }
    if (this.#script.default !== undefined) return this.#script.default;
    const tool = firstTool(query.tools);
    if (tool === null) return [DONE];
    const call = { name: tool.name, arguments: exampleArguments(tool.parameters) };
    return [{ tool_calls: [call] }, DONE];
  }
}
