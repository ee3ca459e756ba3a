/**
 * Chat completions streaming as server-sent events: a `: keep-alive` comment first (before any
 * hold, as a real server's keep-alive would precede its first data), then one
 * `chat.completion.chunk` per visible token group, a last chunk with the finish reason, and
 * `data: [DONE]`.
 *
 * @module
 */
import type { Response } from "express";
import type { TokenEffect } from "./chat-template.js";

/** The fields every chunk of one completion shares. */
export interface ChunkIdentity {
  readonly id: string;
  readonly created: number;
  readonly model: string;
}

/** Writes one completion's event stream. */
export class ChunkStream {
  constructor(
    readonly res: Response,
    readonly identity: ChunkIdentity,
  ) {}

  /** Sends the headers and the keep-alive comment at once. */
  open(): void {
    this.res.status(200);
    this.res.setHeader("content-type", "text/event-stream");
    this.res.setHeader("cache-control", "no-cache");
    this.res.flushHeaders();
    this.res.write(": keep-alive\n\n");
  }

  /** Sends what one generated token shows; a tool-call marker shows nothing until its name. */
  token(effect: TokenEffect): void {
    switch (effect.kind) {
      case "role":
        return this.#chunk({ role: "assistant", content: "" }, null);
      case "content":
        return this.#chunk({ content: effect.text }, null);
      case "tool_marker":
        return;
      case "tool_call": {
        const { id, name } = effect.call;
        const call = {
          index: effect.index,
          id,
          type: "function",
          function: { name, arguments: "" },
        };
        return this.#chunk({ tool_calls: [call] }, null);
      }
      case "arguments":
        return this.#chunk(
          { tool_calls: [{ index: effect.index, function: { arguments: effect.text } }] },
          null,
        );
      default: {
        const unknown: never = effect;
        throw new Error(`unknown token effect ${JSON.stringify(unknown)}`);
      }
    }
  }

  /** Sends the finish reason and `[DONE]`, and ends the response. */
  finish(finishReason: string): void {
    this.#chunk({}, finishReason);
    this.res.end("data: [DONE]\n\n");
  }

  #chunk(delta: Record<string, unknown>, finishReason: string | null): void {
    const chunk = {
      ...this.identity,
      object: "chat.completion.chunk",
      choices: [{ index: 0, delta, logprobs: null, finish_reason: finishReason }],
    };
    this.res.write(`data: ${JSON.stringify(chunk)}\n\n`);
  }
}
