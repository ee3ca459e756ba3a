/**
 * Staging digests, schema 2 / digest 2 / extras 1: versioned, length-delimited
 * binary encodings hashed with SHA-256, byte-exact with the Python reference so a record staged
 * by one runtime verifies in the other.
 *
 * Encodings: `u64` is 8 bytes big-endian; `bytes(x)` = `u64(len) ++ x`; `text(s)` =
 * `bytes(utf8(s))`; `token_ids(ids)` = `u64(count) ++ u64(id)…`; `f32s(values)` =
 * `u64(count) ++ float32 big-endian…`. Every hash starts with its ASCII domain string.
 *
 * @module
 */
import * as cryptoModule from "node:crypto";
import { createHash, type Hash } from "node:crypto";
import { CaptureError } from "./capture-error.js";
import { PyFloat, compareCodePoints } from "./python-json.js";

/** The staged-record schema version these digests cover. */
export const STAGING_SCHEMA_VERSION = 2;
/** The staged-record digest layout version. */
export const STAGING_DIGEST_VERSION = 2;
/** The extras digest layout version. */
export const EXTRAS_DIGEST_VERSION = 1;

const CALL_DOMAIN = "nemo-gym-staging-call-v2";
const EXTRAS_DOMAIN = "nemo-gym-staging-extras-v1";
const TOKEN_DOMAIN = "nemo-gym-staging-prefix-v2";
const CHAIN_DOMAIN = "nemo-gym-staging-chain-v1";

/** A lowercase SHA-256 hex digest. */
export const HEX_DIGEST_PATTERN = /^[0-9a-f]{64}$/;

const MAX_U64 = 2n ** 64n - 1n;
const MIN_I64 = -(2n ** 63n);
const MAX_I64 = 2n ** 63n - 1n;
const TWO_32 = 2 ** 32;
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;
const utf8Encoder = new TextEncoder();

/** Which hash a {@link DigestObserver} saw. */
export type DigestKind = "cumulative" | "chain" | "extras" | "staging";

/**
 * Told about every digest computed, with the payload size in bytes (domain excluded): the metrics
 * hook of the Python reference's `capture_metrics.digest`.
 */
export type DigestObserver = (kind: DigestKind, payloadBytes: number) => void;

const observers = new Set<DigestObserver>();

/**
 * Registers a {@link DigestObserver} for every digest this module computes, process-wide.
 * Returns the function that unregisters it.
 *
 * @experimental
 * @example
 * let staged = 0;
 * const stop = observeDigests((kind) => { if (kind === "staging") staged += 1; });
 * // ... build records ...
 * stop();
 */
export function observeDigests(observer: DigestObserver): () => void {
  observers.add(observer);
  return () => {
    observers.delete(observer);
  };
}

function invalid(message: string): never {
  throw new CaptureError("invalid_digest_input", message);
}

/**
 * UTF-8 bytes of `text`, refusing lone surrogates as Python's `str.encode("utf-8")` does
 * (`TextEncoder` would silently write U+FFFD instead).
 *
 * @internal
 */
export function utf8Strict(text: string, field: string): Uint8Array {
  if (typeof text !== "string") invalid(`${field} must be text, got ${typeof text}`);
  if (LONE_SURROGATE.test(text)) invalid(`${field} is not valid Unicode (a lone surrogate)`);
  return utf8Encoder.encode(text);
}

/** The size of a {@link Sha256Writer}'s first buffer, and of the ones it hands back to reuse. */
const WRITER_BUFFER_BYTES = 512;
/** Buffers finished writers left for the next ones. */
const WRITER_POOL: Uint8Array[] = [];

/** A hex digit's value (the digest was checked to be lowercase hex). */
function hexNibble(text: string, index: number): number {
  const c = text.charCodeAt(index);
  return c <= 0x39 ? c - 0x30 : c - 0x57;
}

/** Bytes a {@link Sha256Writer} buffers before it hands them to a streaming hash. */
const WRITER_FLUSH_BYTES = 64 * 1024;

