/**
 * A data route's handler is typed by its schemas: the body by `request`, the return by `reply`.
 * The `@ts-expect-error` lines are checked by the repository's typecheck (npm run lint): each
 * fails the lint if the typing it pins were missing.
 */
import { describe, expect, expectTypeOf, it } from "vitest";
import { z } from "zod";
import { dataRoute, type RouteInput } from "#sdk/server/data-route.js";

const Reply = z.strictObject({ count: z.int(), label: z.string() });

describe("data route typing", () => {
  it("types the handler's return from the reply schema", () => {
    const route = dataRoute({
      method: "post",
      path: "/count",
      summary: "Count",
      request: z.strictObject({ n: z.int() }),
      reply: Reply,
      handler: ({ body }) => ({ count: body.n, label: "n" }),
    });
    const typed: (
      input: RouteInput<{ n: number }>,
    ) => z.infer<typeof Reply> | undefined | Promise<z.infer<typeof Reply> | undefined> =
      route.handler;
    expect(typed).toBe(route.handler);
    dataRoute({
      method: "post",
      path: "/count",
      summary: "Count",
      reply: Reply,
      // @ts-expect-error a reply missing the schema's fields
      handler: () => ({ count: 1 }),
    });
    dataRoute({
      method: "post",
      path: "/count",
      summary: "Count",
      reply: Reply,
      // @ts-expect-error a field of the wrong type
      handler: async () => ({ count: "one", label: "x" }),
    });
    expect(route.reply).toBe(Reply);
  });

  it("lets a handler that writes the response itself return undefined, and a route without a reply schema return anything", () => {
    const streamed = dataRoute({
      method: "get",
      path: "/stream",
      summary: "Stream",
      reply: Reply,
      handler: ({ res }: RouteInput<undefined>) => {
        res.end();
        return undefined;
      },
    });
    const free = dataRoute({ method: "get", path: "/any", summary: "Any", handler: () => 5 });
    expectTypeOf(free.handler).returns.toExtend<unknown>();
    expect(streamed.method).toBe("get");
  });
});
