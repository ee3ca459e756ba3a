/**
 * What every `gym ckpt` verb shares besides its session: the common options, the deadline of a
 * step, JSON output and fresh checkpoint IDs.
 */
import { randomBytes } from "node:crypto";
import { DEFAULT_DEADLINE_MS } from "../defaults.js";
import type { Io } from "../output.js";

/** Options every `gym ckpt` verb takes. */
export interface CkptOptions {
  readonly state?: string;
  readonly deployment?: string;
  readonly json?: boolean;
  /** Bound of each coordination step, in ms. @default {@link DEFAULT_DEADLINE_MS} */
  readonly deadlineMs?: number;
}

/** A fresh checkpoint ID: `ckpt-<UTC yyyymmddThhmmssZ>-<4 hex>`. */
export function freshCheckpointId(now = new Date()): string {
  const stamp = now
    .toISOString()
    .replace(/[-:]/g, "")
    .replace(/\.\d+Z$/, "Z");
  return `ckpt-${stamp}-${randomBytes(2).toString("hex")}`;
}

/** The deadline of a step starting now, in seconds since the epoch (as control requests carry it). */
export function deadlineTs(options: CkptOptions): number {
  return (Date.now() + (options.deadlineMs ?? DEFAULT_DEADLINE_MS)) / 1000;
}

/** Prints a value as `--json` does: indented JSON on stdout. */
export function printJson(io: Io, value: unknown): void {
  io.out(JSON.stringify(value, null, 2));
}