/**
 * Incremental SHA-256 over the encodings, counting payload bytes for the observers.
 *
 * @internal Shared with the conversation fingerprints; not part of the public API.
 *
 * The encodings arrive as many small fields (a byte, a u64, a short text); they are gathered in
 * a buffer and hashed in one call, since each native `update` costs far more than copying a few
 * bytes. Large inputs stream through a hash object instead of growing the buffer.
 */
export class Sha256Writer {
  #hash: Hash | null = null;
  #buffer = WRITER_POOL.pop() ?? new Uint8Array(WRITER_BUFFER_BYTES);
  #view = new DataView(this.#buffer.buffer);
  #length = 0;
  #payloadBytes = 0;

  constructor(domain: string) {
    // Domains are ASCII: one byte per character, as latin1 writes them.
    this.#reserve(domain.length);
    for (let i = 0; i < domain.length; i++) this.#buffer[this.#length++] = domain.charCodeAt(i);
  }

  raw(bytes: Uint8Array): void {
    this.#payloadBytes += bytes.length;
    if (bytes.length >= WRITER_FLUSH_BYTES / 2) {
      this.#flush();
      this.#streaming().update(bytes);
      return;
    }
    this.#reserve(bytes.length);
    this.#buffer.set(bytes, this.#length);
    this.#length += bytes.length;
  }

  u8(value: number): void {
    this.#reserve(1);
    this.#view.setUint8(this.#length, value);
    this.#length += 1;
    this.#payloadBytes += 1;
  }

