/**
 * The generation-cut wire models (see docs/policy-model.md): the inventory a policy model server
 * sends to `POST /ng-control/v1/generation-cut`, the per-call acks and the receipt the worker
 * answers with, and the check that a receipt answers exactly the inventory sent. Field names match
 * the worker endpoint NeMo RL implements; every model refuses unknown fields.
 *
 * @module
 */
import { createHash } from "node:crypto";
import { z } from "zod";
import { SAFE_ID_PATTERN } from "../identity/episode-id.js";
import { hasOnlyKeys, isPlainRecord, shapeKeys } from "../util/plain-record.js";
import { CaptureError } from "./capture-error.js";
import { HEX_DIGEST_PATTERN } from "./digests.js";
import { TerminalFinishReasonSchema, TerminalStopReasonSchema } from "./wire-primitives.js";
import { compareCodePoints, pyFloat, pythonJson } from "./python-json.js";
import {
  HexDigestSchema,
  IdentifierSchema,
  NonNegativeIntSchema,
  PositiveIntSchema,
  allDistinct,
  parseWire,
} from "./wire-primitives.js";

/** The worker control route a cut request is posted to. */
export const GENERATION_CUT_ROUTE = "/ng-control/v1/generation-cut";

const identityShape = {
  ticket_id: IdentifierSchema,
  rollout_id: IdentifierSchema.regex(SAFE_ID_PATTERN, "must match ^[A-Za-z0-9][A-Za-z0-9._-]*$"),
  attempt: NonNegativeIntSchema,
  model_call_id: IdentifierSchema,
  // Epoch seconds; a Python float, so an integral value digests as `1.0`.
  admitted_at: z.number(),
};

/** One admitted, undelivered call whose generated prefix should be cut. */
export const GenerationCutPrefixSchema = z.strictObject(identityShape);
/** One admitted, undelivered call whose generated prefix should be cut. */
export type GenerationCutPrefix = z.output<typeof GenerationCutPrefixSchema>;

/** The calls one worker must cut, bound to one checkpoint by `inventory_digest`. */
export const GenerationCutInventorySchema = z.strictObject({
  checkpoint_id: IdentifierSchema,
  server_name: IdentifierSchema,
  active_prefixes: z.array(GenerationCutPrefixSchema).default([]),
  inventory_digest: HexDigestSchema,
});
/** The calls one worker must cut. */
export type GenerationCutInventory = z.output<typeof GenerationCutInventorySchema>;

/**
 * The `inventory_digest` of an inventory: lowercase hex SHA-256 of the UTF-8 bytes of
 * `json.dumps({"checkpoint_id", "server_name", "active_prefixes": [...]}, sort_keys=True,
 * separators=(",", ":"))` as the Python reference writes it ({@link pythonJson}), with
 * `admitted_at` as a float. The prefixes are digested in the order given.
 */
export function inventoryDigest(inventory: {
  readonly checkpoint_id: string;
  readonly server_name: string;
  readonly active_prefixes: readonly GenerationCutPrefix[];
}): string {
  // pythonJson of {"active_prefixes": [...], "checkpoint_id": ..., "server_name": ...} (its keys
  // in sorted order), written into the hash a few KB at a time: one string of a round over
  // thousands of calls would be built from a rope of thousands of pieces.
  // pythonJson writes ASCII only, so UTF-8 and Latin-1 bytes coincide.
  const hash = createHash("sha256");
  let text = '{"active_prefixes":[';
  inventory.active_prefixes.forEach((prefix, i) => {
    text += (i > 0 ? "," : "") + digestedPrefixJson(prefix);
    if (text.length >= 16 * 1024) {
      hash.update(text, "latin1");
      text = "";
    }
  });
  text += `],"checkpoint_id":${pythonJson(inventory.checkpoint_id)}`;
  text += `,"server_name":${pythonJson(inventory.server_name)}}`;
  return hash.update(text, "latin1").digest("hex");
}

/**
 * pythonJson of the fields of a prefix the inventory digest covers, `admitted_at` as a Python
 * float, written out with the keys in their sorted order.
 */
