/**
 * A request/reply channel between the coordinator of a multi-worker server and one of its
 * workers, over a Unix socket: frames of a 4-byte big-endian length and the message in the
 * store's JSON encoding (so NaN, ±Infinity and big integers survive, as in records). Calls carry
 * an ID and may be answered in any order; a handler's typed refusal reaches the caller as the
 * same typed error, so a worker answers exactly what the coordinator would have.
 *
 * Not `process.send`: its JSON loses those numbers, and it shares a pipe with the cluster's
 * connection handoff, so a large export would stall accepts.
 */
import type { Socket } from "node:net";
import {
  DetailError,
  GymError,
  InvalidRequestError,
  type ErrorCode,
  ERROR_CATALOGUE,
} from "../errors.js";
import {
  decodeJson,
  encodeJson,
  jsonValueNeedsExtended,
  type JsonValue,
} from "../json/json-value.js";
import { dropHead, headOf, partsLength } from "../util/buffer-parts.js";

/**
 * The first byte of a frame's payload: plain JSON, or the store's extended encoding; the same
 * two with raw bytes after the JSON (a 4-byte length of the JSON comes first).
 */
const PLAIN = 0x4a; // "J"
const EXTENDED = 0x45; // "E"
const PLAIN_WITH_BYTES = 0x6a; // "j"
const EXTENDED_WITH_BYTES = 0x65; // "e"

/**
 * A message body that carries raw bytes next to its JSON `head`: what is already encoded (a
 * worker's exported record lines, a restore's share of stored lines) crosses as it is, with no
 * JSON escaping or parsing on either side. Send one as a call's body or return one from a
 * handler; the peer receives a `FrameBytes` in its place.
 */
export class FrameBytes {
  /** The bytes as the buffers they arrived or were built in, in order. */
  readonly parts: readonly Buffer[];

  /** `bytes`: one buffer, or several sent one after another (never joined on the way). */
  constructor(
    readonly head: JsonValue,
    bytes: Buffer | readonly Buffer[],
  ) {
    this.parts = Buffer.isBuffer(bytes) ? [bytes] : bytes;
  }

  /** How many bytes there are. */
  get byteLength(): number {
    return partsLength(this.parts);
  }
}

/** Largest frame accepted (a whole export travels as one reply). */
export const MAX_FRAME_BYTES = 1 << 30;

/** A message from the peer; return (or resolve) the reply body. */
export type FrameHandler = (kind: string, body: JsonValue) => unknown;

/** How a refusal travels. */
type WireFailure =
  | { type: "gym"; code: string; detail: string; issues?: JsonValue }
  | { type: "detail"; status: number; detail: string }
  | { type: "other"; detail: string };

interface Pending {
  readonly resolve: (value: JsonValue) => void;
  readonly reject: (error: Error) => void;
  readonly timer: NodeJS.Timeout | null;
}

/** The peer went away, or never answered in time. */
export class ChannelClosedError extends Error {
  override name = "ChannelClosedError";
}

function failureOf(error: unknown): WireFailure {
  // Typed errors may come from another copy of the package: matched by brand, not prototype.
  if (error instanceof GymError) {
    const issues = (error as Partial<InvalidRequestError>).issues;
    return {
      type: "gym",
      code: error.code,
      detail: error.message,
      ...(Array.isArray(issues)
        ? { issues: issues.map((issue) => ({ path: issue.path, message: issue.message })) }
        : {}),
    };
  }
  if (error instanceof DetailError)
    return { type: "detail", status: error.status, detail: error.detail };
  return { type: "other", detail: error instanceof Error ? error.message : String(error) };
}

function errorOf(failure: WireFailure): Error {
  if (failure.type === "gym" && Object.hasOwn(ERROR_CATALOGUE, failure.code)) {
    if (failure.code === "invalid_request") {
      const issues = Array.isArray(failure.issues)
        ? (failure.issues as { path: (string | number)[]; message: string }[])
        : [];
      return new InvalidRequestError(failure.detail, issues);
    }
    return new GymError(failure.code as ErrorCode, failure.detail);
  }
  if (failure.type === "detail") return new DetailError(failure.status, failure.detail);
  return new Error(failure.detail);
}

