/**
 * Where restored sessions go when a server restarts with a different number of workers. Every
 * session of one pre-crash owner goes to the same live worker (its cookies name that owner, and
 * the router follows the alias to the new worker); owners spread by record count.
 *
 * @see docs/workers.md
 */
import { compareStrings } from "../util/compare-strings.js";

/**
 * The alias table `old owner → live worker`: owners in order of record count (most first, then
 * by name), each to the worker holding the fewest records so far, then the fewest owners, then
 * the first listed. Owners that are live workers themselves are placed like any other: a
 * restart draws new routing IDs, so every old owner is an alias.
 *
 * @param recordsByOwner how many records each old owner holds (0 for owners with none)
 * @param workers the live workers' routing IDs, in worker order
 */
export function placeOwners(
  recordsByOwner: ReadonlyMap<string, number>,
  workers: readonly string[],
): Map<string, string> {
  if (workers.length === 0) throw new Error("cannot place sessions: no live worker");
  const load = workers.map((id) => ({ id, records: 0, owners: 0 }));
  const owners = [...recordsByOwner.entries()].sort(
    ([a, countA], [b, countB]) => countB - countA || compareStrings(a, b),
  );
  const aliases = new Map<string, string>();
  for (const [owner, count] of owners) {
    let best = load[0]!;
    for (const candidate of load) {
      if (
        candidate.records < best.records ||
        (candidate.records === best.records && candidate.owners < best.owners)
      ) {
        best = candidate;
      }
    }
    best.records += count;
    best.owners += 1;
    aliases.set(owner, best.id);
  }
  return aliases;
}
