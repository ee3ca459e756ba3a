/**
 * The checkpoint control routes as the integration tests call them: one place for the path,
 * the bearer header and the default deadline, so a test file only names its token.
 */
import type { Express } from "express";
import request from "supertest";
import { CONTROL_PREFIX } from "#sdk/wire/control.js";

/** The control routes' prefix (the SDK's own constant). */
export const CONTROL = CONTROL_PREFIX;

/** A deadline `seconds` from now, in epoch seconds (the wire's `deadline_ts`). */
export function deadlineIn(seconds = 30): number {
  return Date.now() / 1000 + seconds;
}

/** Control calls and status reads authorised with `token`. */
export interface ControlRoutes {
  /** `POST <CONTROL>/<op>` with `body`, `deadline_ts` defaulting to 30 s from now. */
  control(target: string | Express, op: string, body?: Record<string, unknown>): request.Test;
  /** `GET <CONTROL>/status` (expects 200), typed as the caller says. */
  status<T = Record<string, unknown>>(target: string | Express): Promise<T>;
}

/** The control routes of a test whose servers share the control token `token`. */
export function controlRoutes(token: string, defaultDeadlineSeconds = 30): ControlRoutes {
  const auth = `Bearer ${token}`;
  return {
    control: (target, op, body = {}) =>
      request(target)
        .post(`${CONTROL}/${op}`)
        .set("Authorization", auth)
        .send({ deadline_ts: deadlineIn(defaultDeadlineSeconds), ...body }),
    status: async <T>(target: string | Express) => {
      const res = await request(target).get(`${CONTROL}/status`).set("Authorization", auth);
      if (res.status !== 200) {
        throw new Error(`status answered ${res.status}: ${JSON.stringify(res.body)}`);
      }
      return res.body as T;
    },
  };
}
