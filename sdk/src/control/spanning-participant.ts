import type { EpisodeId } from "../identity/episode-id.js";
import type { StoredRecord } from "../store/records-reader.js";

/** What a participant spanning several processes adds to the `Participant` hooks. */
export interface SpanningParticipant {
  /**
   * Resolves once a close or reopen in progress has reached every process; `status` waits for
   * it (one process changes admission synchronously).
   */
  settled(): Promise<void>;
  /**
   * Throws (a typed error) to refuse a prepare, commit or restore when a process is missing,
   * e.g. a worker that died: checkpointing the rest would lose its state.
   */
  checkMembership(operation: "prepare" | "commit" | "restore"): void;
  /**
   * Installs a restore's in-scope records as read (decoded, each with its stored line, not
   * validated), so each process validates its own share. Replaces the control plane's own
   * validation and `install`.
   */
  installStored(
    records: readonly StoredRecord[],
    scope: readonly EpisodeId[],
    signal: AbortSignal,
  ): Promise<void>;
}
