/**
 * A scope is keyed once per parsed list (`identity/scope-keys.ts`), and already-ordered keys are
 * not sorted again (`sortedCaptureKeys`).
 */
import fc from "fast-check";
import { afterEach, describe, expect, it, vi } from "vitest";
import {
  captureKey,
  episodeId,
  episodeIdFromWire,
  rolloutIdProblem,
  sortedCaptureKeys,
  type EpisodeId,
} from "#sdk/identity/episode-id.js";
import {
  captureKeySet,
  captureKeysOf,
  scopeDigest,
  scopeFromCaptureKeys,
  scopeInKeyOrder,
  sortedScopeKeys,
} from "#sdk/identity/scope-keys.js";

afterEach(() => {
  vi.restoreAllMocks();
});

const keyArb = fc
  .tuple(fc.constantFrom("r", "task-1", "t.2", "x_y", "a-b"), fc.nat(3))
  .map(([rolloutId, attempt]) => episodeId(rolloutId, attempt));

describe("sortedCaptureKeys", () => {
  it("returns keys already in order without sorting them", () => {
    const sort = vi.spyOn(Array.prototype, "sort");
    const keys = sortedCaptureKeys([episodeId("a"), episodeId("a", 2), episodeId("b", 1)]);
    const sorts = sort.mock.calls.length;
    expect(keys).toEqual(["a", "a-a2", "b-a1"]);
    expect(sorts).toBe(0);
  });

  it("sorts and de-duplicates anything else, as a sort of the distinct keys does", () => {
    fc.assert(
      fc.property(fc.array(keyArb, { maxLength: 12 }), (episodes) => {
        const expected = [...new Set(episodes.map(captureKey))].sort();
        expect(sortedCaptureKeys(episodes)).toEqual(expected);
      }),
    );
  });
});

describe("scope keys", () => {
  it("keys a scope once: every reader of the same list gets the same key set and keys", () => {
    const scope = [episodeId("b"), episodeId("a", 1)];
    expect(captureKeysOf(scope)).toEqual(["b", "a-a1"]);
    expect(captureKeysOf(scope)).toBe(captureKeysOf(scope));
    expect(captureKeySet(scope)).toBe(captureKeySet(scope));
    expect([...captureKeySet(scope)]).toEqual(["b", "a-a1"]);
    // Another list naming the same episodes is another request: keyed for itself.
    expect(captureKeySet([...scope])).not.toBe(captureKeySet(scope));
  });

  it("reads each entry of a scope once, however many times its keys are asked for", () => {
    let reads = 0;
    const listed = [episodeId("b"), episodeId("a"), episodeId("c", 2)];
    const scope = new Proxy(listed, {
      get(target, property, receiver) {
        if (typeof property === "string" && /^\d+$/.test(property)) reads += 1;
        return Reflect.get(target, property, receiver) as unknown;
      },
    });
    captureKeySet(scope);
    sortedScopeKeys(scope);
    scopeDigest(scope);
    captureKeysOf(scope);
    expect(reads).toBe(listed.length);
  });

  it("digests the same scope the same whatever its order and duplicates", () => {
    const a = [episodeId("a"), episodeId("b", 1), episodeId("c")];
    const shuffled = [episodeId("c"), episodeId("a"), episodeId("b", 1), episodeId("a")];
    expect(scopeDigest(shuffled)).toBe(scopeDigest(a));
    expect(scopeDigest(a)).toBe(JSON.stringify(["a", "b-a1", "c"]));
    expect(scopeDigest([episodeId("a")])).not.toBe(scopeDigest(a));
    expect(scopeDigest(null)).toBe("null");
    expect(scopeDigest([])).toBe("[]");
  });

  it("sorts an ordered scope without calling sort, and an unordered one once", () => {
    const sort = vi.spyOn(Array.prototype, "sort");
    const ordered = sortedScopeKeys([episodeId("a"), episodeId("b"), episodeId("b", 1)]);
    const afterOrdered = sort.mock.calls.length;
    const unordered = [episodeId("b"), episodeId("a")];
    const first = sortedScopeKeys(unordered);
    const again = sortedScopeKeys(unordered);
    const afterUnordered = sort.mock.calls.length;
    expect(afterOrdered).toBe(0);
    expect(afterUnordered).toBe(1);
    expect(ordered).toEqual(["a", "b", "b-a1"]);
    expect(first).toEqual(["a", "b"]);
    expect(again).toBe(first);
  });

  it("gives an ordered scope back as it is, and any other in key order, each attempt once", () => {
    const ordered = [episodeId("a"), episodeId("a", 2), episodeId("b", 1)];
    expect(scopeInKeyOrder(ordered)).toBe(ordered);
    fc.assert(
      fc.property(fc.array(keyArb, { maxLength: 12 }), (episodes) => {
        const inOrder = scopeInKeyOrder(episodes);
        expect(inOrder.map(captureKey)).toEqual(sortedScopeKeys(episodes));
        expect(inOrder.map(captureKey)).toEqual([...new Set(episodes.map(captureKey))].sort());
        expect(scopeInKeyOrder(episodes)).toBe(inOrder);
      }),
    );
  });

  it("decodes a scope sent as capture keys, remembering them as its keys", () => {
    const keys = ["r-a2", "q"];
    const scope = scopeFromCaptureKeys(keys);
    expect(scope).toEqual([episodeId("r", 2), episodeId("q")]);
    expect(captureKeysOf(scope)).toBe(keys);
    expect(() => scopeFromCaptureKeys(["r-a1-a2"])).toThrow(/names no episode/);
  });

  it("round-trips any scope through its capture keys", () => {
    fc.assert(
      fc.property(fc.array(keyArb, { maxLength: 8 }), (episodes: EpisodeId[]) => {
        const back = scopeFromCaptureKeys([...captureKeysOf(episodes)]);
        expect(back).toEqual(episodes);
      }),
    );
  });
});

describe("rolloutIdProblem", () => {
  /** The two rules as written in the spec: the safe-ID pattern, no reserved attempt suffix. */
  const valid = (id: string): boolean =>
    /^[A-Za-z0-9][A-Za-z0-9._-]*$/.test(id) && !/-a([1-9][0-9]*)$/.test(id);

  it("accepts exactly the safe IDs not ending with -a<N>", () => {
    const idArb = fc.oneof(
      fc.array(fc.constantFrom(..."a-0119._Z"), { maxLength: 10 }).map((chars) => chars.join("")),
      fc.string({ maxLength: 8 }),
    );
    fc.assert(
      fc.property(idArb, (id) => {
        expect(rolloutIdProblem(id) === null).toBe(valid(id));
        const wire = episodeIdFromWire({ rollout_id: id, attempt: 0 });
        expect(wire !== null).toBe(valid(id));
      }),
      { numRuns: 2000 },
    );
    for (const id of ["r-a1", "r-a10", "r-a0", "r-a01", "-a1", "a-a1-b", "x--a1", "job-a"]) {
      expect(rolloutIdProblem(id) === null).toBe(valid(id));
    }
  });
});
