/**
 * Shared fixtures of the capture tests: an independent byte builder for known-answer vectors,
 * admissions, and an in-memory staging sink.
 */
import { createHash } from "node:crypto";
import { expect } from "vitest";
import type { CaptureAdmissionInput } from "#sdk/capture/admission.js";
import { CaptureError, type CaptureErrorReason } from "#sdk/capture/capture-error.js";
import { observeDigests, type DigestKind } from "#sdk/capture/digests.js";
import type { StageResult, StagedCallRecord } from "#sdk/capture/records.js";
import type { StagingSink } from "#sdk/capture/worker-capture.js";

/**
 * Builds hash inputs by hand with Buffer, independently of the module under test, so a wrong field
 * order, width or endianness there makes the known-answer tests fail.
 */
export class Bytes {
  readonly #parts: Buffer[] = [];

  ascii(text: string): this {
    this.#parts.push(Buffer.from(text, "ascii"));
    return this;
  }
  u8(value: number): this {
    this.#parts.push(Buffer.from([value]));
    return this;
  }
  u64(value: number): this {
    const b = Buffer.alloc(8);
    b.writeBigUInt64BE(BigInt(value));
    this.#parts.push(b);
    return this;
  }
  i64(value: bigint): this {
    const b = Buffer.alloc(8);
    b.writeBigInt64BE(value);
    this.#parts.push(b);
    return this;
  }
  f32(value: number): this {
    const b = Buffer.alloc(4);
    b.writeFloatBE(value);
    this.#parts.push(b);
    return this;
  }
  f64(value: number): this {
    const b = Buffer.alloc(8);
    b.writeDoubleBE(value);
    this.#parts.push(b);
    return this;
  }
  hex(digest: string): this {
    this.#parts.push(Buffer.from(digest, "hex"));
    return this;
  }
  /** `text(s)`: u64 byte length, then UTF-8. */
  text(value: string): this {
    const b = Buffer.from(value, "utf8");
    return this.u64(b.length).raw(b);
  }
  raw(bytes: Buffer): this {
    this.#parts.push(bytes);
    return this;
  }
  /** `bytes(x)`: u64 length, then x. */
  nested(inner: Bytes): this {
    const b = inner.buffer();
    return this.u64(b.length).raw(b);
  }
  buffer(): Buffer {
    return Buffer.concat(this.#parts);
  }
  sha256(): string {
    return createHash("sha256").update(this.buffer()).digest("hex");
  }
}

/** `token_ids(ids)` by hand. */
export function tokenIdBytes(ids: readonly number[]): Bytes {
  const b = new Bytes().u64(ids.length);
  for (const id of ids) b.u64(id);
  return b;
}

/** `f32s(values)` by hand. */
export function float32Bytes(values: readonly number[]): Bytes {
  const b = new Bytes().u64(values.length);
  for (const value of values) b.f32(value);
  return b;
}

/** A fixed digest-shaped string, e.g. `hex("ab")` is `abab…` (64 characters). */
export function hex(pair: string): string {
  return pair.repeat(64 / pair.length);
}

/** Asserts that `fn` throws a {@link CaptureError} with `reason`. */
export function expectReason(fn: () => unknown, reason: CaptureErrorReason): CaptureError {
  let caught: unknown;
  try {
    fn();
  } catch (error) {
    caught = error;
  }
  expect(caught, `expected CaptureError ${reason}`).toBeInstanceOf(CaptureError);
  expect((caught as CaptureError).reason).toBe(reason);
  return caught as CaptureError;
}

/** Counts the digests computed while `fn` runs, by kind. */
export function countDigests<T>(fn: () => T): { result: T; counts: Record<DigestKind, number> } {
  const counts: Record<DigestKind, number> = { cumulative: 0, chain: 0, extras: 0, staging: 0 };
  const stop = observeDigests((kind) => {
    counts[kind] += 1;
  });
  try {
    return { result: fn(), counts };
  } finally {
    stop();
  }
}

/** A text-root admission of `r`/`c1`. */
export function textAdmission(
  overrides: Partial<CaptureAdmissionInput> = {},
): CaptureAdmissionInput {
  return { rollout_id: "r", model_call_id: "c1", mode: "text", ...overrides };
}

/** A token_in admission continuing `c0` over the inline prefix `[1, 2, 3]`. */
export function childAdmission(
  overrides: Partial<CaptureAdmissionInput> = {},
): CaptureAdmissionInput {
  return {
    rollout_id: "r",
    model_call_id: "c1",
    parent_call_id: "c0",
    prev_len: 3,
    mode: "token_in",
    required_prefix_token_ids: [1, 2, 3],
    parent_chain_hash: hex("ab"),
    ...overrides,
  };
}

/** A staging sink that keeps records in memory, or answers as told. */
export class MemorySink implements StagingSink {
  readonly staged: StagedCallRecord[] = [];
  answer: (record: StagedCallRecord) => StageResult | Promise<StageResult> = (record) => ({
    schema_version: 2,
    ok: true,
    staging_key: `${record.rollout_id}/${record.model_call_id}`,
    error: null,
  });

  stage(record: StagedCallRecord): StageResult | Promise<StageResult> {
    this.staged.push(record);
    return this.answer(record);
  }
}
