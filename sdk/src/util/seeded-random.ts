/**
 * A small seeded PRNG: the same seed replays the same run (the conformance kit's hostile slice,
 * the fuzz and sequence suites).
 *
 * @module
 */

/** A small seeded PRNG (mulberry32): the same seed plays the same sequence. */
export class SeededRandom {
  #state: number;
  constructor(seed: number) {
    this.#state = seed >>> 0;
  }
  /** A float in [0, 1). */
  next(): number {
    let t = (this.#state = (this.#state + 0x6d2b79f5) >>> 0);
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }
  /** An integer in [min, max]. */
  int(min: number, max: number): number {
    return min + Math.floor(this.next() * (max - min + 1));
  }
  /** One element of `items`, uniformly. */
  one<T>(items: readonly T[]): T {
    return items[Math.floor(this.next() * items.length)] as T;
  }
  /** True with probability `p`. */
  chance(p: number): boolean {
    return this.next() < p;
  }
  /** One of `choices`, by weight. */
  pick<T extends string>(choices: readonly (readonly [T, number])[]): T {
    const total = choices.reduce((sum, [, weight]) => sum + weight, 0);
    let roll = this.next() * total;
    for (const [choice, weight] of choices) {
      roll -= weight;
      if (roll < 0) return choice;
    }
    return (choices[choices.length - 1] as readonly [T, number])[0];
  }
}