function digestedPrefixJson(prefix: GenerationCutPrefix): string {
  return (
    `{"admitted_at":${pythonJson(pyFloat(prefix.admitted_at))},"attempt":${pythonJson(prefix.attempt)}` +
    `,"model_call_id":${pythonJson(prefix.model_call_id)},"rollout_id":${pythonJson(prefix.rollout_id)}` +
    `,"ticket_id":${pythonJson(prefix.ticket_id)}}`
  );
}

/**
 * Builds the inventory for one backend: validates each prefix, sorts them by `ticket_id` (code
 * point order, as Python sorts) and computes {@link inventoryDigest}. Throws
 * {@link CaptureError} `invalid_wire_value` for an invalid field.
 *
 * @example
 * const inventory = buildGenerationCutInventory({
 *   checkpoint_id: "ckpt-7",
 *   server_name: "policy",
 *   active_prefixes: [
 *     { ticket_id: "t1", rollout_id: "r", attempt: 0, model_call_id: "c1", admitted_at: 1.5 },
 *   ],
 * });
 */
export function buildGenerationCutInventory(input: {
  readonly checkpoint_id: string;
  readonly server_name: string;
  readonly active_prefixes: readonly GenerationCutPrefix[];
}): GenerationCutInventory {
  const prefixes = input.active_prefixes
    .map(
      (prefix) =>
        checkedPrefix(prefix) ??
        parseWire(GenerationCutPrefixSchema, prefix, "generation-cut prefix"),
    )
    .sort((a, b) => compareCodePoints(a.ticket_id, b.ticket_id));
  // Each prefix is validated above; the envelope's two identifiers are all that is left, so the
  // inventory is not parsed again as a whole (a round may hold thousands of prefixes).
  const envelope = parseWire(
    InventoryEnvelopeSchema,
    { checkpoint_id: input.checkpoint_id, server_name: input.server_name },
    "generation-cut inventory",
  );
  const fields = { ...envelope, active_prefixes: prefixes };
  return { ...fields, inventory_digest: inventoryDigest(fields) };
}

/**
 * A copy of `value` when it is a valid {@link GenerationCutPrefix} by the rules of
 * {@link GenerationCutPrefixSchema}, checked by hand; null otherwise (the schema then names the
 * problem). A round checks thousands of prefixes, which zod would walk one by one, cold.
 */
function checkedPrefix(value: unknown): GenerationCutPrefix | null {
  if (typeof value !== "object" || value === null || Array.isArray(value)) return null;
  const p = value as Record<string, unknown>;
  if (Object.keys(p).length !== 5) return null;
  const { ticket_id, rollout_id, attempt, model_call_id, admitted_at } = p;
  if (typeof ticket_id !== "string" || ticket_id.length === 0) return null;
  if (typeof rollout_id !== "string" || !SAFE_ID_PATTERN.test(rollout_id)) return null;
  if (typeof attempt !== "number" || !Number.isSafeInteger(attempt) || attempt < 0) return null;
  if (typeof model_call_id !== "string" || model_call_id.length === 0) return null;
  if (typeof admitted_at !== "number" || !Number.isFinite(admitted_at)) return null;
  return { ticket_id, rollout_id, attempt, model_call_id, admitted_at };
}

/**
 * The inventory {@link GenerationCutInventorySchema} would parse `value` into, checked by hand
 * with the schema's rules (a property test holds the two equal); null when `value` breaks one,
 * so the schema parses it and names the problem. For a worker's cut route: one body holds every
 * call of the round, which zod would walk cold, prefix by prefix.
 *
 * @example
 * const inventory = generationCutInventoryFromWire(body) ?? GenerationCutInventorySchema.parse(body);
 */
export function generationCutInventoryFromWire(value: unknown): GenerationCutInventory | null {
  if (!isPlainRecord(value) || !hasOnlyKeys(value, INVENTORY_KEYS)) return null;
  const v = value;
  const { checkpoint_id: checkpointId, server_name: serverName, inventory_digest: digest } = v;
  if (typeof checkpointId !== "string" || checkpointId.length === 0) return null;
  if (typeof serverName !== "string" || serverName.length === 0) return null;
  if (typeof digest !== "string" || !HEX_DIGEST_PATTERN.test(digest)) return null;
  const listed = v.active_prefixes === undefined ? [] : v.active_prefixes;
  if (!Array.isArray(listed)) return null;
  const prefixes: GenerationCutPrefix[] = [];
  for (const item of listed) {
    const prefix = checkedPrefix(item);
    if (prefix === null) return null;
    prefixes.push(prefix);
  }
  return {
    checkpoint_id: checkpointId,
    server_name: serverName,
    active_prefixes: prefixes,
    inventory_digest: digest,
  };
}

