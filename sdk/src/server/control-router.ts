import { Router } from "express";
import { CONTROL_ROUTES } from "../wire/control-routes.js";
import type { Operation } from "../wire/control.js";
import { bearerAuth } from "./bearer-auth.js";
import { notFoundHandler } from "./error-handler.js";
import { BODY_LIMIT_BYTES, jsonBody } from "./json-body.js";

/**
 * Runs one control operation: the control plane in a single process; in a worker of a
 * multi-worker server, the link that hands it to the coordinator.
 */
export interface ControlDispatcher {
  dispatch(operation: Operation, body: unknown): Promise<unknown>;
}

/**
 * The control routes under `/ng-control/v1/checkpoint`, each handing `(operation, body)` to the
 * control plane's dispatcher. The bearer check runs first on every route (401 before any body is
 * parsed); any body is parsed as JSON whatever its content type.
 *
 * Only the listed spellings and methods exist: paths match case-sensitively and
 * without a trailing slash, and any other method on a control path (OPTIONS included, which
 * Express would otherwise answer by itself) is checked for the bearer, then answered 404.
 */
export function controlRouter(dispatcher: ControlDispatcher, token: string): Router {
  const router = Router({ caseSensitive: true, strict: true });
  const auth = bearerAuth(token);
  // Control bodies can list many episodes: the data routes' limit bounds them without getting
  // in the way; their encodings, size and depth are refused as on every other route.
  const json = jsonBody({ limitBytes: BODY_LIMIT_BYTES, anyContentType: true });
  for (const route of CONTROL_ROUTES) {
    const handlers = route.method === "post" ? [auth, json] : [auth];
    router[route.method](route.path, ...handlers, async (req, res) => {
      const body: unknown = route.method === "post" ? req.body : undefined;
      res.json(await dispatcher.dispatch(route.operation, body));
    });
  }
  for (const path of new Set(CONTROL_ROUTES.map((route) => route.path))) {
    router.all(path, auth, notFoundHandler);
  }
  return router;
}
