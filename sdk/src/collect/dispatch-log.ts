/**
 * The dispatch log: every (rollout, attempt) the collector is about to send, appended and synced
 * before its `/run` leaves. After a crash it is the only record of what the dead run may have
 * started, so a resumed run can fence each of those attempts before sending the row again.
 */
import { z } from "zod";
import { episodeId, type EpisodeId } from "../identity/episode-id.js";
import { JournalCorruptError, JsonlJournal } from "./jsonl-journal.js";

const EntrySchema = z.object({
  rollout_id: z.string().min(1),
  attempt: z.number().int().nonnegative(),
});

/** An open dispatch log and the newest attempt it holds for each rollout. */
export class DispatchLog {
  private constructor(
    readonly journal: JsonlJournal,
    /** Rollout ID → the newest attempt logged (when the log was opened, and since). */
    readonly newest: Map<string, number>,
    /** Bytes of a torn last entry that opening cut off (0 when none). */
    readonly tornBytes: number,
  ) {}

  /** Opens (or creates) the log at `file` and reads what earlier runs logged. */
  static async open(file: string): Promise<DispatchLog> {
    const newest = new Map<string, number>();
    const journal = await JsonlJournal.open(file, (value, line) => {
      const entry = EntrySchema.safeParse(value);
      if (!entry.success) throw new JournalCorruptError(file, line, "not a dispatch entry");
      const { rollout_id: rollout, attempt } = entry.data;
      if ((newest.get(rollout) ?? -1) < attempt) newest.set(rollout, attempt);
    });
    return new DispatchLog(journal, newest, journal.tornBytes);
  }

  /** Logs that `episode` is about to be sent; resolves once the entry is durable. */
  async record(episode: EpisodeId): Promise<void> {
    if ((this.newest.get(episode.rollout_id) ?? -1) < episode.attempt) {
      this.newest.set(episode.rollout_id, episode.attempt);
    }
    await this.journal.append({ rollout_id: episode.rollout_id, attempt: episode.attempt });
  }

  /** The newest attempt logged for `rolloutId`, or null when it was never sent. */
  newestAttempt(rolloutId: string): EpisodeId | null {
    const attempt = this.newest.get(rolloutId);
    return attempt === undefined ? null : episodeId(rolloutId, attempt);
  }

  async close(): Promise<void> {
    await this.journal.close();
  }
}
