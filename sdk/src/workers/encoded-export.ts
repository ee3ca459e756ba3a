/**
 * A worker's export as its stored lines: the worker encodes each record exactly as the records
 * writer would (in parallel with the other workers), and the coordinator writes those bytes as
 * they are. Neither side parses or re-encodes the records in between.
 *
 * @see docs/workers.md
 */
import { episodeIdToWire, parseEpisodeId } from "../identity/episode-id.js";
import { ENCODED_LINE, encodeRecordLines, type EncodedRecord } from "../store/records-writer.js";
import { linesOf } from "../util/buffer-parts.js";
import type { RecordBase } from "../wire/storage.js";
import { FrameBytes } from "./frame-channel.js";

/** The records of a worker's export as one block of stored lines, with their episodes. */
export function encodeExport(records: readonly RecordBase[]): FrameBytes {
  const episodes = records.map((record) => episodeIdToWire(record.episode_id));
  return new FrameBytes({ episode_ids: episodes }, encodeRecordLines(records));
}

/**
 * The records of an {@link encodeExport} block: each its episode and its line (with its
 * newline), a view of the bytes as they arrived.
 * @throws Error when the block's lines and episodes do not pair up
 */
export function decodeExport(block: unknown): EncodedRecord[] {
  if (!(block instanceof FrameBytes))
    throw new Error("a worker answered an export without its lines");
  const episodes = (block.head as { episode_ids?: unknown }).episode_ids;
  if (!Array.isArray(episodes)) throw new Error("a worker's export names no episodes");
  const { lines, trailing } = linesOf(block.parts);
  if (lines.length !== episodes.length || trailing !== 0) {
    throw new Error(
      `a worker's export holds ${episodes.length} episodes but its lines do not match them`,
    );
  }
  return episodes.map((wire, i) => ({
    episode_id: parseEpisodeId(wire),
    [ENCODED_LINE]: lines[i]!,
  }));
}
