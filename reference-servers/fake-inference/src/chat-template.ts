/**
 * The fake model's chat template. A prompt is the concatenation of each message's rendering, and
 * a reply generates exactly the rendering of the assistant message it becomes, so whenever an
 * agent echoes the conversation, a child call's prompt begins with its parent's prompt plus the
 * parent's generated tokens (token lineage holds).
 *
 * A message renders as its role marker, then its content pieces, then per tool call the
 * tool-call marker, the tool's name and the pieces of its arguments string. Tool call IDs, tool
 * result IDs and message names are not rendered: they need not survive the echo.
 *
 * @module
 */
import {
  SPECIAL_TOKENS,
  logprobOf,
  pieceId,
  roleToken,
  tokenize,
  wordPieces,
} from "./tokenizer.js";

/** A chat message as far as the template reads it. */
export interface TemplateMessage {
  readonly role: string;
  readonly content?: unknown;
  readonly tool_calls?:
    | readonly {
        readonly function?: { readonly name?: unknown; readonly arguments?: unknown };
      }[]
    | null;
}

/** The text of a message's content: a string, or the text of its text parts. */
function contentText(content: unknown): string {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return "";
  return content
    .map((part: unknown) => {
      if (typeof part === "string") return part;
      const text = (part as { text?: unknown } | null)?.text;
      return typeof text === "string" ? text : "";
    })
    .join("");
}

/** The arguments of a tool call as the string the model wrote. */
function argumentsText(args: unknown): string {
  if (args === undefined || args === null) return "";
  return typeof args === "string" ? args : JSON.stringify(args);
}

/** The token IDs of one message. */
export function renderMessage(message: TemplateMessage): number[] {
  const tokens = [roleToken(message.role), ...tokenize(contentText(message.content))];
  for (const call of message.tool_calls ?? []) {
    tokens.push(SPECIAL_TOKENS.tool_call, pieceId(String(call.function?.name ?? "")));
    tokens.push(...tokenize(argumentsText(call.function?.arguments)));
  }
  return tokens;
}

/** The prompt token IDs of a conversation. */
export function renderPrompt(messages: readonly TemplateMessage[]): number[] {
  return messages.flatMap(renderMessage);
}

/** One tool call of a reply. */
export interface ReplyToolCall {
  readonly id: string;
  readonly name: string;
  /** The arguments as a JSON string, exactly as sent to the agent. */
  readonly arguments: string;
}

/** What the model answers in one turn: text, or tool calls (never both). */
export type ReplyMessage =
  | { readonly content: string; readonly toolCalls?: undefined }
  | { readonly content?: undefined; readonly toolCalls: readonly ReplyToolCall[] };

/** What one generated token adds to the visible reply. */
export type TokenEffect =
  | { readonly kind: "role" }
  | { readonly kind: "content"; readonly text: string }
  | { readonly kind: "tool_marker" }
  | { readonly kind: "tool_call"; readonly index: number; readonly call: ReplyToolCall }
  | { readonly kind: "arguments"; readonly index: number; readonly text: string };

/** A reply's tokens, their log probabilities, and how to show any prefix of them. */
export class ReplyPlan {
  readonly tokens: readonly number[];
  readonly logprobs: readonly number[];
  readonly #effects: readonly TokenEffect[];

  constructor(readonly message: ReplyMessage) {
    const tokens: number[] = [SPECIAL_TOKENS.assistant];
    const effects: TokenEffect[] = [{ kind: "role" }];
    for (const text of wordPieces(message.content ?? "")) {
      tokens.push(pieceId(text));
      effects.push({ kind: "content", text });
    }
    (message.toolCalls ?? []).forEach((call, index) => {
      tokens.push(SPECIAL_TOKENS.tool_call, pieceId(call.name));
      effects.push({ kind: "tool_marker" }, { kind: "tool_call", index, call });
      for (const text of wordPieces(call.arguments)) {
        tokens.push(pieceId(text));
        effects.push({ kind: "arguments", index, text });
      }
    });
    this.tokens = tokens;
    this.logprobs = tokens.map(logprobOf);
    this.#effects = effects;
  }

  /** The effect of token `index`, for streaming. */
  effect(index: number): TokenEffect {
    return this.#effects[index] as TokenEffect;
  }

  /**
   * The chat message the first `count` tokens show. A whole reply is the scripted message; a
   * truncated text reply shows the text generated so far; a truncated tool-call reply shows no
   * tool call (half a call cannot be executed).
   */
  messageOf(count: number): { content: string | null; tool_calls?: unknown[] } {
    const { message } = this;
    if (message.toolCalls === undefined) {
      const text = this.#effects
        .slice(0, count)
        .map((effect) => (effect.kind === "content" ? effect.text : ""))
        .join("");
      return { content: text };
    }
    if (count < this.tokens.length) return { content: null };
    return {
      content: null,
      tool_calls: message.toolCalls.map((call) => ({
        id: call.id,
        type: "function",
        function: { name: call.name, arguments: call.arguments },
      })),
    };
  }
}
