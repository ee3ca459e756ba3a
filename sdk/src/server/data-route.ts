import type { Request, Response } from "express";
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
 * @example
 * const echo = dataRoute({
 *   method: "post",
 *   path: "/echo",
 *   summary: "Echo a message",
 *   request: z.strictObject({ message: z.string() }),
 *   handler: ({ body }) => ({ message: body.message }),
 * });
 */
export interface DataRoute<Schema extends z.ZodType | null = z.ZodType | null> extends RouteDoc {
  readonly request?: Schema;
  /**
   * A hand check of the body, tried before `request` for a route whose bodies are large: what
   * the schema would parse the body into, or null to let the schema parse it (and name what is
   * wrong). It must agree with the schema (hold the two equal with a property test) and must
   * not throw: anything it cannot judge is the schema's.
   */
  readonly parse?: (body: unknown) => (Schema extends z.ZodType ? z.infer<Schema> : never) | null;
  readonly handler: (
    input: RouteInput<Schema extends z.ZodType ? z.infer<Schema> : undefined>,
  ) => unknown;
}

/** Declares a data route with its body type inferred from its schema. */
export function dataRoute<Schema extends z.ZodType | null = null>(
  route: DataRoute<Schema>,
): DataRoute<Schema> {
  return route;
}