const InventoryEnvelopeSchema = GenerationCutInventorySchema.pick({
  checkpoint_id: true,
  server_name: true,
});

/** The prefix evidence a `durable_prefix` ack must carry and a `durable_failure` ack must not. */
const EVIDENCE = [
  "cut_kind",
  "frozen_buffer_id",
  "prefix_token_count",
  "prefix_digest",
  "effective_output_limit",
] as const;

/**
 * The worker's durable outcome for one call of the inventory: `durable_prefix` (its generated
 * prefix is staged under `staging_keys`) or `durable_failure` (no evidence; the call regenerates
 * after a restore).
 */
export const GenerationCutPrefixAckSchema = z
  .strictObject({
    ...identityShape,
    disposition: z.enum(["durable_prefix", "durable_failure"]),
    cut_kind: z.enum(["active_prefix", "terminal_completion"]).nullable().default(null),
    frozen_buffer_id: IdentifierSchema.nullable().default(null),
    staging_keys: z.array(z.string()).default([]),
    prefix_token_count: NonNegativeIntSchema.nullable().default(null),
    prefix_digest: HexDigestSchema.nullable().default(null),
    effective_output_limit: PositiveIntSchema.nullable().default(null),
    terminal_finish_reason: TerminalFinishReasonSchema.nullable().default(null),
    terminal_stop_reason: TerminalStopReasonSchema.default(null),
  })
  .superRefine((value, ctx) => {
    const issue = (message: string) => ctx.addIssue({ code: "custom", message, input: value });
    const carried = EVIDENCE.filter((field) => value[field] !== null);
    if (value.disposition === "durable_prefix") {
      if (carried.length !== EVIDENCE.length || value.staging_keys.length === 0) {
        issue(
          "durable_prefix requires cut_kind, frozen_buffer_id, staging_keys, prefix_token_count, prefix_digest, and effective_output_limit",
        );
      }
    } else if (carried.length > 0 || value.staging_keys.length > 0) {
      issue("durable_failure cannot carry prefix evidence");
    }
    if (value.terminal_stop_reason !== null && value.terminal_finish_reason === null) {
      issue("terminal_stop_reason requires terminal_finish_reason");
    }
    if (!allDistinct(value.staging_keys)) issue("generation-cut staging_keys must be unique");
  });
/** The worker's durable outcome for one call of the inventory. */
export type GenerationCutPrefixAck = z.output<typeof GenerationCutPrefixAckSchema>;

/**
 * The `durable_failure` ack of a prefix: its five identity fields and no evidence. The gate treats
 * every call of a backend whose cut request failed this way.
 */
export function generationCutFailureAck(prefix: GenerationCutPrefix): GenerationCutPrefixAck {
  return parseWire(
    GenerationCutPrefixAckSchema,
    {
      ticket_id: prefix.ticket_id,
      rollout_id: prefix.rollout_id,
      attempt: prefix.attempt,
      model_call_id: prefix.model_call_id,
      admitted_at: prefix.admitted_at,
      disposition: "durable_failure",
    },
    "generation-cut ack",
  );
}

/** A worker's final durable receipt for every call of its inventory. */
export const GenerationCutReceiptSchema = z.strictObject({
  checkpoint_id: IdentifierSchema,
  cut_id: IdentifierSchema,
  inventory_digest: HexDigestSchema,
  inventory: GenerationCutInventorySchema,
  backend_snapshot_id: IdentifierSchema,
  prefixes: z.array(GenerationCutPrefixAckSchema).default([]),
});
/** A worker's final durable receipt for every call of its inventory. */
export type GenerationCutReceipt = z.output<typeof GenerationCutReceiptSchema>;

/**
 * A receipt as the model server reads it: {@link GenerationCutReceiptSchema} except that the
 * echoed `inventory` is left for {@link validateReceiptFor} to compare, member by member and with
 * no other keys, with the inventory that was sent; equal to a valid inventory, it is valid, so a
 * round over thousands of calls does not parse it again.
 */