  u64(value: number | bigint, field: string): void {
    this.#reserve(8);
    writeU64(this.#view, this.#length, value, field);
    this.#length += 8;
    this.#payloadBytes += 8;
  }

  text(value: string, field: string): void {
    if (typeof value === "string" && value.length < WRITER_FLUSH_BYTES / 2 && this.#ascii(value)) {
      return;
    }
    const bytes = utf8Strict(value, field);
    this.u64(bytes.length, `${field} length`);
    this.raw(bytes);
  }

  /**
   * `text(value)` of an ASCII string, written straight into the buffer (its UTF-8 bytes are its
   * char codes, and it holds no surrogate); false, with nothing written, for any other string.
   * IDs and modes are ASCII: no encoder call and no intermediate bytes per field.
   */
  #ascii(value: string): boolean {
    const n = value.length;
    this.#reserve(8 + n);
    const start = this.#length + 8;
    for (let i = 0; i < n; i++) {
      const c = value.charCodeAt(i);
      if (c >= 0x80) return false;
      this.#buffer[start + i] = c;
    }
    writeU64(this.#view, this.#length, n, "text length");
    this.#length = start + n;
    this.#payloadBytes += 8 + n;
    return true;
  }

  /**
   * `u64(byte length) ++ token_ids(ids)` (with `lengthPrefix`) or `token_ids(ids)` alone, written
   * straight into the buffer; a long list goes through {@link encodeTokenIds} and the stream.
   */
  tokenIds(ids: readonly number[], field: string, lengthPrefix: boolean): void {
    if (!Array.isArray(ids) || ids.length >= WRITER_FLUSH_BYTES / 16) {
      const bytes = encodeTokenIds(ids, field);
      if (lengthPrefix) this.u64(bytes.length, "column length");
      this.raw(bytes);
      return;
    }
    const bytes = 8 * (ids.length + 1);
    if (lengthPrefix) this.u64(bytes, "column length");
    this.#reserve(bytes);
    const view = this.#view;
    let at = this.#length;
    writeU64(view, at, ids.length, `${field} length`);
    for (let i = 0; i < ids.length; i++) writeU64(view, (at += 8), ids[i] as number, field);
    this.#length += bytes;
    this.#payloadBytes += bytes;
  }

  /** `u64(byte length) ++ f32s(values)`, written straight into the buffer (see {@link tokenIds}). */
  float32Column(values: readonly number[], field: string): void {
    if (!Array.isArray(values) || values.length >= WRITER_FLUSH_BYTES / 8) {
      const bytes = encodeFloat32s(values, field);
      this.u64(bytes.length, "column length");
      this.raw(bytes);
      return;
    }
    const bytes = 8 + 4 * values.length;
    this.u64(bytes, "column length");
    this.#reserve(bytes);
    const view = this.#view;
    const at = this.#length;
    writeU64(view, at, values.length, `${field} length`);
    for (let i = 0; i < values.length; i++) {
      const value = values[i];
      if (typeof value !== "number" || !Number.isFinite(value)) {
        invalid(`${field} values must be finite floats, got ${String(value)}`);
      }
      if (!Number.isFinite(Math.fround(value)))
        invalid(`${field} value overflows float32: ${value}`);
      view.setFloat32(at + 8 + 4 * i, value);
    }
    this.#length += bytes;
    this.#payloadBytes += bytes;
  }

  digestHex(value: string, field: string): void {
    checkHexDigest(value, field);
    // 32 bytes straight into the buffer: no Buffer per digest.
    this.#reserve(32);
    for (let i = 0; i < 32; i++) {
      this.#buffer[this.#length + i] = (hexNibble(value, 2 * i) << 4) | hexNibble(value, 2 * i + 1);
    }
    this.#length += 32;
    this.#payloadBytes += 32;
  }

  /** The hex digest; `kind` null tells no {@link DigestObserver} (not a staging digest). */
  finish(kind: DigestKind | null): string {
    if (kind !== null) for (const observer of observers) observer(kind, this.#payloadBytes);
    const pending = this.#buffer.subarray(0, this.#length);
    const hex =
      this.#hash === null ? oneShotSha256(pending) : this.#hash.update(pending).digest("hex");
    // The next writer reuses the buffer (one writer is finished before the next starts, mostly;
    // one abandoned by a throw is simply not returned).
    if (this.#buffer.length === WRITER_BUFFER_BYTES && WRITER_POOL.length < 8) {
      WRITER_POOL.push(this.#buffer);
    }
    return hex;
  }

  #streaming(): Hash {
    this.#hash ??= createHash("sha256");
    return this.#hash;
  }

  #flush(): void {
    if (this.#length === 0) return;
    this.#streaming().update(this.#buffer.subarray(0, this.#length));
    this.#length = 0;
  }

  /** Room for `n` more bytes: the buffer grows, or is flushed once it is large. */
  #reserve(n: number): void {
    if (this.#length + n <= this.#buffer.length) return;
    if (this.#length + n > WRITER_FLUSH_BYTES) {
      this.#flush();
      if (n <= this.#buffer.length) return;
    }
    let size = this.#buffer.length * 2;
    while (size < this.#length + n) size *= 2;
    const grown = new Uint8Array(size);
    grown.set(this.#buffer.subarray(0, this.#length));
    this.#buffer = grown;
    this.#view = new DataView(grown.buffer);
  }
}

/** SHA-256 (hex) of bytes in one call: `crypto.hash` where Node has it. */
const oneShotSha256: (bytes: Uint8Array) => string =
  typeof (cryptoModule as { hash?: unknown }).hash === "function"
    ? (bytes) =>
        (cryptoModule as unknown as { hash(a: string, d: Uint8Array, e: string): string }).hash(
          "sha256",
          bytes,
          "hex",
        )
    : (bytes) => createHash("sha256").update(bytes).digest("hex");

/** Writes an unsigned 64-bit big-endian integer: a safe-integer number or a bigint. */
function writeU64(view: DataView, offset: number, value: number | bigint, field: string): void {
  if (typeof value === "bigint") {
    if (value < 0n || value > MAX_U64) invalid(`${field} must be an unsigned 64-bit integer`);
    view.setBigUint64(offset, value);
    return;
  }
  if (typeof value !== "number" || !Number.isSafeInteger(value) || value < 0) {
    invalid(`${field} must be an unsigned 64-bit integer, got ${String(value)}`);
  }
  // Two 32-bit halves are exact for every safe integer and avoid a BigInt per token.
  view.setUint32(offset, Math.floor(value / TWO_32));
  view.setUint32(offset + 4, value % TWO_32);
}

function checkHexDigest(value: string, field: string): void {
  if (typeof value !== "string" || !HEX_DIGEST_PATTERN.test(value)) {
    invalid(`${field} must be a lowercase SHA-256 hex digest`);
  }
}

function hexBytes(value: string, field: string): Uint8Array {
  checkHexDigest(value, field);
  return Buffer.from(value, "hex");
}

/** `token_ids(ids)`: the count, then each id, as u64. */
function encodeTokenIds(ids: readonly number[], field: string): Uint8Array {
  if (!Array.isArray(ids)) invalid(`${field} must be a list of token IDs`);
  const out = new Uint8Array(8 * (ids.length + 1));
  const view = new DataView(out.buffer);
  writeU64(view, 0, ids.length, `${field} length`);
  for (let i = 0; i < ids.length; i++) writeU64(view, 8 * (i + 1), ids[i] as number, field);
  return out;
}

/** `f32s(values)`: the count, then each value as IEEE-754 float32 big-endian. */
function encodeFloat32s(values: readonly number[], field: string): Uint8Array {
  if (!Array.isArray(values)) invalid(`${field} must be a list of floats`);
  const out = new Uint8Array(8 + 4 * values.length);
  const view = new DataView(out.buffer);
  writeU64(view, 0, values.length, `${field} length`);
  for (let i = 0; i < values.length; i++) {
    const value = values[i];
    if (typeof value !== "number" || !Number.isFinite(value)) {
      invalid(`${field} values must be finite floats, got ${String(value)}`);
    }
    // Rounding to float32 may overflow; Python's struct.pack raises then, so do we.
    if (!Number.isFinite(Math.fround(value))) invalid(`${field} value overflows float32: ${value}`);
    view.setFloat32(8 + 4 * i, value);
  }
  return out;
}

/**
 * `hash_token_ids`: SHA-256 of `nemo-gym-staging-prefix-v2 ++ token_ids(ids)`, the digest of one
 * exact cumulative token sequence. Several parts hash as their concatenation.
 *
 * @example
 * hashTokenIds([1, 2, 3]) === hashTokenIds([1], [2, 3]); // true
 */
export function hashTokenIds(...parts: readonly (readonly number[])[]): string {
  const writer = new Sha256Writer(TOKEN_DOMAIN);
  const count = parts.reduce((sum, part) => sum + part.length, 0);
  writer.u64(count, "token_ids length");
  for (const part of parts) {
    if (Array.isArray(part) && part.length < WRITER_FLUSH_BYTES / 16) {
      // Short parts straight into the buffer: no intermediate bytes per part.
      for (let i = 0; i < part.length; i++) writer.u64(part[i] as number, "token_id");
    } else {
      writer.raw(encodeTokenIds(part, "token_id").subarray(8));
    }
  }
  return writer.finish("cumulative");
}

/**
 * `chain_hash`: SHA-256 of `nemo-gym-staging-chain-v1 ++ (0x00 | 0x01 ++ parent's 32 bytes) ++
 * token_ids(delta)`. Chains one staged delta onto its parent's chain hash (null for a root), so
 * parent-child token continuity verifies without the cumulative sequence.
 */
export function chainHash(
  parentChainHash: string | null,
  tokenIdsDelta: readonly number[],
): string {
  const writer = new Sha256Writer(CHAIN_DOMAIN);
  if (parentChainHash === null) {
    writer.u8(0x00);
  } else {
    writer.u8(0x01);
    writer.digestHex(parentChainHash, "parent_chain_hash");
  }
  writer.tokenIds(tokenIdsDelta, "token_ids_delta", false);
  return writer.finish("chain");
}

function isPlainObject(value: object): value is Record<string, unknown> {
  const proto: unknown = Object.getPrototypeOf(value);
  return proto === Object.prototype || proto === null;
}

function encodeExtra(writer: Sha256Writer, value: unknown, path: string, depth: number): void {
  // Python's recursion limit (~1000 frames) bounds its encoder; bound ours before the stack does.
  if (depth > 900) invalid(`${path}: extras nest too deeply`);
  const scratch = new DataView(new ArrayBuffer(8));
  const bytes = (length: number) => new Uint8Array(scratch.buffer.slice(0, length));
  if (value === null) return writer.raw(utf8Encoder.encode("N"));
  switch (typeof value) {
    case "boolean":
      writer.raw(utf8Encoder.encode("B"));
      return writer.u8(value ? 1 : 0);
    case "bigint":
      if (value < MIN_I64 || value > MAX_I64) {
        invalid(`${path}: extras integer is outside signed 64-bit range`);
      }
      scratch.setBigInt64(0, value);
      writer.raw(utf8Encoder.encode("I"));
      return writer.raw(bytes(8));
    case "number":
      // A safe integer is a Python int; -0 and every other finite number are floats.
      if (Number.isSafeInteger(value) && !Object.is(value, -0)) {
        scratch.setBigInt64(0, BigInt(value));
        writer.raw(utf8Encoder.encode("I"));
        return writer.raw(bytes(8));
      }
      return encodeFloat(writer, value, path);
    case "string":
      writer.raw(utf8Encoder.encode("S"));
      return writer.text(value, path);
    case "object":
      if (value instanceof PyFloat) return encodeFloat(writer, value.value, path);
      if (Array.isArray(value)) {
        writer.raw(utf8Encoder.encode("L"));
        writer.u64(value.length, `${path} length`);
        value.forEach((item, i) => encodeExtra(writer, item, `${path}[${i}]`, depth + 1));
        return;
      }
      if (isPlainObject(value)) {
        // Keys sort by UTF-8 bytes, which is code point order.
        const keys = Object.keys(value).sort(compareCodePoints);
        writer.raw(utf8Encoder.encode("D"));
        writer.u64(keys.length, `${path} length`);
        for (const key of keys) {
          writer.text(key, `${path} key`);
          encodeExtra(writer, value[key], `${path}.${key}`, depth + 1);
        }
        return;
      }
  }
  invalid(`${path}: extras contain an unsupported value (${describe(value)})`);
}

function encodeFloat(writer: Sha256Writer, value: number, path: string): void {
  if (!Number.isFinite(value)) invalid(`${path}: extras floats must be finite, got ${value}`);
  const scratch = new DataView(new ArrayBuffer(8));
  scratch.setFloat64(0, value);
  writer.raw(utf8Encoder.encode("F"));
  writer.raw(new Uint8Array(scratch.buffer));
}

function describe(value: unknown): string {
  if (typeof value === "object" && value !== null) return "an object with a non-plain prototype";
  return typeof value;
}

/**
 * `extras_digest`: SHA-256 of `nemo-gym-staging-extras-v1 ++ 0x01 ++ enc(extras)` with a typed
 * encoding: null `N`; bool `B` + 0x01/0x00; int `I` + int64 BE; float `F` + float64 BE; string
 * `S` + text; list `L` + u64(len) + items; object `D` + u64(len) + (text(key) ++ enc(value)) by
 * key in UTF-8 byte order. `extras` must be a plain object or null.
 *
 * Ints are safe-integer numbers and bigints; floats are other finite numbers and
 * {@link PyFloat} (JavaScript cannot tell `1.0` from `1`: mark integral floats with `pyFloat`).
 * Throws {@link CaptureError} `invalid_digest_input` for NaN, ±Infinity, integers beyond int64,
 * `undefined`, functions, class instances and lone surrogates.
 */
export function extrasDigest(extras: Readonly<Record<string, unknown>> | null): string {
  if (extras !== null && (typeof extras !== "object" || Array.isArray(extras))) {
    invalid("extras must be an object or null");
  }
  const writer = new Sha256Writer(EXTRAS_DOMAIN);
  writer.u8(EXTRAS_DIGEST_VERSION);
  encodeExtra(writer, extras, "extras", 0);
  return writer.finish("extras");
}

/** The extras digest of a record without extras: `extrasDigest(null)`. */
export const EMPTY_EXTRAS_DIGEST = extrasDigest(null);

/** The fields the staged-record digest covers, named as on the wire. */
export interface StagingDigestInput {
  readonly schema_version: number;
  readonly digest_version: number;
  readonly extras_digest_version: number;
  readonly rollout_id: string;
  readonly model_call_id: string;
  readonly parent_call_id: string | null;
  readonly mode: string;
  readonly prev_len: number;
  readonly delta_len: number;
  readonly cum_len: number;
  readonly weight_version: number;
  readonly token_ids_delta: readonly number[];
  readonly token_mask_delta: readonly number[];
  readonly generation_log_probs_delta: readonly number[];
  readonly extras_digest: string;
  readonly chain_hash: string;
  readonly cumulative_hash: string;
}

function invalidRecord(message: string): never {
  throw new CaptureError("invalid_record", message);
}

/** The record invariants `staging_digest` checks before hashing, in the reference's order. */
function checkStagingInput(input: StagingDigestInput): void {
  if (input.schema_version !== STAGING_SCHEMA_VERSION) {
    invalidRecord(`unsupported staging schema version ${input.schema_version}`);
  }
  if (input.digest_version !== STAGING_DIGEST_VERSION) {
    invalidRecord(`unsupported staging digest version ${input.digest_version}`);
  }
  if (input.extras_digest_version !== EXTRAS_DIGEST_VERSION) {
    invalidRecord(`unsupported extras digest version ${input.extras_digest_version}`);
  }
  if (!input.rollout_id || !input.model_call_id) {
    invalidRecord("rollout_id and model_call_id must be non-empty");
  }
  if (input.parent_call_id === "") invalidRecord("parent_call_id must be non-empty when present");
  if (input.mode !== "text" && input.mode !== "token_in") {
    invalidRecord(`unsupported capture mode ${JSON.stringify(input.mode)}`);
  }
  if (input.parent_call_id === null && (input.prev_len !== 0 || input.mode !== "text")) {
    invalidRecord("a parentless call must be a text-mode root with prev_len == 0");
  }
  if (input.parent_call_id !== null && (input.prev_len === 0 || input.mode !== "token_in")) {
    invalidRecord("a child call must use token_in mode with prev_len > 0");
  }
  const ids = input.token_ids_delta;
  if (input.delta_len === 0) invalidRecord("a staged call delta must contain at least one token");
  if (input.delta_len !== ids.length) {
    invalidRecord(`delta_len ${input.delta_len} does not match ${ids.length} token IDs`);
  }
  const masks = input.token_mask_delta;
  const logprobs = input.generation_log_probs_delta;
  if (ids.length !== masks.length || ids.length !== logprobs.length) {
    invalidRecord("token IDs, masks, and log probabilities must have equal lengths");
  }
  if (masks.some((mask) => mask !== 0 && mask !== 1)) {
    invalidRecord("token_mask_delta must contain only 0.0 or 1.0");
  }
  if (masks.some((mask, i) => mask === 0 && logprobs[i] !== 0)) {
    invalidRecord("prompt-carry log probabilities must be 0.0");
  }
  if (input.cum_len !== input.prev_len + input.delta_len) {
    invalidRecord(
      `cum_len ${input.cum_len} does not equal prev_len + delta_len (${input.prev_len + input.delta_len})`,
    );
  }
}

/**
 * `staging_digest`: SHA-256 of `nemo-gym-staging-call-v2 ++ u8 2 ++ u8 2 ++ u8 1 ++
 * text(rollout_id) ++ text(model_call_id) ++ opt_text(parent_call_id) ++ text(mode) ++
 * u64(prev_len) ++ u64(delta_len) ++ u64(cum_len) ++ u64(weight_version) ++
 * bytes(token_ids(delta)) ++ bytes(f32s(mask)) ++ bytes(f32s(logprobs)) ++ extras_digest (32 raw
 * bytes) ++ 0x01 ++ chain_hash (32) ++ 0x01 ++ cumulative_hash (32)`.
 *
 * Checks the record invariants first (versions 2/2/1, non-empty IDs, parentless ⇔ text root with
 * `prev_len` 0, `delta_len` ≥ 1 equal to the token count, equal column lengths, masks in {0, 1},
 * masked log probabilities 0, `cum_len = prev_len + delta_len`) and throws {@link CaptureError}
 * `invalid_record`; a value that cannot be encoded throws `invalid_digest_input`.
 */
export function stagingDigest(input: StagingDigestInput): string {
  checkStagingInput(input);
  const extras = hexBytes(input.extras_digest, "extras_digest");
  const writer = new Sha256Writer(CALL_DOMAIN);
  writer.u8(input.schema_version);
  writer.u8(input.digest_version);
  writer.u8(input.extras_digest_version);
  writer.text(input.rollout_id, "rollout_id");
  writer.text(input.model_call_id, "model_call_id");
  if (input.parent_call_id === null) {
    writer.u8(0x00);
  } else {
    writer.u8(0x01);
    writer.text(input.parent_call_id, "parent_call_id");
  }
  writer.text(input.mode, "mode");
  writer.u64(input.prev_len, "prev_len");
  writer.u64(input.delta_len, "delta_len");
  writer.u64(input.cum_len, "cum_len");
  writer.u64(input.weight_version, "weight_version");
  writer.tokenIds(input.token_ids_delta, "token_id", true);
  writer.float32Column(input.token_mask_delta, "token_mask_delta");
  writer.float32Column(input.generation_log_probs_delta, "generation_log_probs_delta");
  writer.raw(extras);
  // The presence bytes are part of the frozen v2 layout: every staged record carries both hashes.
  writer.u8(0x01);
  writer.digestHex(input.chain_hash, "chain_hash");
  writer.u8(0x01);
  writer.digestHex(input.cumulative_hash, "cumulative_hash");
  return writer.finish("staging");
}

/** The three token columns of one staged delta. */
export interface StagingDelta {
  readonly token_ids_delta: number[];
  readonly token_mask_delta: number[];
  readonly generation_log_probs_delta: number[];
}

/**
 * `build_staging_delta`: slices a full prompt and its generation into the next staged delta:
 * `prompt[prevLen:] ++ generated`, masked 0 for the prompt part (log probability 0) and 1 for the
 * generated part. Throws {@link CaptureError} `invalid_record` when `prevLen` is outside the
 * prompt, the generated columns differ in length, or the delta is empty.
 */
export function buildStagingDelta(input: {
  readonly promptTokenIds: readonly number[];
  readonly generatedTokenIds: readonly number[];
  readonly generatedLogprobs: readonly number[];
  readonly prevLen: number;
}): StagingDelta {
  const { promptTokenIds: prompt, generatedTokenIds: generated, prevLen } = input;
  if (!(prevLen >= 0 && prevLen <= prompt.length)) {
    invalidRecord(`prev_len=${prevLen} is outside prompt length ${prompt.length}`);
  }
  if (generated.length !== input.generatedLogprobs.length) {
    invalidRecord(
      `generated token and log-probability lengths differ: ${generated.length} != ${input.generatedLogprobs.length}`,
    );
  }
  const carried = prompt.slice(prevLen);
  const delta: StagingDelta = {
    token_ids_delta: [...carried, ...generated],
    token_mask_delta: [...carried.map(() => 0), ...generated.map(() => 1)],
    generation_log_probs_delta: [...carried.map(() => 0), ...input.generatedLogprobs],
  };
  if (delta.token_ids_delta.length === 0) {
    invalidRecord("staging delta must contain at least one token");
  }
  return delta;
}