/** Decodes a frame's payload (its flag byte first), as the chunks it arrived in. */
function messageOf(payload: readonly Buffer[]): Record<string, JsonValue> {
  const flag = payload[0]![0];
  const withBytes = flag === PLAIN_WITH_BYTES || flag === EXTENDED_WITH_BYTES;
  const jsonEnd = withBytes ? 5 + headOf(payload, 5).readUInt32BE(1) : partsLength(payload);
  const text = headOf(payload, jsonEnd).toString("utf8", withBytes ? 5 : 1, jsonEnd);
  const extended = flag === EXTENDED || flag === EXTENDED_WITH_BYTES;
  const message = (extended ? decodeJson(text) : JSON.parse(text)) as Record<string, JsonValue>;
  if (withBytes) {
    // Views of the chunks, not a copy: the socket hands out a new buffer per chunk.
    const body = new FrameBytes(message.body ?? null, dropHead(payload, jsonEnd));
    message.body = body as unknown as JsonValue;
  }
  return message;
}

/**
 * One end of a framed channel. Messages are handled in arrival order: a synchronous handler's
 * reply is written before the next message is read, which the coordinator relies on for claims.
 */
export class FrameChannel {
  readonly #socket: Socket;
  readonly #handler: FrameHandler;
  readonly #pending = new Map<number, Pending>();
  #nextId = 1;
  #chunks: Buffer[] = [];
  #buffered = 0;
  /** The length of the frame being received, once its header is in. */
  #needed: number | null = null;
  #closed = false;
  readonly #closeListeners: ((reason: string) => void)[] = [];

