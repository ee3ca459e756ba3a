/**
 * In-process deployments for the policy model server's integration tests: the real fake
 * inference backend and `PolicyModelServer` instances in front of it, both listening on port 0,
 * plus the control-plane, ledger and conversation helpers the tests share.
 *
 * Every server started here is closed by {@link cleanup} (call it in `afterEach`); a "crash" is
 * {@link crash}: the policy server goes away without resume, while the fake backend and the
 * capture directory survive. Nothing sleeps: tests wait on the fake's hold events, on the
 * delivery probe below (a response reaching the gate's delivery) or on bounded polls.
 */
import { request as httpRequest, type IncomingHttpHeaders } from "node:http";
import { access, readFile, readdir } from "node:fs/promises";
import path from "node:path";
import request from "supertest";
import { expect } from "vitest";
import FakeInferenceServer from "../../reference-servers/fake-inference/src/index.js";
import type { CallEntry } from "../../reference-servers/fake-inference/src/index.js";
import { PolicyModelServer } from "#sdk/server/policy-model-server.js";
import type { Ticket } from "#sdk/participants/model/policy-gate.js";
import { makeTempDir, removeTempDir } from "./test-participant.js";
import { CONTROL, controlRoutes } from "./control-routes.js";
export { CONTROL } from "./control-routes.js";

/** The checkpoint control token every server of these tests shares. */
export const TOKEN = "policy-harness-token";
/** The capture control token of the ledger control routes. */
export const CAPTURE_TOKEN = "policy-harness-capture-token";
export const LEDGER = "/training-token-capture/control";
/** Bounded polls for state reached through other servers. */
export const POLL = { timeout: 5000, interval: 5 } as const;
const silent = { logLevel: "silent", shutdownGraceMs: 50 } as const;

// ------------------------------------------------------------------------- lifecycle

interface Closable {
  close(): Promise<void>;
}
const policies: Closable[] = [];
const fakes: FakeInferenceServer[] = [];
const dirs: string[] = [];

/** Closes every server started here (policy servers first) and removes temp dirs. */
export async function cleanup(): Promise<void> {
  for (const fake of fakes) fake.holds.release();
  for (const server of policies.splice(0).reverse()) await server.close();
  for (const fake of fakes.splice(0).reverse()) await fake.close();
  for (const dir of dirs.splice(0)) await removeTempDir(dir);
}

/** A temporary directory removed by {@link cleanup}. */
export async function tempDir(): Promise<string> {
  const dir = await makeTempDir();
  dirs.push(dir);
  return dir;
}

/** A running fake inference backend. */
export interface Fake {
  readonly server: FakeInferenceServer;
  readonly url: string;
}

/**
 * Starts the fake inference backend on a fresh token store. Its cut route takes the checkpoint
 * token unless `controlToken` names another (a backend that refuses the policy server's cuts).
 */
export async function startFake(options: { controlToken?: string } = {}): Promise<Fake> {
  const tokens = path.join(await tempDir(), "tokens");
  const server = new FakeInferenceServer({
    name: "inference",
    config: { token_store_dir: tokens, control_token: options.controlToken ?? TOKEN },
    ...silent,
  });
  fakes.push(server);
  const { url } = await server.listen({ port: 0 });
  return { server, url };
}

/** A running policy model server. */
export interface Policy {
  readonly server: PolicyModelServer;
  readonly url: string;
  readonly name: string;
  readonly captureDir: string | null;
}

/** How a policy model server of a test is set up. */
export interface PolicyOptions {
  /** The capture ledger directory; null: token capture off. */
  readonly captureDir: string | null;
  /** `checkpoint_generation_cuts`. @default true */
  readonly cuts?: boolean;
  /** The instance name (the checkpoint's storage path). @default "policy" */
  readonly name?: string;
}

/** Starts a `PolicyModelServer` in front of `fake`, checkpointing on. */
export async function startPolicy(fake: Fake, options: PolicyOptions): Promise<Policy> {
  const name = options.name ?? "policy";
  const server = new PolicyModelServer({
    name,
    checkpoint: { enabled: true, control_auth_token: TOKEN },
    config: {
      backend_url: `${fake.url}/v1`,
      capture_dir: options.captureDir,
      checkpoint_generation_cuts: options.cuts ?? true,
      capture_control_token: CAPTURE_TOKEN,
    },
    ...silent,
  });
  policies.push(server);
  const { url } = await server.listen({ port: 0 });
  return { server, url, name, captureDir: options.captureDir };
}

/**
 * A crash of a policy server: it goes away without resume (in-flight calls are cut after a short
 * grace). The fake backend and the capture directory survive.
 */
