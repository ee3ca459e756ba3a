/**
 * Episodes named on the command line: capture keys inline (`--keys`) or in an episodes file
 * (`--episodes FILE`), the same way for every verb that takes them.
 */
import { readFileSync } from "node:fs";
import { fromCaptureKey, type EpisodeId } from "../../identity/episode-id.js";
import { UsageError, describeError } from "../output.js";

/** Parses capture keys (`r`, `r-a1`), each naming an episode; `source` names where they came from. */
export function parseCaptureKeys(keys: readonly string[], source: string): EpisodeId[] {
  return keys.map((key, index) => {
    try {
      return fromCaptureKey(key);
    } catch (error) {
      throw new UsageError(
        `${source}: ${JSON.stringify(key)} (item ${index + 1}) is not a capture key: ${describeError(error)}`,
        "write capture keys: the rollout ID for attempt 0 (task-3), with -aN for attempt N (task-3-a1)",
      );
    }
  });
}

/**
 * Reads an episodes file: capture keys one per line; blank lines and `#` comments ignored.
 * `inline` is the advice when the file cannot be read (e.g. the option that takes keys inline).
 */
export function readEpisodesFile(
  file: string,
  inline = "--episodes takes a file of capture keys, one per line: write them to a file and pass its path",
): EpisodeId[] {
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch (error) {
    throw new UsageError(`cannot read the episodes file ${file}: ${describeError(error)}`, inline);
  }
  const episodes: EpisodeId[] = [];
  text.split(/\r?\n/).forEach((raw, index) => {
    const line = raw.replace(/#.*$/, "").trim();
    if (line === "") return;
    episodes.push(...parseCaptureKeys([line], `${file}:${index + 1}`));
  });
  return episodes;
}
