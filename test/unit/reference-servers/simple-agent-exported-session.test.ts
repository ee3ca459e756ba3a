/**
 * The Simple Agent's restore check of an exported session: the hand-checked common case and
 * the schema agree on every value, so the fast path accepts nothing the schema refuses.
 */
import fc from "fast-check";
import { describe, expect, it, vi } from "vitest";
import {
  ExportedSessionSchema,
  exportedSessionOf,
} from "../../../reference-servers/simple-agent/src/exported-session.js";

const cookiesArb = fc.oneof(
  fc.constant(null),
  fc.dictionary(fc.string({ maxLength: 4 }), fc.string({ maxLength: 4 }), { maxKeys: 3 }),
  fc.dictionary(
    fc.string({ maxLength: 4 }),
    fc.oneof(fc.string(), fc.integer(), fc.constant(null)),
    {
      minKeys: 1,
      maxKeys: 3,
    },
  ),
  fc.constant([]),
  fc.constant(JSON.parse('{"__proto__": "x", "a": "b"}') as unknown),
  fc.constant(new Map()),
  fc.constant("jar"),
);

const sessionArb = fc.oneof(
  fc.record(
    {
      request: fc.oneof(
        fc.constant({ agent_session_id: "s" }),
        fc.constant(undefined),
        fc.integer(),
      ),
      resources_cookies: cookiesArb,
      observations: fc.oneof(
        fc.constant(null),
        fc.constant({ source: "simple_agent", records: [], gaps: [] }),
        fc.constant({ source: "other" }),
      ),
      extra: fc.constant(1),
    },
    { requiredKeys: [] },
  ),
  fc.constant(null),
  fc.constant([]),
  fc.string(),
);

describe("exportedSessionOf", () => {
  it("agrees with ExportedSessionSchema on every value, and gives the same data", () => {
    fc.assert(
      fc.property(sessionArb, (value) => {
        const fast = exportedSessionOf(value);
        const schema = ExportedSessionSchema.safeParse(value);
        expect(fast.success).toBe(schema.success);
        if (fast.success && schema.success) expect(fast.data).toEqual(schema.data);
      }),
      { numRuns: 2000 },
    );
  });

  it("checks the usual exported session without the schema", () => {
    const parse = vi.spyOn(ExportedSessionSchema, "safeParse");
    const value = {
      request: { agent_session_id: "s" },
      resources_cookies: { a: "b" },
      observations: null,
    };
    expect(exportedSessionOf(value)).toEqual({ success: true, data: value });
    expect(parse).not.toHaveBeenCalled();
    parse.mockRestore();
  });
});