export async function crash(policy: Policy): Promise<void> {
  const at = policies.indexOf(policy.server);
  if (at >= 0) policies.splice(at, 1);
  await policy.server.close();
}

// ------------------------------------------------------------------------- control plane

/** An episode ID from a capture key (`r` → attempt 0, `r-a2` → attempt 2). */
export function ep(key: string): { rollout_id: string; attempt: number } {
  const m = /^(.*)-a([1-9][0-9]*)$/.exec(key);
  return m === null
    ? { rollout_id: key, attempt: 0 }
    : { rollout_id: m[1] as string, attempt: Number(m[2]) };
}

/** A deadline far enough away for any operation of these tests. */
export const deadline = (): number => Date.now() / 1000 + 30;

/** Sends one control operation with the bearer token (and a deadline unless given). */
export const { control } = controlRoutes(TOKEN);

/** The prepare report of a model participant. */
export interface PrepareBody {
  readonly phase: string;
  readonly report: {
    readonly ready: boolean;
    readonly blockers: string[];
    readonly counts: Record<string, number>;
  };
}

/**
 * Prepares checkpoint `id`; expects 200. The deadline is short of the test timeout, so a prepare
 * that does not become ready answers `preparing` instead of hanging the test.
 */
export async function prepare(
  url: string,
  id: string,
  extra: Record<string, unknown> = {},
): Promise<PrepareBody> {
  const res = await control(url, "prepare", {
    checkpoint_id: id,
    deadline_ts: Date.now() / 1000 + 8,
    ...extra,
  });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return res.body as PrepareBody;
}

/** Resumes checkpoint `id`; expects 200. */
export async function resume(url: string, id: string): Promise<void> {
  const res = await control(url, "resume", { checkpoint_id: id });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
}

/** The control status of a model participant. */
export async function status(url: string) {
  const res = await request(url).get(`${CONTROL}/status`).set("Authorization", `Bearer ${TOKEN}`);
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return res.body as {
    phase: string;
    report: PrepareBody["report"];
    restored_generation_cuts: string[];
  };
}

/** One stored model record. */
export interface ModelRecord {
  readonly episode_id: { rollout_id: string; attempt: number };
  readonly rows: Record<string, unknown>[];
  readonly generation_cuts: {
    model_call_id: string;
    request_digest: string;
    continuation: Record<string, unknown> & { staging_keys: string[] };
  }[];
}

/** The commit reply of a model participant. */
export interface CommitBody {
  readonly phase: string;
  readonly episode_ids: string[];
  readonly staging_keys: string[];
  readonly staging_keys_by_episode: Record<string, string[]>;
}

/** Commits checkpoint `id` of `policy` into a fresh directory with `scope` (capture keys). */
export async function commit(
  policy: Policy,
  id: string,
  scope: readonly string[],
): Promise<{ dir: string; body: CommitBody; records: ModelRecord[] }> {
  const dir = await tempDir();
  const res = await control(policy.url, "commit", {
    checkpoint_id: id,
    checkpoint_dir: dir,
    episode_ids: scope.map(ep),
  });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return { dir, body: res.body as CommitBody, records: await storedRecords(dir, policy.name) };
}

/** The records a commit wrote for model instance `name`. */
export async function storedRecords(dir: string, name: string): Promise<ModelRecord[]> {
  const base = path.join(dir, "gym", "model", name);
  const manifest = JSON.parse(await readFile(path.join(base, "manifest.json"), "utf8")) as {
    records_file: string;
  };
  const text = await readFile(path.join(base, manifest.records_file), "utf8");
  return text
    .split("\n")
    .filter((line) => line.trim() !== "")
    .map((line) => JSON.parse(line) as ModelRecord);
}

/** Restores `dir` into `policy` as checkpoint `id` with `scope` (capture keys); any status. */
export function restore(policy: Policy, id: string, dir: string, scope: readonly string[]) {
  return control(policy.url, "restore", {
    checkpoint_id: id,
    checkpoint_dir: dir,
    episode_ids: scope.map(ep),
  });
}

// ------------------------------------------------------------------------- model calls

/** The Responses path of a call: under `/ng-rollout/<key>/`, or bare for an untagged call. */
export function modelPath(key: string | null): string {
  return key === null ? "/v1/responses" : `/ng-rollout/${key}/v1/responses`;
}

/** Sends a Responses call (the request starts when awaited or tracked). */
export function respond(url: string, key: string | null, body: Record<string, unknown>) {
  return request(url).post(modelPath(key)).send(body);
}

/** Settles with the outcome of `work` and lets a test check whether it has settled yet. */
export function track<T>(work: PromiseLike<T>): { done: () => boolean; value: Promise<T> } {
  let settled = false;
  const value = Promise.resolve(work).finally(() => {
    settled = true;
  });
  value.catch(() => undefined); // a request the test leaves behind must not fail the run
  return { done: () => settled, value };
}

