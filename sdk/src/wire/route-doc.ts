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
  /** OpenAPI tag. */
  readonly tag?: string;
}
