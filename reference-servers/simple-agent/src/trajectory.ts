/**
 * The turn loop's state and trajectory: what a boundary snapshot holds, how it is validated and
 * loaded on restore, and the trajectory and observation shapes.
 *
 * @module
 */
import { z } from "zod";
import { frozenJson, type BoundarySnapshot, type JsonValue } from "gym-participant-sdk";
import { type CookieJar } from "gym-participant-sdk/protocol";

/** A Responses input or output item, as JSON. */
export type Item = Record<string, unknown>;

/** One model call of the trajectory, stored without its `question` (rebuilt from the outputs). */
export interface Turn {
  /** The loop step (1-based model call number within the activation). */
  readonly turn: number;
  /** The reply's output items other than reasoning. */
  readonly answer: readonly Item[];
  /** The reply's reasoning texts. */
  readonly reasoning: readonly string[];
  /** Function calls the loop had received up to and including this turn. */
  readonly tool_call_count: number;
  /** The reply's response id, or null when it had none (a gap records it). */
  readonly model_call: string | null;
  /** Set on the last turn of a legacy `/run` when its verdict says. */
  readonly resolved?: boolean;
}

/** One tool call of the trajectory. */
export interface ToolRecord {
  readonly turn: number;
  readonly call_id: string;
  readonly name: string;
  readonly arguments: string;
  readonly status: "completed" | "failed";
  /** `http_<status>` for a non-2xx reply, `invalid_arguments` when none was sent, else null. */
  readonly error_type: string | null;
  readonly started_at: string;
  readonly duration_ms: number;
}

/** A reference from the trajectory to the policy model's record of a call. */
export interface ModelCallRef {
  readonly turn: number;
  readonly response_id: string;
}

/** Something the trajectory could not record. */
export interface Gap {
  readonly kind: string;
  readonly detail: string;
}

/** The trajectory of one activation (the reply's `_ng_trajectory`). */
export interface Trajectory {
  readonly invocations: readonly {
    readonly invocation_id: string;
    readonly status: "completed" | "incomplete";
    readonly model_calls: readonly ModelCallRef[];
    readonly conversation: readonly Item[];
  }[];
  readonly turns: readonly (Turn & { readonly question: readonly Item[] })[];
  readonly tool_calls: readonly ToolRecord[];
  readonly gaps: readonly Gap[];
}

/** A session's observations, returned at close. */
export interface ObservationBundle {
  readonly source: "simple_agent";
  /** One record per activation that collected a trajectory: its invocation, turns and tool calls. */
  readonly records: readonly Record<string, unknown>[];
  readonly gaps: readonly Gap[];
}

const ItemSchema = z.record(z.string(), z.unknown());
const CookiesSchema = z.record(z.string(), z.string());

/** The observation bundle as exported and restored. */
export const ObservationBundleSchema = z.strictObject({
  source: z.literal("simple_agent"),
  records: z.array(ItemSchema),
  gaps: z.array(z.strictObject({ kind: z.string(), detail: z.string() })),
});

const TurnSchema = z.strictObject({
  turn: z.int().min(1),
  answer: z.array(ItemSchema),
  reasoning: z.array(z.string()),
  tool_call_count: z.int().min(0),
  model_call: z.string().nullable(),
  resolved: z.boolean().optional(),
});

const ToolRecordSchema = z.strictObject({
  turn: z.int().min(1),
  call_id: z.string(),
  name: z.string(),
  arguments: z.string(),
  status: z.enum(["completed", "failed"]),
  error_type: z.string().nullable(),
  started_at: z.string(),
  duration_ms: z.number().min(0),
});

/** A boundary of the turn loop as stored. */
export const LoopBoundarySchema = z
  .strictObject({
    step: z.int().min(0),
    pending_tools: z.boolean(),
    new_outputs: z.array(ItemSchema),
    usage: ItemSchema.nullable(),
    last_model_response: ItemSchema.nullable(),
    model_server_cookies: CookiesSchema,
    resources_server_cookies: CookiesSchema,
    turns: z.array(TurnSchema),
    question_outputs: z.array(z.int().min(0)),
    tool_records: z.array(ToolRecordSchema),
    model_calls: z.array(z.strictObject({ turn: z.int().min(1), response_id: z.string() })),
    gaps: z.array(z.strictObject({ kind: z.string(), detail: z.string() })),
  })
  .superRefine((b, ctx) => {
    if (b.question_outputs.length !== b.turns.length) {
      ctx.addIssue({
        code: "custom",
        path: ["question_outputs"],
        message: `has ${b.question_outputs.length} entries for ${b.turns.length} turns`,
      });
    }
    if (b.question_outputs.some((n) => n > b.new_outputs.length)) {
      ctx.addIssue({
        code: "custom",
        path: ["question_outputs"],
        message: `counts more outputs than the ${b.new_outputs.length} new_outputs`,
      });
    }
    if (b.pending_tools && b.last_model_response === null) {
      ctx.addIssue({
        code: "custom",
        path: ["last_model_response"],
        message: "pending_tools needs the model reply whose tools are pending",
      });
    }
  });
/** A stored boundary. */
export type LoopBoundary = z.infer<typeof LoopBoundarySchema>;