/** The question every conversation of these tests starts with. */
export const QUESTION = "What is the weather in Paris?";
/** The answer of the second turn of {@link WEATHER_SCRIPT}. */
export const ANSWER = "It is sunny and mild in Paris today, with a light breeze.";
/** Turn 0 calls a tool; turn 1 answers in text. */
export const WEATHER_SCRIPT = {
  default: [
    { tool_calls: [{ name: "get_weather", arguments: { city: "Paris" } }] },
    { content: ANSWER },
  ],
};
/** The Responses tool the weather conversation offers. */
export const TOOLS = [
  {
    type: "function",
    name: "get_weather",
    parameters: { type: "object", properties: { city: { type: "string" } } },
  },
];

/** A Responses reply, as far as these tests read it. */
export interface ResponseBody {
  readonly id: string;
  readonly status: string;
  readonly output: (Record<string, unknown> & { type: string })[];
}

/** The first turn's input: one user message. */
export function firstInput(): Record<string, unknown>[] {
  return [{ type: "message", role: "user", content: QUESTION }];
}

/**
 * The next turn's input as an agent builds it: the previous input, the previous reply's `output`
 * items as returned, and one `function_call_output` per function call of that reply.
 */
export function echo(
  previous: readonly unknown[],
  reply: ResponseBody,
  result = "sunny, 22 C",
): unknown[] {
  const outputs = reply.output
    .filter((item) => item.type === "function_call")
    .map((item) => ({ type: "function_call_output", call_id: item.call_id, output: result }));
  return [...previous, ...reply.output, ...outputs];
}

/** The text of a reply's message items. */
export function replyText(reply: ResponseBody): string {
  return reply.output
    .filter((item) => item.type === "message")
    .flatMap((item) => item.content as { text?: string }[])
    .map((part) => part.text ?? "")
    .join("");
}

// ------------------------------------------------------------------------- fake backend

/** Replaces the fake's turn script. */
export async function setScript(fake: Fake, script: Record<string, unknown>): Promise<void> {
  await request(fake.url).post("/_ctl/script").send(script).expect(200);
}

/** Places a hold rule on the fake. */
export async function hold(fake: Fake, rule: Record<string, number>): Promise<void> {
  await request(fake.url).post("/_ctl/hold").send(rule).expect(200);
}

/** Lifts the fake's hold; answers how many calls were blocked. */
export async function release(fake: Fake): Promise<number> {
  const res = await request(fake.url).post("/_ctl/release").send({}).expect(200);
  return (res.body as { released: number }).released;
}

/** Every call the fake logged, in arrival order (over HTTP). */
export async function fakeCalls(fake: Fake): Promise<CallEntry[]> {
  const res = await request(fake.url).get("/_ctl/calls").expect(200);
  return (res.body as { calls: CallEntry[] }).calls;
}

/** The model call IDs each cut round cut (over HTTP). */
export async function fakeCuts(fake: Fake): Promise<string[][]> {
  const res = await request(fake.url).get("/_ctl/cuts").expect(200);
  return (res.body as { cuts: string[][] }).cuts;
}

// ------------------------------------------------------------------------- capture ledger

/**
 * The file names in a capture directory, sorted (none when it does not exist), leaving out the
 * writer registry: how a ledger knows it is alone, not one of its files.
 */
export async function ledgerFiles(dir: string): Promise<string[]> {
  try {
    return (await readdir(dir)).filter((name) => name !== "writers").sort();
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return [];
    throw error;
  }
}

/** Whether a file exists. */
export async function exists(file: string): Promise<boolean> {
  try {
    await access(file);
    return true;
  } catch {
    return false;
  }
}

/** The rows of `<dir>/<key>.lineage.jsonl`, read from disk; null when the file is absent. */
/**
 * Writes the ledger files `policy`'s restore deferred (they follow its resume), so the directory
 * can be checked as another process sharing it sees it.
 */
export async function settleLedger(policy: Policy): Promise<void> {
  await policy.server.ledger?.settleDeferred();
}

export async function ledgerRows(
  dir: string,
  key: string,
): Promise<Record<string, unknown>[] | null> {
  let text: string;
  try {
    text = await readFile(path.join(dir, `${key}.lineage.jsonl`), "utf8");
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return null;
    throw error;
  }
  return text
    .split("\n")
    .filter((line) => line.trim() !== "")
    .map((line) => JSON.parse(line) as Record<string, unknown>);
}

