import { CheckpointError } from "../errors.js";
import type { EpisodeId } from "../identity/episode-id.js";
import { scopeDigest } from "../identity/scope-keys.js";
import type { Operation } from "../wire/control.js";

interface StoredReply {
  readonly args: string;
  readonly reply: unknown;
}

/**
 * What a retried commit or restore must repeat: its directory and its scope's digest (cached per
 * parsed scope, so the write's own comparison reuses it). The directory's JSON ends at its
 * closing quote, so the two cannot run into each other; the digest is not escaped a second time.
 */
export function replyArgs(dir: string, episodes: readonly EpisodeId[] | null): string {
  return `${JSON.stringify(dir)} ${scopeDigest(episodes)}`;
}

/**
 * The replies of completed operations by checkpoint ID, so a retry gets its reply verbatim. A
 * reply is stored with the arguments it answered ({@link replyArgs}, or `""` for a prepare); a
 * retry naming others is refused. Failures are never stored.
 */
export class CompletedReplies {
  readonly #replies = new Map<string, Map<Operation, StoredReply>>();

  /**
   * The stored reply of `operation` on checkpoint `id`, or undefined when there is none.
   * @throws CheckpointError `checkpoint_conflict` when it was stored with other `args`.
   */
  get(id: string, operation: Operation, args: string): unknown {
    const result = this.#replies.get(id)?.get(operation);
    if (result === undefined) return undefined;
    if (result.args !== args) {
      throw CheckpointError.conflict(
        `checkpoint '${id}' was already ${operation === "commit" ? "committed" : "restored"} ` +
          "with another directory or scope; retry with the same arguments or use a new ID",
      );
    }
    return result.reply;
  }

  /** Stores the reply of `operation` on checkpoint `id`, given `args`. */
  set(id: string, operation: Operation, args: string, reply: unknown): void {
    let replies = this.#replies.get(id);
    if (replies === undefined) {
      replies = new Map();
      this.#replies.set(id, replies);
    }
    replies.set(operation, { args, reply });
  }

  /** Drops every reply stored for checkpoint `id` (it was resumed). */
  delete(id: string): void {
    this.#replies.delete(id);
  }
}
