/**
 * A worker's export as its stored lines: the worker encodes each record exactly as the records
 * writer would (in parallel with the other workers), and the coordinator writes those bytes as
 * they are. Neither side parses or re-encodes the records in between.
 *
 * @see docs/workers.md
 */
import { episodeIdToWire, parseEpisodeId } from "../../identity/episode-id.js";
import type { JsonValue } from "../../json/json-value.js";
import { ENCODED_LINE, encodeRecordLine, type EncodedRecord } from "../../store/records-writer.js";
import type { RecordBase } from "../../wire/storage.js";
import { FrameBytes } from "./frame-channel.js";

/** The records of a worker's export as one block of stored lines, with their episodes. */
export function encodeExport(records: readonly RecordBase[]): FrameBytes {
  const lines = records.map((record) => encodeRecordLine(record)).join("");
  const episodes = records.map((record) => episodeIdToWire(record.episode_id));
  return new FrameBytes({ episode_ids: episodes as unknown as JsonValue }, Buffer.from(lines));
}

/**
 * The records of an {@link encodeExport} block: each its episode and a view of its line.
 * @throws Error when the block's lines and episodes do not pair up
 */
export function decodeExport(block: unknown): EncodedRecord[] {
  if (!(block instanceof FrameBytes))
    throw new Error("a worker answered an export without its lines");
  const episodes = (block.head as { episode_ids?: unknown }).episode_ids;
  if (!Array.isArray(episodes)) throw new Error("a worker's export names no episodes");
  const records: EncodedRecord[] = [];
  const bytes = block.bytes;
  let start = 0;
  for (const wire of episodes) {
    const end = bytes.indexOf(0x0a, start);
    if (end < 0) break;
    records.push({ episode_id: parseEpisodeId(wire), [ENCODED_LINE]: bytes.subarray(start, end) });
    start = end + 1;
  }
  if (records.length !== episodes.length || start !== bytes.length) {
    throw new Error(
      `a worker's export holds ${episodes.length} episodes but its lines do not match them`,
    );
  }
  return records;
}
