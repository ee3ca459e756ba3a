/**
 * One activation's turn loop: model calls and tool rounds, with boundaries
 * B0 (before the first model call, or at the restored position), B1 (after a model reply whose
 * tools are pending) and B2 (after a tool round). Transport-free: the server hands in how to
 * call the model and the tools.
 *
 * @module
 */
import { z } from "zod";
import { frozenJson, type ActivationContext } from "gym-participant-sdk";
import { type CookieJar, type ResponsesCreateRequest } from "gym-participant-sdk/protocol";
import {
  freshLoopState,
  snapshotOf,
  trajectoryOf,
  type Item,
  type LoopState,
  type Trajectory,
} from "./trajectory.js";

/** A policy model reply, already checked to be 2xx. */
export interface ModelReply {
  readonly response: Item;
  /** The cookies the reply set. */
  readonly cookies: CookieJar;
}

/** A tool call's HTTP reply; every status is an answer. */
export interface ToolReply {
  readonly status: number;
  readonly body: string;
  /** The cookies the reply set. */
  readonly cookies: CookieJar;
  /**
   * A failure the reply reports other than by its status (an MCP tool error answers 200), for
   * the trajectory's tool record. @default from the status
   */
  readonly errorType?: string | null;
}

/** What {@link runTurnLoop} needs. */
export interface TurnLoopInput {
  readonly body: ResponsesCreateRequest;
  readonly activation: ActivationContext;
  /** The loaded restored boundary, or null: start from the input. */
  readonly continuation: LoopState | null;
  /** The resources cookie jar to start from (ignored when continuing). */
  readonly resourcesCookies: CookieJar;
  readonly executeTools: boolean;
  /** Model calls allowed; null or 0: unbounded. */
  readonly maxSteps: number | null;
  readonly collectTrajectory: boolean;
  readonly invocationId: string;
  /** POSTs the request body to the model; throws on a non-2xx reply. */
  callModel(body: Item, cookies: CookieJar, signal: AbortSignal): Promise<ModelReply>;
  /** POSTs one tool call with the jar; throws when the tool cannot be reached at all. */
  callTool(name: string, args: unknown, jar: CookieJar, signal: AbortSignal): Promise<ToolReply>;
}

/** What one activation produced. */
export interface TurnLoopResult {
  /** The last model reply with `output` = every new output and the accumulated `usage`. */
  readonly response: Item;
  readonly status: "completed" | "incomplete";
  /** The model cookies of the last call. */
  readonly modelCookies: CookieJar;
  /** The resources jar after the tool calls. */
  readonly resourcesCookies: CookieJar;
  /** The trajectory, when collected. */
  readonly trajectory: Trajectory | null;
}

/** The part of a Responses object the loop relies on; everything else passes through. */
const ResponsesReplySchema = z.looseObject({
  id: z.string().optional(),
  output: z.array(z.looseObject({ type: z.string() })),
  usage: z.record(z.string(), z.unknown()).nullable().optional(),
  incomplete_details: z.unknown().optional(),
});

/** Checks a model reply body is a Responses object; throws an `Error` otherwise. */
export function parseModelReply(text: string): Item {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    throw new Error(`the model reply is not JSON: ${text.slice(0, 200)}`);
  }
  const parsed = ResponsesReplySchema.safeParse(json);
  if (!parsed.success) {
    throw new Error(
      `the model reply is not a Responses object: ${parsed.error.issues
        .slice(0, 3)
        .map((i) => `${i.path.join(".") || "(root)"}: ${i.message}`)
        .join("; ")}`,
    );
  }
  return parsed.data as Item;
}

/** The request input as a list of items (a string becomes one user message). */
export function normalizedInput(body: ResponsesCreateRequest): Item[] {
  if (typeof body.input === "string") {
    return [{ role: "user", content: body.input, type: "message" }];
  }
  return body.input.map((item) => item as Item);
}

/** Runs one activation's turn loop. */
export async function runTurnLoop(input: TurnLoopInput): Promise<TurnLoopResult> {
  const { activation } = input;
  // Frozen once here, like every item the loop keeps (replies, turns, tool records): the
  // boundaries and trajectories holding them share them, and commits write them unchecked.
  const original = frozenJson(normalizedInput(input.body));
  const s = input.continuation ?? freshLoopState({ ...input.resourcesCookies });
  const collect = input.collectTrajectory;
  let status: "completed" | "incomplete" = "completed";

  await activation.boundary(snapshotOf(s)); // B0
  for (;;) {
    if (!s.pendingTools) {
      s.step += 1;
      const questionOutputs = s.newOutputs.length;
      const request: Item = { ...input.body, input: [...original, ...s.newOutputs] };
      const cookies = s.modelCookies;
      const reply = await activation.modelCall((signal) =>
        input.callModel(request, cookies, signal),
      );
      s.modelCookies = reply.cookies;
      // Usage accumulates across calls; the kept reply must not count its call twice.
      s.usage = addUsage(s.usage, reply.response.usage);
      let response: Item = frozenJson({ ...reply.response, usage: null });
      const output = response.output as Item[];
      s.newOutputs.push(...output);
      s.lastResponse = response;
      if (collect) recordTurn(s, response, output, questionOutputs);
      if (response.incomplete_details !== undefined && response.incomplete_details !== null) {
        status = "incomplete";
        break;
      }
      if (functionCalls(response).length === 0) {
        if (!output.some((item) => item.type === "message" && item.role === "assistant")) {
          status = "incomplete";
          response = markIncomplete(response, output.length > 0);
          s.lastResponse = response;
        }
        break;
      }
      if (!input.executeTools) break; // the caller executes them
      s.pendingTools = true;
      await activation.boundary(snapshotOf(s)); // B1
    }
    for (const call of functionCalls(s.lastResponse ?? {})) {
      s.newOutputs.push(await runTool(input, s, call, collect));
    }
    s.pendingTools = false;
    if (input.maxSteps !== null && input.maxSteps > 0 && s.step >= input.maxSteps) {
      status = "incomplete";
      break;
    }
    await activation.boundary(snapshotOf(s)); // B2
  }

  const response: Item = { ...(s.lastResponse ?? {}), output: [...s.newOutputs], usage: s.usage };
  return {
    response,
    status,
    modelCookies: s.modelCookies,
    resourcesCookies: s.resourcesCookies,
    trajectory: collect ? trajectoryOf(s, original, input.invocationId, status) : null,
  };
}

