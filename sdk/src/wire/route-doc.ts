import type { z } from "zod";
import type { ErrorCode } from "../errors.js";

/**
 * How a data route documents itself: the OpenAPI document of a server is built from these and
 * from the control route table, with the same zod schemas that validate requests at run time.
 */
export interface RouteDoc {
  readonly method: "get" | "post" | "put" | "delete";
  /** Express-style path, e.g. `/verify` or `/items/:id`. */
  readonly path: string;
  readonly summary: string;
  readonly description?: string;
  /** Body schema (POST/PUT); null or absent: no body. */
  readonly request?: z.ZodType | null;
  /** Reply schema of a 200; absent: any JSON. */
  readonly reply?: z.ZodType;
  /** Error codes this route can answer with (422 `invalid_request` is added when it has a body). */
  readonly errors?: readonly ErrorCode[];
  /** Whether the route is also served under `/ng-rollout/<capture key>/`. @default false */
  readonly rolloutPrefixed?: boolean;
  /**
   * With checkpointing on, only the `/ng-rollout/<capture key>/` copy is usable: the
   * un-prefixed path answers 400 `rollout_id_required` before the handler runs. Its operation
   * is then documented as deprecated, naming the prefixed path. Needs `rolloutPrefixed`.
   * @default false
   */
  readonly rolloutRequired?: boolean;
  /**
   * Example bodies shown in Swagger UI (the media type's `example`). Each is checked against
   * its schema when the document is built, so an example cannot drift from the contract.
   * @default none (a schema's own `.meta({ example })` still shows)
   */
  readonly examples?: RouteExamples;
  /** OpenAPI tag. */
  readonly tag?: string;
}

/** A route's example request body and 200 reply, as {@link RouteDoc.examples} documents them. */
export interface RouteExamples {
  /** A body the route's `request` schema accepts. */
  readonly request?: unknown;
  /** A reply the route's `reply` schema accepts. */
  readonly reply?: unknown;
}
