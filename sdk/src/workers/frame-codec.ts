/**
 * The frame codec of the channel between a multi-worker server's coordinator and its workers:
 * how a message becomes the bytes of one frame and back, how a refusal travels, and the one
 * place a typed message body meets the untyped values a frame carries.
 *
 * A frame is a 4-byte big-endian length and the payload: a flag byte, then the message in
 * plain JSON or in the store's extended encoding (so NaN, ±Infinity and big integers survive,
 * as in records); with raw bytes attached, a 4-byte length of the JSON comes first and the bytes
 * follow it.
 *
 * Both ends of a channel are this package (a coordinator and the workers it forked), and every
 * body is built by code, never read from outside: a body is taken as what the message catalogue
 * says it is (`worker-messages.ts`), unvalidated, here and nowhere else.
 *
 * @see docs/workers.md
 */
import {
  DetailError,
  GymError,
  InvalidRequestError,
  type ErrorCode,
  ERROR_CATALOGUE,
} from "../errors.js";
import { encodeJson, jsonValueNeedsExtended, type JsonValue } from "../json/json-value.js";
import { decodeJson } from "../json/json-decode.js";
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
  /** The JSON that travels with the bytes. */
  readonly head: JsonValue;

  /** `bytes`: one buffer, or several sent one after another (never joined on the way). */
  constructor(head: JsonValue | object, bytes: Buffer | readonly Buffer[]) {
    this.head = asFrameJson(head);
    this.parts = Buffer.isBuffer(bytes) ? [bytes] : bytes;
  }

  /** How many bytes there are. */
  get byteLength(): number {
    return partsLength(this.parts);
  }
}

/** What a frame's body is: JSON, or JSON with raw bytes. */
export type FrameValue = JsonValue | FrameBytes;

/** How a refusal travels. */
export type WireFailure =
  | { type: "gym"; code: string; detail: string; issues?: JsonValue }
  | { type: "detail"; status: number; detail: string }
  | { type: "other"; detail: string };

/** One frame's message: a call or notice (`kind`, `id` null for a notice), or a reply. */
export interface Frame {
  readonly id?: number | null;
  readonly kind?: string;
  readonly reply_to?: number;
  readonly ok?: boolean;
  readonly body?: FrameValue;
  readonly error?: WireFailure;
}

// ---- Typed bodies -------------------------------------------------------------------------

/** One message kind of a catalogue: the body it carries and the reply it gets. */
export interface Exchange<Body, Reply> {
  readonly body: Body;
  readonly reply: Reply;
}

/** A catalogue of message kinds, as `worker-messages.ts` declares them. */
export type Catalogue = { readonly [kind: string]: Exchange<unknown, unknown> };

/** Any message, typed as nothing in particular (a channel without a catalogue, in tests). */
export type Untyped = Record<string, Exchange<unknown, FrameValue>>;

/** The body of message `K` of catalogue `M`. */
export type BodyOf<M, K extends keyof M> = M[K] extends Exchange<infer B, unknown> ? B : never;
/** The reply to message `K` of catalogue `M`. */
export type ReplyOf<M, K extends keyof M> = M[K] extends Exchange<unknown, infer R> ? R : never;

/**
 * A received value as the catalogue types it (a body, or a reply). Unchecked on purpose: both
 * ends are this package (see the module comment).
 */
export function fromFrame<T>(value: FrameValue | undefined): T {
  return (value ?? null) as unknown as T;
}

/** A typed body or reply as the value a frame carries: JSON, or a {@link FrameBytes}. */
export function toFrame(value: unknown): FrameValue {
  return value === undefined ? null : (value as FrameValue);
}

/** A typed object as the JSON head of a {@link FrameBytes}. */
function asFrameJson(value: JsonValue | object): JsonValue {
  return value as JsonValue;
}

// ---- Refusals -----------------------------------------------------------------------------

/** How `error` travels: a typed refusal keeps its code, status and issues. */
export function failureOf(error: unknown): WireFailure {
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

/** The error a refusal stands for: the same typed error the peer threw. */
export function errorOf(failure: WireFailure): Error {
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

// ---- Bytes --------------------------------------------------------------------------------

/** Decodes a frame's payload (its flag byte first), as the chunks it arrived in. */
export function decodeFrame(payload: readonly Buffer[]): Frame {
  const flag = payload[0]![0];
  const withBytes = flag === PLAIN_WITH_BYTES || flag === EXTENDED_WITH_BYTES;
  const jsonEnd = withBytes ? 5 + headOf(payload, 5).readUInt32BE(1) : partsLength(payload);
  const text = headOf(payload, jsonEnd).toString("utf8", withBytes ? 5 : 1, jsonEnd);
  const extended = flag === EXTENDED || flag === EXTENDED_WITH_BYTES;
  const frame = fromFrame<Frame>(extended ? decodeJson(text) : (JSON.parse(text) as JsonValue));
  if (!withBytes) return frame;
  // Views of the chunks, not a copy: the socket hands out a new buffer per chunk.
  const head = frame.body === undefined || frame.body instanceof FrameBytes ? null : frame.body;
  return { ...frame, body: new FrameBytes(head, dropHead(payload, jsonEnd)) };
}

/**
 * The buffers of one frame holding `frame` (its length header first), to be written in order:
 * attached bytes follow as they are, never copied.
 */
export function encodeFrame(frame: Frame): Buffer[] {
  const attached = frame.body instanceof FrameBytes ? frame.body : null;
  const message = attached === null ? frame : { ...frame, body: attached.head };
  // Most messages (records included) are plain JSON, which the engine's own codec moves
  // several times faster; the extended encoding only when a value needs it.
  const json = message as JsonValue;
  const extended = jsonValueNeedsExtended(json);
  const text = extended ? encodeJson(json) : JSON.stringify(json);
  const length = Buffer.byteLength(text, "utf8");
  if (attached === null) {
    const buffer = Buffer.allocUnsafe(5 + length);
    buffer.writeUInt32BE(length + 1, 0);
    buffer[4] = extended ? EXTENDED : PLAIN;
    buffer.write(text, 5, "utf8");
    return [buffer];
  }
  const header = Buffer.allocUnsafe(9 + length);
  header.writeUInt32BE(1 + 4 + length + attached.byteLength, 0);
  header[4] = extended ? EXTENDED_WITH_BYTES : PLAIN_WITH_BYTES;
  header.writeUInt32BE(length, 5);
  header.write(text, 9, "utf8");
  return [header, ...attached.parts.filter((part) => part.length > 0)];
}
