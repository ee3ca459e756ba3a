/**
 * File names of the capture ledger directory (policy-model spec §5.1). Every name is built from
 * a validated capture key; a name that parses back yields that key and its episode.
 */
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
  /** A call of the attempt reached a server (spec §6.4). */
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

/** The file name of `kind` for an already validated capture key. */
export function captureFileName(key: string, kind: CaptureFileKind): string {
  return key + CAPTURE_FILE_SUFFIXES[kind];
}

/** A directory entry that is a per-key capture file. */
export interface CaptureFile {
  readonly name: string;
  readonly key: string;
  readonly episode: EpisodeId;
  readonly kind: CaptureFileKind;
}

const KINDS = Object.keys(CAPTURE_FILE_SUFFIXES) as CaptureFileKind[];

/** Parses a directory entry name; null for anything that is not a capture file of a valid key. */
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
