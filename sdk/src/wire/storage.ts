/** Wire schemas of checkpoint storage (see docs/storage.md): the manifest and record envelopes. */
import { z } from "zod";
import { EpisodeIdSchema } from "../identity/episode-id.js";
import { JsonPayloadSchema } from "../json/json-payload-schema.js";

/** The only manifest schema version. */
export const MANIFEST_SCHEMA_VERSION = 1;

/** Records file names a manifest may point at (the legacy `records.jsonl` included). */
export const RECORDS_FILE_PATTERN = /^records(-[0-9a-f]{64})?\.jsonl$/;

export const ManifestSchema = z
  .looseObject({
    schema_version: z.literal(MANIFEST_SCHEMA_VERSION),
    kind: z.string(),
    instance: z.string(),
    checkpoint_id: z.string(),
    records_file: z.string().regex(RECORDS_FILE_PATTERN),
    records_sha256: z.string().regex(/^[0-9a-f]{64}$/),
    record_count: z.number().int().min(0),
  })
  .meta({
    id: "Manifest",
    description: "Published last; its presence means the participant's records are complete.",
    example: {
      checkpoint_id: "ckpt-0007",
      instance: "counter",
      kind: "resources",
      record_count: 1,
      records_file: `records-${"ab".repeat(32)}.jsonl`,
      records_sha256: "ab".repeat(32),
      schema_version: 1,
    },
  });
/** A manifest; participant extras (from `manifestExtra`) ride along at top level. */
export type Manifest = z.infer<typeof ManifestSchema>;

export const CommitReplySchema = z
  .looseObject({
    phase: z.literal("committed"),
    manifest: ManifestSchema,
    episode_ids: z
      .array(z.string())
      .meta({ description: "Sorted capture keys of what was exported." }),
  })
  .meta({
    id: "CommitReply",
    description: "Participant-specific extras (e.g. the policy model's staging keys) at top level.",
  });
export type CommitReply = z.infer<typeof CommitReplySchema>;

export const RestoreReplySchema = z
  .strictObject({
    phase: z.literal("restored"),
    source_checkpoint_id: z.string(),
    restored: z.array(z.string()).meta({ description: "Sorted capture keys of the replacements." }),
  })
  .meta({
    id: "RestoreReply",
    example: { phase: "restored", source_checkpoint_id: "ckpt-0007", restored: ["task-3-0-a1"] },
  });
export type RestoreReply = z.infer<typeof RestoreReplySchema>;

/**
 * The schema of a participant's stored record: `episode_id` plus the participant's own fields;
 * unknown fields are refused. Opaque state goes in fields built with `JsonPayloadSchema`.
 *
 * @example
 * const CounterRecord = recordSchema({ state: JsonPayloadSchema });
 */
export function recordSchema<Shape extends z.ZodRawShape>(shape: Shape) {
  const schema = z.strictObject({ episode_id: EpisodeIdSchema, ...shape });
  FIELD_PARSERS.set(schema, fieldParsersOf(shape));
  return schema;
}

/** How a record field is checked on the fast path: a payload passes, else its own schema. */
type FieldParser = { readonly key: string; readonly payload: boolean; readonly schema: z.ZodType };

/**
 * A field's hand check: what its schema would parse the value into, or {@link NO_FAST_PATH}
 * when it breaks a rule (or the check leaves it to the schema).
 */
export type FastFieldParse = (value: unknown) => unknown;

/** What a {@link FastFieldParse} answers when the schema must decide. */
export const NO_FAST_PATH: unique symbol = Symbol("no fast path");

const FAST_FIELDS = new WeakMap<z.ZodType, FastFieldParse>();

/**
 * Gives a record field's schema a hand check that {@link parseDecodedRecord} tries first (a
 * property test must hold the two equal); returns the schema.
 *
 * @internal
 */
export function withFastParse<S extends z.ZodType>(schema: S, fast: FastFieldParse): S {
  FAST_FIELDS.set(schema, fast);
  return schema;
}

/** The field parsers of every schema {@link recordSchema} built. */
const FIELD_PARSERS = new WeakMap<z.ZodType, readonly FieldParser[]>();

function fieldParsersOf(shape: z.ZodRawShape): FieldParser[] {
  return Object.entries(shape).map(([key, schema]) => ({
    key,
    payload: isPayload(schema as z.ZodType),
    schema: schema as z.ZodType,
  }));
}

/** `JsonPayloadSchema` or `JsonPayloadSchema.nullable()`: JSON a decoded record holds already. */
function isPayload(schema: z.ZodType): boolean {
  if (schema === JsonPayloadSchema) return true;
  return schema instanceof z.ZodNullable && schema.unwrap() === JsonPayloadSchema;
}

/**
 * A record decoded by `decodeJson` (so every payload in it is JSON), parsed as its
 * {@link recordSchema} would parse it, with `episode` (already read from its `episode_id`) as
 * its episode: the object's keys checked by hand, payload fields taken as they are, every other
 * field parsed by its own schema. Null when the record breaks a rule or its schema was not built
 * by {@link recordSchema}: the caller then parses it whole, which names the problem.
 *
 * Why: a restore reads thousands of records in a fresh process, where zod walks each record's
 * object schema cold; the fields are what need checking.
 *
 * @internal
 */
export function parseDecodedRecord<R extends RecordBase>(
  schema: z.ZodType<R>,
  value: Record<string, unknown>,
  episode: RecordBase["episode_id"],
): R | null {
  const fields = FIELD_PARSERS.get(schema);
  if (fields === undefined) return null;
  let known = 1;
  const out: Record<string, unknown> = { episode_id: episode };
  for (const field of fields) {
    const present = Object.hasOwn(value, field.key);
    if (present) known += 1;
    const raw = present ? value[field.key] : undefined;
    if (field.payload) {
      if (raw === undefined) return null;
      out[field.key] = raw;
      continue;
    }
    const fast = FAST_FIELDS.get(field.schema);
    let data: unknown;
    if (fast === undefined) {
      // An absent key is zod's to judge: a field's schema alone cannot tell (an object decides
      // which keys may be missing, and whether a missing one gets its default).
      if (!present) return null;
      const parsed = field.schema.safeParse(raw);
      if (!parsed.success) return null;
      data = parsed.data;
    } else {
      data = fast(raw);
      if (data === NO_FAST_PATH) return null;
    }
    if (data !== undefined || present) out[field.key] = data;
  }
  // An unknown key: the strict schema refuses it (and says so).
  if (Object.keys(value).length !== known) return null;
  return out as unknown as R;
}

/** Every record carries its episode. */
export interface RecordBase {
  readonly episode_id: z.infer<typeof EpisodeIdSchema>;
}
