/**
 * The capture ledger's local errors. None is a wire error by itself: the
 * ledger control routes answer an invalid key with 400 and a retired key with 410, and restore
 * wraps a refused import into a `checkpoint_error`.
 */

/**
 * A capture key that names no episode (`r`, `r-aN`; see docs/concepts.md), so no ledger file name
 * may be built from it. A batch holding one is refused whole, before anything changes.
 */
export class InvalidLedgerKeyError extends Error {
  override readonly name = "InvalidLedgerKeyError";
  constructor(
    /** The refused key, as given. */
    readonly key: string,
    /** Why it names no episode. */
    readonly reason: string,
    options?: ErrorOptions,
  ) {
    super(`Invalid rollout id ${JSON.stringify(key)}: ${reason}`, options);
  }
}

/**
 * The attempt's ledger is retired (a fence `<k>.lineage.retired` exists): its rows are gone and
 * reading them must not look like an attempt that made no calls. Delete the key to reuse it.
 */
export class RolloutRetiredError extends Error {
  override readonly name = "RolloutRetiredError";
  constructor(
    /** The retired capture key. */
    readonly captureKey: string,
  ) {
    super(`the capture ledger of '${captureKey}' is retired; delete it before reusing the key`);
  }
}

/**
 * A second, different row for a model call that already has one: rows are write-once per
 * `model_call_id`. The ledger is left unchanged.
 */
export class LedgerConflictError extends Error {
  override readonly name = "LedgerConflictError";
  constructor(
    readonly captureKey: string,
    readonly modelCallId: string,
  ) {
    super(
      `conflicting ledger row for model call '${modelCallId}' of '${captureKey}': ` +
        "a call's row is written once and never changes",
    );
  }
}

/** A ledger row that is not a JSON object with a non-empty string `model_call_id`. */
export class InvalidLedgerRowError extends Error {
  override readonly name = "InvalidLedgerRowError";
  constructor(
    readonly captureKey: string,
    reason: string,
    options?: ErrorOptions,
  ) {
    super(`ledger row of '${captureKey}' refused: ${reason}`, options);
  }
}

/** A ledger file holds a line that is not a row; the file was written by something else. */
export class CorruptLedgerError extends Error {
  override readonly name = "CorruptLedgerError";
  constructor(
    readonly captureKey: string,
    reason: string,
    options?: ErrorOptions,
  ) {
    super(`the capture ledger of '${captureKey}' is corrupt: ${reason}`, options);
  }
}

/** A restore import batch the ledger refuses as a whole, before touching any file. */
export class LedgerImportError extends Error {
  override readonly name = "LedgerImportError";
}
