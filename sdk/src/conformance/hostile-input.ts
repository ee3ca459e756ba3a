/**
 * A bounded, seeded slice of hostile input: bodies that are not JSON, nest too deep, carry
 * `__proto__`, have the wrong types or unknown fields, and encodings the server does not speak,
 * sent to the control routes (with the token) and to the kind's data routes. Each must be
 * answered within a bound, and never with a 5xx; a control route answers with the error
 * envelope. The same seed sends the same requests, so a failure replays.
 */
import { SeededRandom } from "../util/seeded-random.js";
import { CONTROL_ROUTES } from "../wire/control-routes.js";
import { expectPhase, statusOf } from "./expect.js";
import { PASS, everyServer, fail, type CheckContext, type Requirement } from "./requirement.js";
import { errorCodeOf, NoReply } from "./target.js";

/** Requests in the slice. */
export const HOSTILE_REQUESTS = 48;
/** Bound on each, in ms: no reply by then counts as a hang. */
const HOSTILE_TIMEOUT_MS = 5_000;

/** One hostile request. */
export interface HostileRequest {
  readonly path: string;
  /** Whether `path` is a control route (its refusals must carry the error envelope). */
  readonly control: boolean;
  readonly what: string;
  readonly body: string | Buffer;
  readonly headers: Record<string, string>;
}

/** Bodies that break one rule each; every one is invalid for every control route. */
function hostileBody(
  random: SeededRandom,
  checkpointId: string,
): { what: string; body: string | Buffer; headers?: Record<string, string> } {
  const base = { checkpoint_id: checkpointId, deadline_ts: Date.now() / 1000 + 30 };
  const json = (what: string, value: unknown) => ({ what, body: JSON.stringify(value) });
  const depth = random.int(600, 3_000);
  const choices = [
    () => ({ what: "a body cut short", body: '{"checkpoint_id": "a' }),
    () => ({
      what: "bytes that are not UTF-8 JSON",
      body: Buffer.from([0xff, 0xfe, 0x7b, 0x00, random.int(0, 255)]),
    }),
    () => ({ what: "an empty body", body: "" }),
    () => json("a JSON array", [base]),
    () => json("a JSON string", "prepare"),
    () => json("JSON null", null),
    () => ({
      what: `arrays nested ${depth} deep`,
      body: `${"[".repeat(depth)}${"]".repeat(depth)}`,
    }),
    () => ({
      what: `objects nested ${depth} deep`,
      body: `${'{"a":'.repeat(depth)}1${"}".repeat(depth)}`,
    }),
    () => ({
      what: "a __proto__ key",
      body: `{"__proto__": {"polluted": true}, "checkpoint_id": "${checkpointId}", "deadline_ts": ${base.deadline_ts}}`,
    }),
    () => json("an unknown field", { ...base, [`x${random.int(0, 999)}`]: 1 }),
    () => json("a numeric checkpoint_id", { ...base, checkpoint_id: random.int(0, 1e6) }),
    () => json("an empty checkpoint_id", { ...base, checkpoint_id: "" }),
    () => json("a checkpoint_id of 200 characters", { ...base, checkpoint_id: "c".repeat(200) }),
    () => json("a checkpoint_id with a path in it", { ...base, checkpoint_id: "../../etc" }),
    () => json("a deadline_ts that is a word", { ...base, deadline_ts: "soon" }),
    () => ({
      what: "a deadline_ts of 1e400",
      body: `{"checkpoint_id": "${checkpointId}", "deadline_ts": 1e400}`,
    }),
    () => json("a deadline_ts in milliseconds", { ...base, deadline_ts: Date.now() * 1000 }),
    () => json("a missing deadline_ts", { checkpoint_id: checkpointId }),
    () =>
      json("a huge string field", { ...base, [`pad`]: "x".repeat(random.int(10_000, 200_000)) }),
    () => ({
      what: "a body declared as text/plain",
      body: JSON.stringify({ ...base, extra: true }),
      headers: { "content-type": "text/plain" },
    }),
    () => ({
      what: "a body declared gzip that is not",
      body: JSON.stringify({ ...base, extra: true }),
      headers: { "content-encoding": "gzip" },
    }),
    () => ({
      what: "a charset nobody speaks",
      body: JSON.stringify({ ...base, extra: true }),
      headers: { "content-type": "application/json; charset=klingon" },
    }),
  ];
  return random.one(choices)();
}

/** The slice for `seed`: control routes for every kind, plus a resources server's data routes. */
export function hostileSlice(
  seed: number,
  context: CheckContext,
  toolPath: string | null,
): HostileRequest[] {
  const random = new SeededRandom(seed);
  const posts = CONTROL_ROUTES.filter((route) => route.method === "post").map((route) => ({
    path: route.path,
    control: true,
  }));
  const data =
    context.profile.kind === "resources"
      ? [
          "/seed_session",
          "/verify",
          "/close_session",
          ...(toolPath === null ? [] : [toolPath]),
        ].map((path) => ({ path: `/ng-rollout/${context.rolloutId()}${path}`, control: false }))
      : [];
  const paths = [...posts, ...data];
  const slice: HostileRequest[] = [];
  for (let i = 0; i < HOSTILE_REQUESTS; i++) {
    const route = random.one(paths);
    const hostile = hostileBody(random, context.checkpointId());
    slice.push({
      ...route,
      what: hostile.what,
      body: hostile.body,
      headers: {
        "content-type": "application/json",
        ...(route.control ? { authorization: context.target.authorization } : {}),
        ...hostile.headers,
      },
    });
  }
  return slice;
}

/** `core.hostile.no-5xx`. */
export const HOSTILE_REQUIREMENT: Requirement = {
  id: "core.hostile.no-5xx",
  title:
    "a seeded slice of hostile requests is answered 4xx (control routes: the error envelope), never 5xx, never a hang",
  docs: "docs/contract-notes.md#hardening-against-hostile-input",
  appliesTo: everyServer,
  async check(context) {
    const tool = context.profile.kind === "resources" ? await context.tool() : null;
    const slice = hostileSlice(context.seed, context, tool?.path ?? null);
    for (const [index, request] of slice.entries()) {
      const where = `request ${index + 1} of ${slice.length} (POST ${request.path}, ${request.what})`;
      let reply;
      try {
        reply = await context.target.call("POST", request.path, {
          body: request.body,
          raw: true,
          headers: request.headers,
          timeoutMs: HOSTILE_TIMEOUT_MS,
        });
      } catch (error) {
        if (error instanceof NoReply)
          return fail(`${where}: no reply within ${HOSTILE_TIMEOUT_MS} ms`);
        throw error;
      }
      if (reply.status >= 500) return fail(`${where}: answered HTTP ${reply.status}`);
      if (request.control && (reply.status < 400 || errorCodeOf(reply) === null)) {
        return fail(
          `${where}: answered HTTP ${reply.status}${errorCodeOf(reply) === null ? " without the error envelope" : ""}, expected a 4xx refusal`,
        );
      }
    }
    await statusOf(context);
    await expectPhase(context, "idle", "after the hostile slice", null);
    return PASS;
  },
};