export const GenerationCutReceiptReplySchema = GenerationCutReceiptSchema.extend({
  inventory: z.unknown(),
});
/** A receipt whose echoed inventory is not parsed yet. */
export type GenerationCutReceiptReply = z.output<typeof GenerationCutReceiptReplySchema>;

const ReceiptEnvelopeSchema = GenerationCutReceiptReplySchema.extend({
  prefixes: z.array(z.unknown()).default([]),
});

/**
 * Parses a worker's receipt as {@link GenerationCutReceiptReplySchema} does, the acks checked
 * by hand where they are valid ({@link checkedAck}); an ack that is not goes through the schema,
 * which names the problem.
 *
 * @throws {@link CaptureError} `invalid_wire_value` naming what is wrong.
 */
export function parseGenerationCutReceipt(value: unknown): GenerationCutReceiptReply {
  const envelope = parseWire(ReceiptEnvelopeSchema, value, "generation-cut receipt");
  const prefixes = envelope.prefixes.map(
    (ack, i) =>
      checkedAck(ack) ?? parseWire(GenerationCutPrefixAckSchema, ack, `generation-cut ack ${i}`),
  );
  return { ...envelope, prefixes };
}

/** The fields an ack may carry: the schema's own, so the fast check cannot drift from it. */
const ACK_KEYS = shapeKeys(GenerationCutPrefixAckSchema);

/** `value` if it is a non-negative (or, with `min` 1, positive) safe integer or null; else undefined. */
function intOrNull(value: unknown, min: number): number | null | undefined {
  if (value === undefined || value === null) return null;
  return typeof value === "number" && Number.isSafeInteger(value) && value >= min
    ? value
    : undefined;
}

/**
 * The ack {@link GenerationCutPrefixAckSchema} would parse `value` into, checked by hand with the
 * schema's rules (a property test holds the two equal); null when `value` breaks one of them.
 */
function checkedAck(value: unknown): GenerationCutPrefixAck | null {
  if (typeof value !== "object" || value === null || Array.isArray(value)) return null;
  const a = value as Record<string, unknown>;
  for (const key of Object.keys(a)) if (!ACK_KEYS.has(key)) return null;
  const identity = checkedPrefix({
    ticket_id: a.ticket_id,
    rollout_id: a.rollout_id,
    attempt: a.attempt,
    model_call_id: a.model_call_id,
    admitted_at: a.admitted_at,
  });
  if (identity === null) return null;
  const disposition = a.disposition;
  if (disposition !== "durable_prefix" && disposition !== "durable_failure") return null;
  const cutKind = a.cut_kind ?? null;
  if (cutKind !== null && cutKind !== "active_prefix" && cutKind !== "terminal_completion") {
    return null;
  }
  const buffer = a.frozen_buffer_id ?? null;
  if (buffer !== null && (typeof buffer !== "string" || buffer.length === 0)) return null;
  if (a.staging_keys === null) return null;
  const keys = a.staging_keys ?? [];
  if (!Array.isArray(keys) || !keys.every((key) => typeof key === "string")) return null;
  const count = intOrNull(a.prefix_token_count, 0);
  const limit = intOrNull(a.effective_output_limit, 1);
  if (count === undefined || limit === undefined) return null;
  const digest = a.prefix_digest ?? null;
  if (digest !== null && (typeof digest !== "string" || !HEX_DIGEST_PATTERN.test(digest)))
    return null;
  const finish = a.terminal_finish_reason ?? null;
  if (finish !== null && finish !== "stop" && finish !== "length") return null;
  const stop = a.terminal_stop_reason ?? null;
  if (
    stop !== null &&
    typeof stop !== "string" &&
    !(typeof stop === "number" && Number.isSafeInteger(stop))
  ) {
    return null;
  }
  const evidence =
    (cutKind === null ? 0 : 1) +
    (buffer === null ? 0 : 1) +
    (count === null ? 0 : 1) +
    (digest === null ? 0 : 1) +
    (limit === null ? 0 : 1);
  if (
    disposition === "durable_prefix"
      ? evidence !== 5 || keys.length === 0
      : evidence > 0 || keys.length > 0
  ) {
    return null;
  }
  if (stop !== null && finish === null) return null;
  if (keys.length > 1 && !allDistinct(keys as string[])) return null;
  // Spelled out, not spread: an object spread followed by ten more fields leaves V8 a slow
  // object built field by field, a third of the time of a round's receipt.
  return {
    ticket_id: identity.ticket_id,
    rollout_id: identity.rollout_id,
    attempt: identity.attempt,
    model_call_id: identity.model_call_id,
    admitted_at: identity.admitted_at,
    disposition,
    cut_kind: cutKind,
    frozen_buffer_id: buffer,
    staging_keys: keys as string[],
    prefix_token_count: count,
    prefix_digest: digest,
    effective_output_limit: limit,
    terminal_finish_reason: finish,
    terminal_stop_reason: stop as string | number | null,
  };
}