  constructor(socket: Socket, handler: FrameHandler) {
    this.#socket = socket;
    this.#handler = handler;
    socket.on("data", (chunk: Buffer) => this.#receive(chunk));
    socket.on("error", (error) => this.#close(`the channel failed: ${error.message}`));
    socket.on("close", () => this.#close("the peer closed the channel"));
  }

  /** Whether the channel is gone. */
  get closed(): boolean {
    return this.#closed;
  }

  /** Runs `listener` once the channel closes (at once if it is closed). */
  onClose(listener: (reason: string) => void): void {
    if (this.#closed) listener("the channel is closed");
    else this.#closeListeners.push(listener);
  }

  /**
   * Sends a message and resolves with the peer's reply; a refusal rejects with the same typed
   * error. `timeoutMs` null waits as long as the channel lives.
   */
  call(kind: string, body: unknown = null, timeoutMs: number | null = 30_000): Promise<JsonValue> {
    if (this.#closed)
      return Promise.reject(new ChannelClosedError(`cannot send '${kind}': the channel is closed`));
    const id = this.#nextId++;
    return new Promise<JsonValue>((resolve, reject) => {
      const timer =
        timeoutMs === null
          ? null
          : setTimeout(() => {
              this.#pending.delete(id);
              reject(new ChannelClosedError(`'${kind}' got no answer within ${timeoutMs} ms`));
            }, timeoutMs);
      timer?.unref();
      this.#pending.set(id, { resolve, reject, timer });
      this.#write({ id, kind, body: body as JsonValue });
    });
  }

  /** Sends a message that expects no reply. */
  send(kind: string, body: unknown = null): void {
    if (!this.#closed) this.#write({ id: null, kind, body: body as JsonValue });
  }

  /** Closes the channel; pending calls reject. */
  close(): void {
    this.#socket.end();
    this.#close("the channel was closed");
  }

  #write(message: Record<string, JsonValue>): void {
    const attached =
      (message.body as unknown) instanceof FrameBytes
        ? (message.body as unknown as FrameBytes)
        : null;
    if (attached !== null) message = { ...message, body: attached.head };
    // Most messages (records included) are plain JSON, which the engine's own codec moves
    // several times faster; the extended encoding only when a value needs it.
    const extended = jsonValueNeedsExtended(message);
    const text = extended ? encodeJson(message) : JSON.stringify(message);
    const length = Buffer.byteLength(text, "utf8");
    if (attached === null) {
      const frame = Buffer.allocUnsafe(5 + length);
      frame.writeUInt32BE(length + 1, 0);
      frame[4] = extended ? EXTENDED : PLAIN;
      frame.write(text, 5, "utf8");
      this.#socket.write(frame);
      return;
    }
    const header = Buffer.allocUnsafe(9 + length);
    header.writeUInt32BE(1 + 4 + length + attached.byteLength, 0);
    header[4] = extended ? EXTENDED_WITH_BYTES : PLAIN_WITH_BYTES;
    header.writeUInt32BE(length, 5);
    header.write(text, 9, "utf8");
    // One write per part, no copy of the bytes: the socket keeps their order, and corked it
    // hands them to the kernel together.
    this.#socket.cork();
    this.#socket.write(header);
    for (const part of attached.parts) if (part.length > 0) this.#socket.write(part);
    this.#socket.uncork();
  }

  #receive(chunk: Buffer): void {
    // Chunks are kept apart, and a frame is handed on as its chunks: joining them would copy a
    // large frame into fresh memory (a worker's export is tens of megabytes).
    this.#chunks.push(chunk);
    this.#buffered += chunk.length;
    while (!this.#closed) {
      if (this.#needed === null) {
        if (this.#buffered < 4) return;
        const length = headOf(this.#take(4), 4).readUInt32BE(0);
        if (length > MAX_FRAME_BYTES) {
          this.#socket.destroy();
          this.#close(`a frame of ${length} bytes is over the limit`);
          return;
        }
        this.#needed = length;
      }
      if (this.#buffered < this.#needed) return;
      const payload = this.#take(this.#needed);
      this.#needed = null;
      this.#dispatch(messageOf(payload));
    }
  }

  /** Removes the first `bytes` buffered bytes (there are at least that many), as views. */
  #take(bytes: number): Buffer[] {
    const taken: Buffer[] = [];
    let wanted = bytes;
    let used = 0;
    while (wanted > 0) {
      const chunk = this.#chunks[used]!;
      if (chunk.length <= wanted) {
        taken.push(chunk);
        wanted -= chunk.length;
        used++;
      } else {
        taken.push(chunk.subarray(0, wanted));
        this.#chunks[used] = chunk.subarray(wanted);
        wanted = 0;
      }
    }
    this.#chunks = used === 0 ? this.#chunks : this.#chunks.slice(used);
    this.#buffered -= bytes;
    return taken;
  }

  #dispatch(message: Record<string, JsonValue>): void {
    if (typeof message.reply_to === "number") {
      const pending = this.#pending.get(message.reply_to);
      if (pending === undefined) return; // timed out already
      this.#pending.delete(message.reply_to);
      if (pending.timer !== null) clearTimeout(pending.timer);
      if (message.ok === true) pending.resolve(message.body ?? null);
      else pending.reject(errorOf(message.error as unknown as WireFailure));
      return;
    }
    const id = typeof message.id === "number" ? message.id : null;
    const kind = String(message.kind);
    const answer = (ok: boolean, value: unknown): void => {
      if (id === null || this.#closed) return;
      this.#write(
        ok
          ? { reply_to: id, ok: true, body: (value ?? null) as JsonValue }
          : { reply_to: id, ok: false, error: failureOf(value) as unknown as JsonValue },
      );
    };
    let result: unknown;
    try {
      result = this.#handler(kind, message.body ?? null);
    } catch (error) {
      answer(false, error);
      return;
    }
    if (result instanceof Promise) {
      result.then(
        (value: unknown) => answer(true, value),
        (error: unknown) => answer(false, error),
      );
    } else {
      answer(true, result);
    }
  }

  #close(reason: string): void {
    if (this.#closed) return;
    this.#closed = true;
    for (const [id, pending] of this.#pending) {
      this.#pending.delete(id);
      if (pending.timer !== null) clearTimeout(pending.timer);
      pending.reject(new ChannelClosedError(reason));
    }
    for (const listener of this.#closeListeners.splice(0)) listener(reason);
  }
}
