/**
 * File names of the capture ledger directory. Every name is built from
 * a validated capture key; a name that parses back yields that key and its episode.
 *
 * ## Long keys
 * Rollout IDs have no maximum length, but a file name has one (255 bytes on the common Linux
 * file systems). A key whose `<k><suffix>` name would be longer is named by its rollout's digest
 * instead: `~<sha256 hex of the rollout ID>[-a<N>]<suffix>`. `~` is not in the rollout ID
 * alphabet, so no digest name is ever a plain one, and the attempt stays readable, so a restore
 * can still find a rollout's later attempts. Every name that fits keeps its plain form, so
 * directories written before this rule read as they did.
 */
import { createHash } from "node:crypto";
import {
  InvalidEpisodeIdError,
  fromCaptureKey,
  type EpisodeId,
} from "../../identity/episode-id.js";
import { InvalidLedgerKeyError } from "./errors.js";

/** What each per-key file of the ledger directory is, by name suffix. */
export const CAPTURE_FILE_SUFFIXES = {
  /** The ledger: one JSON row per line. */
  ledger: ".lineage.jsonl",
  /** The fence: the attempt is retired and later writes are discarded. */
  fence: ".lineage.retired",
  /** A call of the attempt reached a server. */
  started: ".lineage.started",
  /** The local token store's records of the key. */
  tokens: ".tokens.jsonl",
  /** The local token store's marker of an unfinished write. */
  tokensIncomplete: ".tokens.incomplete",
} as const;

/** One kind of per-key file. */
export type CaptureFileKind = keyof typeof CAPTURE_FILE_SUFFIXES;

/** The files a ledger delete removes: everything `<k>.lineage.*` the ledger writes. */
export const LEDGER_FILE_KINDS: readonly CaptureFileKind[] = ["ledger", "fence", "started"];

/** The episode a capture key names; throws {@link InvalidLedgerKeyError} when it names none. */
export function ledgerEpisode(key: string): EpisodeId {
  if (typeof key !== "string") {
    throw new InvalidLedgerKeyError(String(key), "a capture key is a string");
  }
  try {
    return fromCaptureKey(key);
  } catch (error) {
    if (error instanceof InvalidEpisodeIdError) {
      throw new InvalidLedgerKeyError(key, error.reason, { cause: error });
    }
    throw error;
  }
}

/** The longest file name, in bytes, the ledger writes (ext4, XFS, Btrfs and tmpfs allow 255). */
export const MAX_FILE_NAME_BYTES = 255;

/** The mark that starts a digest name: never the first character of a rollout ID. */
const DIGEST_MARK = "~";

/** The stem that names `rolloutId` in digest names: `~<sha256 hex>`. */
export function rolloutDigestStem(rolloutId: string): string {
  return DIGEST_MARK + createHash("sha256").update(rolloutId, "utf8").digest("hex");
}

/**
 * The file name of `kind` for an already validated capture key: `<k><suffix>`, or the digest name
 * (see the module comment) when that would be longer than {@link MAX_FILE_NAME_BYTES}.
 */
export function captureFileName(key: string, kind: CaptureFileKind): string {
  const plain = key + CAPTURE_FILE_SUFFIXES[kind];
  // Capture keys are ASCII: a character is a byte.
  if (plain.length <= MAX_FILE_NAME_BYTES) return plain;
  const episode = fromCaptureKey(key);
  const attempt = episode.attempt === 0 ? "" : `-a${episode.attempt}`;
  return rolloutDigestStem(episode.rollout_id) + attempt + CAPTURE_FILE_SUFFIXES[kind];
}

/** A directory entry that is a per-key capture file. */
export interface CaptureFile {
  readonly name: string;
  readonly key: string;
  readonly episode: EpisodeId;
  readonly kind: CaptureFileKind;
}

const KINDS = Object.keys(CAPTURE_FILE_SUFFIXES) as CaptureFileKind[];

/**
 * A directory entry with a digest name: the rollout is known by its {@link rolloutDigestStem}
 * only, so the key is recovered from a rollout ID the caller knows.
 */
export interface DigestCaptureFile {
  readonly name: string;
  /** `~<sha256 hex>` of the rollout ID. */
  readonly stem: string;
  readonly attempt: number;
  readonly kind: CaptureFileKind;
}

const DIGEST_NAME = /^(~[0-9a-f]{64})(?:-a([1-9][0-9]*))?$/;

/** Parses a digest name (see the module comment); null for anything else. */
export function parseDigestFileName(name: string): DigestCaptureFile | null {
  if (!name.startsWith(DIGEST_MARK)) return null;
  for (const kind of KINDS) {
    const suffix = CAPTURE_FILE_SUFFIXES[kind];
    if (!name.endsWith(suffix)) continue;
    const match = DIGEST_NAME.exec(name.slice(0, -suffix.length));
    if (match === null) return null;
    const attempt = match[2] === undefined ? 0 : Number(match[2]);
    if (!Number.isSafeInteger(attempt)) return null;
    return { name, stem: match[1] as string, attempt, kind };
  }
  return null;
}

/**
 * Parses a plain directory entry name (`<k><suffix>`); null for anything that is not a capture
 * file of a valid key, digest names included ({@link parseDigestFileName} reads those).
 */
export function parseCaptureFileName(name: string): CaptureFile | null {
  for (const kind of KINDS) {
    const suffix = CAPTURE_FILE_SUFFIXES[kind];
    if (!name.endsWith(suffix)) continue;
    const key = name.slice(0, -suffix.length);
    try {
      return { name, key, episode: fromCaptureKey(key), kind };
    } catch {
      return null;
    }
  }
  return null;
}

/**
 * Validates a batch of capture keys and removes repeats, keeping first occurrences. The whole
 * batch is refused when one key is invalid; a bare string is refused because iterating it
 * would name one-character keys.
 */
export function ledgerKeyBatch(keys: readonly string[]): string[] {
  if (typeof keys === "string" || !Array.isArray(keys)) {
    throw new TypeError("the keys must be a sequence of rollout ids (capture keys), not a string");
  }
  const unique = [...new Set(keys)];
  for (const key of unique) ledgerEpisode(key);
  return unique;
}