/** A ledger control request with the capture bearer (or `auth`, or none when null). */
export function ledgerControl(
  url: string,
  method: "get" | "post",
  route: string,
  body?: Record<string, unknown>,
  auth: string | null = `Bearer ${CAPTURE_TOKEN}`,
) {
  const req =
    method === "get"
      ? request(url).get(`${LEDGER}${route}`)
      : request(url).post(`${LEDGER}${route}`);
  if (auth !== null) req.set("Authorization", auth);
  return body === undefined ? req : req.send(body);
}

// ------------------------------------------------------------------------- probes

/** Counts calls reaching the gate's delivery (a response about to start, maybe held there). */
export interface DeliveryProbe<S> {
  /** How many deliveries were entered. */
  readonly count: () => number;
  /** What `snapshot` returned at each entry, in order. */
  readonly snapshots: readonly S[];
  /** Resolves once at least `n` deliveries were entered. */
  entered(n: number): Promise<void>;
}

/**
 * Observes `gate.deliver` of `policy`: each call the server makes right before its response's
 * first data chunk, taking `snapshot()` of whatever the test wants to know at that moment (the
 * fake backend runs in the same process, so its state can be read synchronously). Observation
 * only; the gate's behaviour is unchanged.
 */
export function probeDeliveries<S = undefined>(
  policy: Policy,
  snapshot: () => S = () => undefined as S,
): DeliveryProbe<S> {
  const gate = policy.server.participant?.gate;
  if (gate === undefined) throw new Error("the policy server has no gate");
  const snapshots: S[] = [];
  const watchers = new Set<{ n: number; resolve: () => void }>();
  const original = gate.deliver.bind(gate);
  gate.deliver = (ticket: Ticket, signal?: AbortSignal) => {
    snapshots.push(snapshot());
    for (const w of [...watchers]) {
      if (snapshots.length >= w.n) {
        watchers.delete(w);
        w.resolve();
      }
    }
    return original(ticket, signal);
  };
  return {
    count: () => snapshots.length,
    snapshots,
    entered: (n) =>
      snapshots.length >= n
        ? Promise.resolve()
        : new Promise((resolve) => watchers.add({ n, resolve })),
  };
}

// ------------------------------------------------------------------------- streaming client

/** A streaming request whose arrival of headers and body a test can watch. */
export interface StreamClient {
  /** Whether the response head has arrived. */
  readonly gotHead: () => boolean;
  /** The body text received so far. */
  readonly text: () => string;
  /** Resolves with the response head. */
  readonly head: Promise<{ status: number; headers: IncomingHttpHeaders }>;
  /** Resolves when the response ended (rejects when the request failed or was aborted). */
  readonly done: Promise<{ status: number; headers: IncomingHttpHeaders; text: string }>;
  /** The client goes away (destroys its connection). */
  abort(): void;
}

/** Sends `body` as a POST to `url + route` and watches the reply as it streams. */
export function openStream(
  url: string,
  route: string,
  body: Record<string, unknown>,
): StreamClient {
  let abort!: () => void;
  let head: { status: number; headers: IncomingHttpHeaders } | null = null;
  let text = "";
  let resolveHead!: (value: { status: number; headers: IncomingHttpHeaders }) => void;
  const headPromise = new Promise<{ status: number; headers: IncomingHttpHeaders }>(
    (resolve) => (resolveHead = resolve),
  );
  const done = new Promise<{ status: number; headers: IncomingHttpHeaders; text: string }>(
    (resolve, reject) => {
      const req = httpRequest(
        `${url}${route}`,
        { method: "POST", headers: { "content-type": "application/json" } },
        (res) => {
          head = { status: res.statusCode ?? 0, headers: res.headers };
          resolveHead(head);
          res.setEncoding("utf8");
          res.on("data", (chunk: string) => {
            text += chunk;
          });
          res.on("end", () => resolve({ ...(head as NonNullable<typeof head>), text }));
          res.on("error", reject);
        },
      );
      req.on("error", reject);
      abort = () => req.destroy();
      req.end(JSON.stringify(body));
    },
  );
  done.catch(() => undefined);
  return { gotHead: () => head !== null, text: () => text, head: headPromise, done, abort };
}

/** The events of a server-sent event stream. */
export function sseEvents(text: string): { event: string | null; data: unknown }[] {
  return text
    .split("\n\n")
    .filter((frame) => frame.trim() !== "")
    .map((frame) => {
      const lines = frame.split("\n");
      const event =
        lines
          .find((line) => line.startsWith("event:"))
          ?.slice(6)
          .trim() ?? null;
      const data = lines
        .filter((line) => line.startsWith("data:"))
        .map((line) => line.slice(5).trim())
        .join("\n");
      return { event, data: data === "" ? null : (JSON.parse(data) as unknown) };
    });
}