function samePrefix(a: GenerationCutPrefix, b: GenerationCutPrefix): boolean {
  return (
    a.ticket_id === b.ticket_id &&
    a.rollout_id === b.rollout_id &&
    a.attempt === b.attempt &&
    a.model_call_id === b.model_call_id &&
    a.admitted_at === b.admitted_at
  );
}

const INVENTORY_KEYS = shapeKeys(GenerationCutInventorySchema);
const PREFIX_KEYS = shapeKeys(GenerationCutPrefixSchema);

/** Whether an echoed inventory (parsed or raw wire) equals `b`, with no member of its own. */
function sameInventory(echo: unknown, b: GenerationCutInventory): boolean {
  if (!isPlainRecord(echo) || !hasOnlyKeys(echo, INVENTORY_KEYS)) return false;
  const prefixes = echo.active_prefixes ?? [];
  return (
    echo.checkpoint_id === b.checkpoint_id &&
    echo.server_name === b.server_name &&
    echo.inventory_digest === b.inventory_digest &&
    Array.isArray(prefixes) &&
    prefixes.length === b.active_prefixes.length &&
    prefixes.every(
      (prefix: unknown, i) =>
        isPlainRecord(prefix) &&
        hasOnlyKeys(prefix, PREFIX_KEYS) &&
        samePrefix(prefix as GenerationCutPrefix, b.active_prefixes[i] as GenerationCutPrefix),
    )
  );
}

/**
 * Refuses a receipt that is not an exact, complete answer to `inventory` (the one sent), with
 * {@link CaptureError}:
 *
 * - `receipt_inventory_mismatch`: the echoed `inventory` is not deeply equal to the one sent, or
 *   the receipt's `inventory_digest` differs from it;
 * - `receipt_coverage_mismatch`: the acks do not name every inventory `ticket_id` exactly once
 *   (a duplicate, an extra or a missing ticket);
 * - `receipt_identity_mismatch`: an ack's `rollout_id`, `attempt`, `model_call_id` or
 *   `admitted_at` differs from the inventory entry with its `ticket_id`.
 *
 * Returning a valid receipt is the worker's durability boundary; on any refusal the gate treats
 * every call of that backend as `durable_failure`.
 */
export function validateReceiptFor(
  receipt: GenerationCutReceipt | GenerationCutReceiptReply,
  inventory: GenerationCutInventory,
): void {
  if (
    !sameInventory(receipt.inventory, inventory) ||
    receipt.inventory_digest !== inventory.inventory_digest
  ) {
    throw new CaptureError(
      "receipt_inventory_mismatch",
      "generation-cut receipt answers a different inventory",
    );
  }
  const admitted = new Map(inventory.active_prefixes.map((prefix) => [prefix.ticket_id, prefix]));
  const acked = receipt.prefixes.map((ack) => ack.ticket_id);
  if (
    !allDistinct(acked) ||
    acked.length !== admitted.size ||
    acked.some((ticket) => !admitted.has(ticket))
  ) {
    throw new CaptureError(
      "receipt_coverage_mismatch",
      "generation-cut receipt must cover every call in the inventory exactly once",
    );
  }
  for (const ack of receipt.prefixes) {
    const call = admitted.get(ack.ticket_id) as GenerationCutPrefix;
    if (!samePrefix(ack, call)) {
      throw new CaptureError(
        "receipt_identity_mismatch",
        `generation-cut receipt identity differs for ticket '${ack.ticket_id}'`,
      );
    }
  }
}
