/**
 * Translation between the OpenAI Responses API (what agents send a policy model server) and
 * chat completions (what the server sends its inference backend: the API vLLM, SGLang and TGI
 * all speak).
 *
 * @module
 */
import { randomUUID } from "node:crypto";

/** A chat message as chat completions take it. */
export interface ChatMessage {
  role: "system" | "developer" | "user" | "assistant" | "tool";
  content: string | null;
  tool_calls?: ChatToolCall[];
  tool_call_id?: string;
}

/** One tool call of an assistant chat message. */
export interface ChatToolCall {
  id: string;
  type: "function";
  function: { name: string; arguments: string };
}

/** The fields of a Responses create request that map onto a chat completion request. */
export interface ResponsesRequestLike {
  readonly input: string | readonly unknown[];
  readonly instructions?: unknown;
  readonly tools?: readonly unknown[];
  readonly model?: unknown;
  readonly [field: string]: unknown;
}

/** Responses sampling fields passed through to chat completions under their chat names. */
const PASS_THROUGH: Readonly<Record<string, string>> = {
  temperature: "temperature",
  top_p: "top_p",
  max_output_tokens: "max_tokens",
  tool_choice: "tool_choice",
  parallel_tool_calls: "parallel_tool_calls",
  seed: "seed",
  stop: "stop",
  response_format: "response_format",
};

/** The Responses input as a list of items (a string becomes one user message). */
export function inputItems(input: string | readonly unknown[]): unknown[] {
  return typeof input === "string"
    ? [{ type: "message", role: "user", content: input }]
    : [...input];
}

/**
 * The text of a message's content or a tool's output: a string as is, a list of parts as their
 * texts joined (a typed part without text, such as an image, adds nothing), anything else as its
 * JSON, so no part of a tool's result is lost.
 */
function textOf(content: unknown): string {
  if (typeof content === "string") return content;
  if (!Array.isArray(content))
    return content === null || content === undefined ? "" : JSON.stringify(content);
  return content
    .map((part: unknown) => {
      if (typeof part === "string") return part;
      if (typeof part !== "object" || part === null || Array.isArray(part)) {
        return JSON.stringify(part);
      }
      const p = part as { text?: unknown; type?: unknown };
      if (typeof p.text === "string") return p.text;
      return typeof p.type === "string" ? "" : JSON.stringify(part);
    })
    .join("");
}

/** Converts Responses input items into chat messages. */
export function itemsToMessages(items: readonly unknown[], instructions?: unknown): ChatMessage[] {
  const messages: ChatMessage[] = [];
  if (typeof instructions === "string" && instructions.length > 0) {
    messages.push({ role: "system", content: instructions });
  }
  for (const raw of items) {
    const item = raw as Record<string, unknown>;
    const type = item.type ?? (item.role === undefined ? undefined : "message");
    if (type === "message") {
      const role = String(item.role ?? "user") as ChatMessage["role"];
      messages.push({ role, content: textOf(item.content) });
    } else if (type === "function_call") {
      const call: ChatToolCall = {
        id: String(item.call_id ?? item.id ?? ""),
        type: "function",
        function: { name: String(item.name ?? ""), arguments: String(item.arguments ?? "") },
      };
      // One assistant turn is one chat message: its text and its tool calls together.
      const last = messages.at(-1);
      if (last?.role === "assistant") (last.tool_calls ??= []).push(call);
      else messages.push({ role: "assistant", content: null, tool_calls: [call] });
    } else if (type === "function_call_output") {
      messages.push({
        role: "tool",
        tool_call_id: String(item.call_id ?? ""),
        content: textOf(item.output),
      });
    }
    // Reasoning items and other types carry nothing a chat backend takes.
  }
  return messages;
}

/** Converts Responses function tools into chat tools. */
export function toolsToChat(tools: readonly unknown[] | undefined): unknown[] | undefined {
  if (tools === undefined) return undefined;
  return tools.map((raw) => {
    const tool = raw as Record<string, unknown>;
    if (tool.type !== "function") return tool;
    return {
      type: "function",
      function: {
        name: tool.name,
        ...(tool.description === undefined ? {} : { description: tool.description }),
        ...(tool.parameters === undefined ? {} : { parameters: tool.parameters }),
      },
    };
  });
}

