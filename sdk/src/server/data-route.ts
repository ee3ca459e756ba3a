import type { Request, RequestHandler, Response } from "express";
import type { z } from "zod";
import type { RouteDoc } from "../wire/route-doc.js";
import type { RolloutContext } from "./rollout-prefix.js";

/** What a data route handler receives. */
export interface RouteInput<Body> {
  /** The body, validated by the route's `request` schema (undefined without one). */
  readonly body: Body;
  /** The rollout of the request's `/ng-rollout/<key>/` prefix, or null. */
  readonly rollout: RolloutContext | null;
  /**
   * Fires when the work should stop: the client went away, or the server is shutting down.
   * Once it fires, stop.
   */
  readonly signal: AbortSignal;
  readonly req: Request;
  readonly res: Response;
}

/**
 * A data route: one object that validates its body, types its handler and documents itself.
 * The handler's return value is sent as JSON; return `undefined` after writing `res` yourself
 * (e.g. a stream).
 *
 * ## Bodies
 * The server reads an `application/json` body whole before the route runs: at most 64 MiB as
 * sent and once inflated (`Content-Encoding` identity, gzip, deflate or br), UTF-8, nested at
 * most 512 levels; anything else is refused with `invalid_request` (400, 413, 415 or 422; see
 * `json-body.ts`). With checkpointing on, it is read before the participant admits the
 * request, so a body still arriving is never work in flight. A body of another content type is
 * read and dropped (`body` is then undefined).
 *
 * @example
 * const echo = dataRoute({
 *   method: "post",
 *   path: "/echo",
 *   summary: "Echo a message",
 *   request: z.strictObject({ message: z.string() }),
 *   reply: z.strictObject({ message: z.string() }),
 *   examples: { request: { message: "hello" }, reply: { message: "hello" } },
 *   handler: ({ body }) => ({ message: body.message }),
 * });
 */
export interface DataRoute<
  Schema extends z.ZodType | null = z.ZodType | null,
  Reply = unknown,
> extends RouteDoc {
  readonly request?: Schema;
  /** The schema of a 200 reply: documents it and types what the handler returns. */
  readonly reply?: z.ZodType<Reply>;
  /**
   * Example bodies for Swagger UI, typed by the schemas: `request` as a client sends it,
   * `reply` as the handler returns it. Checked against the schemas when the document is built.
   * @default none
   */
  readonly examples?: {
    readonly request?: NoInfer<Schema extends z.ZodType ? z.input<Schema> : never>;
    readonly reply?: NoInfer<Reply>;
  };
  /**
   * Middleware run before the body is read, e.g. a bearer check: a refused caller learns
   * nothing about the body's shape and costs no body parse. @default none
   */
  readonly before?: readonly RequestHandler[];
  /**
   * Whether a resources server that exposes its tools over MCP (`expose_tools_over_mcp: true`)
   * serves this `POST` route as an MCP tool too, named by its path without the `/`
   * (see docs/mcp.md). @default true
   */
  readonly mcp?: boolean;
  /**
   * A hand check of the body, tried before `request` for a route whose bodies are large: what
   * the schema would parse the body into, or null to let the schema parse it (and name what is
   * wrong). It must agree with the schema (hold the two equal with a property test) and must
   * not throw: anything it cannot judge is the schema's.
   */
  readonly parse?: (body: unknown) => (Schema extends z.ZodType ? z.infer<Schema> : never) | null;
  /**
   * Answers the request. With a `reply` schema its return is typed by it (undefined: the
   * handler wrote `res` itself); a field the schema declares as a literal (`z.literal(true)`)
   * needs `as const` on the returned object.
   */
  readonly handler: (
    input: RouteInput<Schema extends z.ZodType ? z.infer<Schema> : undefined>,
  ) => NoInfer<Reply | undefined | Promise<Reply | undefined>>;
}

/**
 * Declares a data route with its body type inferred from its schema and its reply typed by its
 * reply schema.
 *
 * @example
 * class Calculator extends ResourcesServer {
 *   protected override tools() {
 *     return [
 *       dataRoute({
 *         method: "post",
 *         path: "/add",
 *         request: z.strictObject({ a: z.number(), b: z.number() }),
 *         reply: z.strictObject({ sum: z.number() }),
 *         handler: ({ body }) => ({ sum: body.a + body.b }),
 *       }),
 *     ];
 *   }
 *   protected override verify() {
 *     return { reward: 1 };
 *   }
 * }
 */
export function dataRoute<Schema extends z.ZodType | null = null, Reply = unknown>(
  route: DataRoute<Schema, Reply>,
): DataRoute<Schema, Reply> {
  return route;
}

/**
 * A reply schema for a route whose handler returns `unknown` (an overridable hook's result): it
 * documents the reply without typing the handler. @internal
 */
export function documentedReply(schema: z.ZodType): z.ZodType<unknown> {
  return schema;
}
