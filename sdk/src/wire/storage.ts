/** Wire schemas of checkpoint storage: the manifest (spec core §7.3) and record envelopes. */
import { z } from "zod";
import { EpisodeIdSchema } from "../identity/episode-id.js";

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
  return z.strictObject({ episode_id: EpisodeIdSchema, ...shape });
}

/** Every record carries its episode. */
export interface RecordBase {
  readonly episode_id: z.infer<typeof EpisodeIdSchema>;
}