/** Builds the chat completion request of a Responses create request. */
export function chatRequestOf(body: ResponsesRequestLike, model: string): Record<string, unknown> {
  const request: Record<string, unknown> = {
    model: typeof body.model === "string" ? body.model : model,
    messages: itemsToMessages(inputItems(body.input), body.instructions),
  };
  const tools = toolsToChat(body.tools);
  if (tools !== undefined && tools.length > 0) request.tools = tools;
  for (const [from, to] of Object.entries(PASS_THROUGH)) {
    if (body[from] !== undefined && body[from] !== null) request[to] = body[from];
  }
  return request;
}

/** A chat completion reply, as much of it as the translation reads. */
export interface ChatCompletionLike {
  readonly id?: unknown;
  readonly model?: unknown;
  readonly created?: unknown;
  readonly choices?: readonly {
    readonly message?: {
      readonly content?: unknown;
      readonly tool_calls?: readonly {
        readonly id?: unknown;
        readonly function?: { readonly name?: unknown; readonly arguments?: unknown };
      }[];
    };
    readonly finish_reason?: unknown;
  }[];
  readonly usage?: {
    readonly prompt_tokens?: unknown;
    readonly completion_tokens?: unknown;
    readonly total_tokens?: unknown;
  };
}

/** Converts a chat completion into a Responses response object. */
export function responseOf(chat: ChatCompletionLike, model: string): Record<string, unknown> {
  const choice = chat.choices?.[0];
  const message = choice?.message;
  const output: Record<string, unknown>[] = [];
  const text = typeof message?.content === "string" ? message.content : "";
  if (text.length > 0) {
    output.push({
      type: "message",
      id: `msg_${randomUUID().replaceAll("-", "")}`,
      role: "assistant",
      status: "completed",
      content: [{ type: "output_text", text, annotations: [] }],
    });
  }
  for (const call of message?.tool_calls ?? []) {
    output.push({
      type: "function_call",
      id: `fc_${randomUUID().replaceAll("-", "")}`,
      call_id: String(call.id ?? ""),
      name: String(call.function?.name ?? ""),
      arguments: String(call.function?.arguments ?? ""),
      status: "completed",
    });
  }
  const truncated = choice?.finish_reason === "length";
  const input = Number(chat.usage?.prompt_tokens ?? 0);
  const generated = Number(chat.usage?.completion_tokens ?? 0);
  return {
    id: `resp_${String(chat.id ?? randomUUID().replaceAll("-", ""))}`,
    object: "response",
    created_at: typeof chat.created === "number" ? chat.created : Math.floor(Date.now() / 1000),
    model: typeof chat.model === "string" ? chat.model : model,
    status: truncated ? "incomplete" : "completed",
    incomplete_details: truncated ? { reason: "max_output_tokens" } : null,
    output,
    usage: {
      input_tokens: input,
      output_tokens: generated,
      total_tokens: Number(chat.usage?.total_tokens ?? input + generated),
    },
  };
}

/** The items a response adds to the conversation (its output). */
export function outputItems(response: Record<string, unknown>): unknown[] {
  return Array.isArray(response.output) ? [...(response.output as unknown[])] : [];
}

/**
 * The text of a Responses-style reply: the `output_text` parts of its output messages, joined
 * in order. Anything that is not such a part (reasoning items, tool calls, a reply with no
 * `output`, a value that is no reply at all) adds nothing, so a verifier can read an untrusted
 * body without checking its shape first.
 *
 * @example
 * ```ts
 * outputText({ output: [{ type: "message", content: [{ type: "output_text", text: "42" }] }] });
 * // "42"
 * ```
 */
export function outputText(reply: unknown): string {
  const output = fieldOf(reply, "output");
  if (!Array.isArray(output)) return "";
  let text = "";
  for (const item of output) {
    const content = fieldOf(item, "content");
    if (!Array.isArray(content)) continue;
    for (const part of content) {
      const partText = fieldOf(part, "text");
      if (fieldOf(part, "type") === "output_text" && typeof partText === "string") text += partText;
    }
  }
  return text;
}

/** An own field of an object value, or undefined for anything else. */
function fieldOf(value: unknown, name: string): unknown {
  if (typeof value !== "object" || value === null || !Object.hasOwn(value, name)) return undefined;
  return Reflect.get(value, name);
}
