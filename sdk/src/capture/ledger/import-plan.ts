/**
 * The input of a ledger import (a restore's ledgers) and its validation: the whole batch is
 * checked (valid keys, each target a later attempt of its source's rollout, one target per
 * rollout, rows that are JSON objects naming their call) before any file is touched.
 */
import { captureKey, type EpisodeId } from "../../identity/episode-id.js";
import { LedgerImportError } from "./errors.js";
import { ledgerEpisode } from "./files.js";
import { checkRow, checkRowShape, type LedgerRowInput } from "./row-codec.js";
import { stampRows } from "./stamp.js";

/** One restored episode of an import batch. */
export interface LedgerImport {
  /** The replacement attempt's key, `<rollout>-a<T>`; its ledger becomes exactly `rows`. */
  readonly targetKey: string;
  /** The checkpointed attempt's key (an earlier attempt of the same rollout). */
  readonly sourceKey: string;
  /** The checkpointed rows, in order; stamped with `sourceKey` when the ledger is written. */
  readonly rows: readonly LedgerRowInput[];
  /**
   * The EpisodeIds the keys were made from, when the caller has them: a key that is the capture
   * key of its EpisodeId needs no parsing (a restore imports thousands). A key that is not is
   * parsed and checked as if these were absent.
   */
  readonly episodes?: { readonly target: EpisodeId; readonly source: EpisodeId };
  /**
   * The rows are known to hold only standard JSON (decoded natively from a checkpoint, see
   * `readAsStandardJson`): their values are not walked again, only their shape is checked.
   */
  readonly rowsStandardJson?: boolean;
}

/** One import target, validated, before any file is touched. */
export interface ImportPlan {
  readonly targetKey: string;
  readonly sourceKey: string;
  readonly target: EpisodeId;
  readonly source: EpisodeId;
  /** The target ledger's rows, checked; stamped with `sourceKey` when the file is written. */
  readonly rows: readonly LedgerRowInput[];
}

/**
 * The episode `key` names: `given` itself when `key` is its capture key (an EpisodeId is valid
 * by construction, so no parse is needed), else the key parsed and checked.
 */
function episodeOfKey(key: string, given: EpisodeId | undefined): EpisodeId {
  return given !== undefined && typeof key === "string" && captureKey(given) === key
    ? given
    : ledgerEpisode(key);
}

/** Validates an import batch whole and encodes its ledgers, before any file is touched. */
export function planImport(targets: readonly LedgerImport[]): ImportPlan[] {
  const rollouts = new Set<string>();
  return targets.map(({ targetKey, sourceKey, rows, episodes, rowsStandardJson }) => {
    const target = episodeOfKey(targetKey, episodes?.target);
    const source = episodeOfKey(sourceKey, episodes?.source);
    if (target.rollout_id !== source.rollout_id || target.attempt <= source.attempt) {
      throw new LedgerImportError(
        `cannot import '${sourceKey}' as '${targetKey}': the target must be a later attempt of the same rollout`,
      );
    }
    if (rollouts.has(target.rollout_id)) {
      throw new LedgerImportError(
        `the import names rollout '${target.rollout_id}' twice; restore each rollout once`,
      );
    }
    rollouts.add(target.rollout_id);
    // Checked now, so a bad row fails the import before anything changes; stamped and encoded
    // when written. The stamp only sets a string field, so it cannot make a checked row fail,
    // but it replaces an own `capture_key: undefined`, which the check alone would refuse.
    for (const row of rows) {
      const undefinedStamp =
        typeof row === "object" &&
        row !== null &&
        "capture_key" in row &&
        row.capture_key === undefined;
      const checked = undefinedStamp ? stampRows([row], sourceKey)[0] : row;
      if (rowsStandardJson === true) checkRowShape(targetKey, checked);
      else checkRow(targetKey, checked);
    }
    return { targetKey, sourceKey, target, source, rows };
  });
}
