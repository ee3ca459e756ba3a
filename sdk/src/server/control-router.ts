import { Router } from "express";
import { recordClockOffset } from "../telemetry/metrics.js";
import { CONTROL_ROUTES } from "../wire/control-routes.js";
import { CONTROLLER_TIME_HEADER, type Operation } from "../wire/control.js";
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
 *
 * Clocks: a status reply carries `now`, this server's clock; a call that names the controller's
 * clock (`x-ng-controller-time`) sets `gym_clock_offset_seconds` of `server`.
 */
export function controlRouter(
  dispatcher: ControlDispatcher,
  token: string,
  server = "server",
): Router {
  const router = Router({ caseSensitive: true, strict: true });
  const auth = bearerAuth(token);
  // Control bodies can list many episodes: the data routes' limit bounds them without getting
  // in the way; their encodings, size and depth are refused as on every other route.
  const json = jsonBody({ limitBytes: BODY_LIMIT_BYTES, anyContentType: true });
  for (const route of CONTROL_ROUTES) {
    const handlers = route.method === "post" ? [auth, json] : [auth];
    router[route.method](route.path, ...handlers, async (req, res) => {
      const sent = Number(req.get(CONTROLLER_TIME_HEADER) ?? Number.NaN);
      // Only a plausible Unix time: an absent or malformed header is no reading.
      if (Number.isFinite(sent) && sent > 0) recordClockOffset(server, Date.now() / 1000 - sent);
      const body: unknown = route.method === "post" ? req.body : undefined;
      const reply = await dispatcher.dispatch(route.operation, body);
      // Taken as late as possible, so a controller's estimate is not off by the dispatch time.
      res.json(
        route.operation === "status" ? { ...(reply as object), now: Date.now() / 1000 } : reply,
      );
    });
  }
  for (const path of new Set(CONTROL_ROUTES.map((route) => route.path))) {
    router.all(path, auth, notFoundHandler);
  }
  return router;
}
