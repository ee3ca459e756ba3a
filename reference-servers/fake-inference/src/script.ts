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
 * one call of the first tool offered with `{}` arguments when tools are offered, then `"done"`.
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

/** The name of the first tool offered, in chat (`function.name`) or Responses (`name`) form. */
function firstToolName(tools: readonly unknown[] | undefined): string | null {
  const tool = tools?.[0] as { name?: unknown; function?: { name?: unknown } } | undefined;
  const name = tool?.function?.name ?? tool?.name;
  return typeof name === "string" && name.length > 0 ? name : null;
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
      const own = perRollout[query.rollout];
      if (own !== undefined) return own;
      const bare = bareRolloutId(query.rollout);
      const shared = bare === null ? undefined : perRollout[bare];
      if (shared !== undefined) return shared;
    }
    if (this.#script.default !== undefined) return this.#script.default;
    const tool = firstToolName(query.tools);
    return tool === null ? [DONE] : [{ tool_calls: [{ name: tool, arguments: {} }] }, DONE];
  }
}