/** The mutable state of one activation's turn loop. Lists only grow (snapshots pin lengths). */
export interface LoopState {
  step: number;
  pendingTools: boolean;
  readonly newOutputs: Item[];
  usage: Item | null;
  lastResponse: Item | null;
  modelCookies: CookieJar;
  resourcesCookies: CookieJar;
  readonly turns: Turn[];
  /** Per turn: how many `newOutputs` its question held (the question is rebuilt from them). */
  readonly questionOutputs: number[];
  readonly toolRecords: ToolRecord[];
  readonly modelCalls: ModelCallRef[];
  readonly gaps: Gap[];
}

/** A loop at its start. */
export function freshLoopState(resourcesCookies: CookieJar): LoopState {
  return {
    step: 0,
    pendingTools: false,
    newOutputs: [],
    usage: null,
    lastResponse: null,
    modelCookies: {},
    resourcesCookies,
    turns: [],
    questionOutputs: [],
    toolRecords: [],
    modelCalls: [],
    gaps: [],
  };
}

/**
 * Validates a restored boundary and loads it into a loop state. Throws an `Error` naming the
 * first fields at fault.
 */
export function loadLoopState(boundary: JsonValue): LoopState {
  const parsed = LoopBoundarySchema.safeParse(boundary);
  if (!parsed.success) {
    const problems = parsed.error.issues
      .slice(0, 5)
      .map((issue) => `${issue.path.join(".") || "(root)"}: ${issue.message}`)
      .join("; ");
    throw new Error(`the restored turn-loop boundary is invalid: ${problems}`);
  }
  // Frozen once, so the restored items are like the ones the loop freezes as it goes.
  const b = frozenJson(parsed.data);
  return {
    step: b.step,
    pendingTools: b.pending_tools,
    newOutputs: [...b.new_outputs],
    usage: b.usage,
    lastResponse: b.last_model_response,
    modelCookies: { ...b.model_server_cookies },
    resourcesCookies: { ...b.resources_server_cookies },
    turns: [...b.turns],
    questionOutputs: [...b.question_outputs],
    toolRecords: [...b.tool_records],
    modelCalls: [...b.model_calls],
    gaps: [...b.gaps],
  };
}

/**
 * The loop's state as of now, built only when a checkpoint exports it. Values are pinned now:
 * lists by length (they only grow), everything else by reference (replaced, never mutated).
 *
 * Cheap at export: nothing is copied but a list that grew past its pinned length. A session is
 * parked from its export until the checkpoint resumes, and the commit writes it before then,
 * so its lists are normally still the length they were pinned at. Their items are frozen (see
 * {@link runTurnLoop}), so the commit writes them without checking them again.
 */
export function snapshotOf(s: LoopState): BoundarySnapshot {
  const step = s.step;
  const pendingTools = s.pendingTools;
  const usage = s.usage;
  const last = s.lastResponse;
  const modelCookies = s.modelCookies;
  const resourcesCookies = s.resourcesCookies;
  const outputs = s.newOutputs.length;
  const turns = s.turns.length;
  const tools = s.toolRecords.length;
  const calls = s.modelCalls.length;
  const gaps = s.gaps.length;
  return () =>
    ({
      step,
      pending_tools: pendingTools,
      new_outputs: pinned(s.newOutputs, outputs),
      usage,
      last_model_response: last,
      model_server_cookies: modelCookies,
      resources_server_cookies: resourcesCookies,
      turns: pinned(s.turns, turns),
      question_outputs: pinned(s.questionOutputs, turns),
      tool_records: pinned(s.toolRecords, tools),
      model_calls: pinned(s.modelCalls, calls),
      gaps: pinned(s.gaps, gaps),
    }) as unknown as JsonValue;
}

/** The first `length` items of a list that only grows: the list itself while it has no more. */
function pinned<T>(list: readonly T[], length: number): readonly T[] {
  return list.length === length ? list : list.slice(0, length);
}

/** The trajectory of a finished loop; each turn's question is the input plus its outputs. */
export function trajectoryOf(
  s: LoopState,
  input: readonly Item[],
  invocationId: string,
  status: "completed" | "incomplete",
): Trajectory {
  return {
    invocations: [
      {
        invocation_id: invocationId,
        status,
        model_calls: [...s.modelCalls],
        conversation: [...input, ...s.newOutputs],
      },
    ],
    turns: s.turns.map((turn, i) => ({
      ...turn,
      question: [...input, ...s.newOutputs.slice(0, s.questionOutputs[i] ?? 0)],
    })),
    tool_calls: [...s.toolRecords],
    gaps: [...s.gaps],
  };
}

/** A bundle with one more activation's trajectory appended. */
export function withTrajectory(
  bundle: ObservationBundle | null,
  trajectory: Trajectory,
): ObservationBundle {
  const records = trajectory.invocations.map((invocation) => ({
    ...invocation,
    turns: trajectory.turns,
    tool_calls: trajectory.tool_calls,
  }));
  // Frozen: the session's observations are exported at every commit until it closes, and a
  // frozen copy is checked once. The previous bundle's parts, frozen already, are not copied.
  return frozenJson({
    source: "simple_agent",
    records: [...(bundle?.records ?? []), ...records],
    gaps: [...(bundle?.gaps ?? []), ...trajectory.gaps],
  } satisfies ObservationBundle);
}