interface FunctionCall {
  readonly call_id: string;
  readonly name: string;
  readonly arguments: string;
}

function functionCalls(response: Item): FunctionCall[] {
  const output = Array.isArray(response.output) ? (response.output as Item[]) : [];
  return output
    .filter((item) => item.type === "function_call")
    .map((item) => ({
      call_id: String(item.call_id ?? ""),
      name: String(item.name ?? ""),
      arguments: typeof item.arguments === "string" ? item.arguments : "",
    }));
}

async function runTool(
  input: TurnLoopInput,
  s: LoopState,
  call: FunctionCall,
  collect: boolean,
): Promise<Item> {
  const started = Date.now();
  let output: string;
  let errorType: string | null = null;
  const args = parseArguments(call.arguments);
  if (!args.ok) {
    // Answered without a request, so the model can correct itself.
    output = JSON.stringify({ error: `Invalid tool call arguments: ${args.reason}` });
    errorType = "invalid_arguments";
  } else {
    const reply = await input.callTool(
      call.name,
      args.value,
      s.resourcesCookies,
      input.activation.signal,
    );
    output = reply.body;
    s.resourcesCookies = { ...s.resourcesCookies, ...reply.cookies };
    if (reply.errorType !== undefined && reply.errorType !== null) errorType = reply.errorType;
    else if (reply.status < 200 || reply.status >= 300) errorType = `http_${reply.status}`;
  }
  if (collect) {
    s.toolRecords.push(
      frozenJson({
        turn: s.step,
        call_id: call.call_id,
        name: call.name,
        arguments: call.arguments,
        status: errorType === null ? "completed" : "failed",
        error_type: errorType,
        started_at: new Date(started).toISOString(),
        duration_ms: Date.now() - started,
      }),
    );
  }
  return frozenJson({ type: "function_call_output", call_id: call.call_id, output });
}

function parseArguments(
  text: string,
):
  { readonly ok: true; readonly value: unknown } | { readonly ok: false; readonly reason: string } {
  try {
    return { ok: true, value: JSON.parse(text) as unknown };
  } catch (error) {
    return { ok: false, reason: (error as Error).message };
  }
}

function recordTurn(s: LoopState, response: Item, output: Item[], questionOutputs: number): void {
  const id = typeof response.id === "string" && response.id !== "" ? response.id : null;
  if (id === null) {
    s.gaps.push({ kind: "model_call_reference_unavailable", detail: `turn:${s.step}` });
  } else {
    s.modelCalls.push({ turn: s.step, response_id: id });
  }
  s.turns.push(
    frozenJson({
      turn: s.step,
      answer: output.filter((item) => item.type !== "reasoning"),
      reasoning: output.filter((item) => item.type === "reasoning").flatMap(reasoningTexts),
      tool_call_count: s.newOutputs.filter((item) => item.type === "function_call").length,
      model_call: id,
    }),
  );
  s.questionOutputs.push(questionOutputs);
}

function reasoningTexts(item: Item): string[] {
  const texts: string[] = [];
  for (const field of ["summary", "content"]) {
    const parts = item[field];
    if (!Array.isArray(parts)) continue;
    for (const part of parts as unknown[]) {
      const text = (part as { text?: unknown } | null)?.text;
      if (typeof text === "string") texts.push(text);
    }
  }
  return texts;
}

function markIncomplete(response: Item, hadOutput: boolean): Item {
  const metadata =
    typeof response.metadata === "object" && response.metadata !== null
      ? (response.metadata as Item)
      : {};
  return {
    ...response,
    status: "incomplete",
    metadata: {
      ...metadata,
      ng_termination_reason: hadOutput ? "incomplete_reasoning" : "empty_output",
      ng_termination_message: hadOutput
        ? "the model replied with neither an assistant message nor a tool call"
        : "the model replied with no output",
    },
  };
}

/** Sums two usage objects field by field (numbers add, nested objects recurse). */
export function addUsage(total: Item | null, usage: unknown): Item | null {
  if (typeof usage !== "object" || usage === null || Array.isArray(usage)) return total;
  const sum: Item = { ...(total ?? {}) };
  // The backend names the fields: own keys only, defined rather than assigned, so a field
  // called `constructor` or `__proto__` is summed like any other.
  const set = (key: string, value: unknown): void => {
    Object.defineProperty(sum, key, {
      value,
      enumerable: true,
      writable: true,
      configurable: true,
    });
  };
  for (const [key, value] of Object.entries(usage as Item)) {
    const held = Object.hasOwn(sum, key);
    const prior = held ? sum[key] : undefined;
    if (typeof value === "number") {
      set(key, (typeof prior === "number" ? prior : 0) + value);
    } else if (typeof value === "object" && value !== null && !Array.isArray(value)) {
      set(
        key,
        addUsage(typeof prior === "object" && prior !== null ? (prior as Item) : null, value),
      );
    } else if (!held) {
      set(key, value);
    }
  }
  return sum;
}
