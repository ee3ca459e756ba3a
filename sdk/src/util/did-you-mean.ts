/**
 * "Did you mean …?" for a value that is not one of a few known choices (a server kind, a key, a
 * server name): the closest choice by edit distance, when it is close enough to be a typo.
 */

/**
 * The edit distance between `a` and `b`: insertions, deletions, substitutions and swaps of two
 * neighbours (the commonest typo, `prot` for `port`) each count 1.
 *
 * @example
 * editDistance("resource", "resources"); // 1
 */
export function editDistance(a: string, b: string): number {
  // d[i * width + j]: the distance between the first i characters of a and the first j of b.
  const width = b.length + 1;
  const d = new Array<number>((a.length + 1) * width).fill(0);
  const at = (i: number, j: number): number => d[i * width + j] ?? 0;
  for (let i = 0; i <= a.length; i++) d[i * width] = i;
  for (let j = 0; j <= b.length; j++) d[j] = j;
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      let best = Math.min(at(i - 1, j) + 1, at(i, j - 1) + 1, at(i - 1, j - 1) + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) {
        best = Math.min(best, at(i - 2, j - 2) + 1);
      }
      d[i * width + j] = best;
    }
  }
  return at(a.length, b.length);
}

/**
 * The choice closest to `word` (ignoring case), or null when none is close enough to be a typo
 * of it: at most one edit for words up to 4 characters, a third of the word's length beyond.
 * Ties go to the earlier choice.
 *
 * @example
 * closestChoice("resource", ["environment", "resources"]); // "resources"
 * closestChoice("database", ["environment", "resources"]); // null
 */
export function closestChoice(word: string, choices: readonly string[]): string | null {
  const limit = Math.max(1, Math.floor(word.length / 3));
  let best: string | null = null;
  let bestDistance = Infinity;
  for (const choice of choices) {
    const distance = editDistance(word.toLowerCase(), choice.toLowerCase());
    if (distance <= limit && distance < bestDistance) {
      best = choice;
      bestDistance = distance;
    }
  }
  return best;
}

/** ` (did you mean 'x'?)` for {@link closestChoice}, or `""` when nothing is close. */
export function didYouMean(word: string, choices: readonly string[]): string {
  const choice = closestChoice(word, choices);
  return choice === null ? "" : ` (did you mean '${choice}'?)`;
}
