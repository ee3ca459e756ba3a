/**
 * Hostile requests for every route of the reference deployment, generated from its committed
 * OpenAPI documents: a plausible body sampled from the route's schema, then broken the way an
 * attacker or a careless client would break it (wrong types, missing and extra fields, huge and
 * deep values, invalid UTF-8, lone surrogates, duplicate and `__proto__` keys, extreme numbers,
 * content encodings valid and not, wrong methods, tricks in the rollout prefix, odd checkpoint
 * directories). Everything comes from a seeded {@link Random}: a seed replays its cases exactly.
 */
import { readFileSync } from "node:fs";
import path from "node:path";
import { brotliCompressSync, deflateSync, gzipSync } from "node:zlib";
import { REPO } from "../../demo/gym-process.js";
import type { SeededRandom as Random } from "#sdk/util/seeded-random.js";

/** One request to send. */
export interface FuzzCase {
  /** Everything that was done to the request, for the report. */
  readonly kind: string;
  /** The main thing done to the body (or the method), for grouping findings. */
  readonly mutation: string;
  readonly server: string;
  readonly method: string;
  /** Path and query, already encoded as sent. */
  readonly path: string;
  readonly headers: Record<string, string>;
  readonly body?: Buffer;
}

/** One route of one server, as its OpenAPI document gives it. */
export interface Route {
  readonly server: string;
  readonly method: string;
  /** With `{capture_key}` / `{rollout_id}` placeholders. */
  readonly path: string;
  readonly schema: Schema | null;
  readonly control: boolean;
}

type Schema = Record<string, unknown>;
type Components = Record<string, Schema>;

/** The servers whose routes are fuzzed (the backend is not a participant). */
export const FUZZED_SERVERS = [
  "counter",
  "weather",
  "simple_agent",
  "counter_env",
  "weather_env",
  "policy",
] as const;

const components: Components = {};

/** Every route of every fuzzed server, read from `openapi/reference/<server>.json`. */
export function loadRoutes(): Route[] {
  const routes: Route[] = [];
  for (const server of FUZZED_SERVERS) {
    const file = path.join(REPO, "openapi", "reference", `${server}.json`);
    const doc = JSON.parse(readFileSync(file, "utf8")) as {
      paths: Record<
        string,
        Record<string, { requestBody?: { content?: Record<string, { schema?: Schema }> } }>
      >;
      components?: { schemas?: Components };
    };
    Object.assign(components, doc.components?.schemas ?? {});
    for (const [routePath, operations] of Object.entries(doc.paths)) {
      for (const [method, operation] of Object.entries(operations)) {
        if (!["get", "post", "put", "delete", "patch"].includes(method)) continue;
        routes.push({
          server,
          method: method.toUpperCase(),
          path: routePath,
          schema: operation.requestBody?.content?.["application/json"]?.schema ?? null,
          control: routePath.startsWith("/ng-control/"),
        });
      }
    }
  }
  return routes;
}

function resolve(schema: Schema): Schema {
  const ref = schema.$ref;
  if (typeof ref === "string") {
    const name = ref.split("/").pop() as string;
    return resolve(components[name] ?? {});
  }
  return schema;
}

/** A plausible value of `schema` (examples first), bounded in depth. */
export function sample(schema: Schema | undefined, random: Random, depth = 0): unknown {
  if (schema === undefined || depth > 6) return null;
  const s = resolve(schema);
  if (s.example !== undefined && random.chance(0.6)) return structuredClone(s.example);
  if (Array.isArray(s.enum) && s.enum.length > 0) return random.one(s.enum);
  if (s.const !== undefined) return s.const;
  for (const key of ["anyOf", "oneOf"] as const) {
    const options = s[key];
    if (Array.isArray(options) && options.length > 0) {
      return sample(random.one(options as Schema[]), random, depth + 1);
    }
  }
  if (Array.isArray(s.allOf) && s.allOf.length > 0) {
    return sample(s.allOf[0] as Schema, random, depth + 1);
  }
  const type = Array.isArray(s.type) ? random.one(s.type as string[]) : s.type;
  switch (type) {
    case "object": {
      const out: Record<string, unknown> = {};
      const properties = (s.properties ?? {}) as Record<string, Schema>;
      const required = new Set((s.required ?? []) as string[]);
      for (const [key, property] of Object.entries(properties)) {
        if (required.has(key) || random.chance(0.5)) out[key] = sample(property, random, depth + 1);
      }
      return out;
    }
    case "array":
      return Array.from({ length: random.int(0, 2) }, () =>
        sample(s.items as Schema | undefined, random, depth + 1),
      );
    case "string":
      return random.chance(0.15) ? random.one(ID_TRICKS) : random.one(["x", "task-1", "r-1", ""]);
    case "integer":
      return random.int(0, 3);
    case "number":
      return random.int(0, 3) + 0.5;
    case "boolean":
      return random.chance(0.5);
    case "null":
      return null;
    default:
      return {};
  }
}

/** Strings that IDs (rollout, session, checkpoint) and keys meet in plain objects and file names. */
const ID_TRICKS: readonly string[] = [
  "__proto__",
  "constructor",
  "hasOwnProperty",
  "toString",
  "..",
  "../x",
  "a/b",
  "r-1-a1",
  "r".repeat(300),
  "\u0000",
  "\ud800",
  "\u{1f600}",
];

/** Values that break a field's type or range. */
const HOSTILE_VALUES: readonly unknown[] = [
  null,
  true,
  -1,
  0,
  1.5,
  -0,
  1e308,
  -1e308,
  2 ** 53 + 1,
  "",
  " ",
  "x".repeat(100_000),
  [],
  [[[[[]]]]],
  {},
  { nested: { deeper: [1, "two", null] } },
  "NaN",
  "1e999",
  "constructor",
  "__proto__",
  "../../etc/passwd",
];

/** JSON text that `JSON.stringify` cannot produce, spliced in where a value goes. */
const RAW_VALUES: readonly string[] = [
  '"\\ud800"', // a lone surrogate
  '"\\udfff\\ud800"',
  "1e999",
  "-0",
  "123456789012345678901234567890",
  '"\\u0000"',
];

/** Capture keys and rollout IDs that try to escape or confuse the rollout prefix. */
const PREFIX_TRICKS: readonly string[] = [
  "r-1",
  "r-1-a1",
  "..",
  "%2e%2e",
  "%2e%2e%2fng-control",
  "a%00b",
  "a%2fb",
  "__proto__",
  "constructor",
  "hasOwnProperty",
  "r-a1-a2",
  "r-a-1",
  "-r",
  "r".repeat(300),
  "%F0%9F%98%80",
  "%ff%fe",
  "",
];

/**
 * Checkpoint directories a control body may name: pseudo-filesystems, devices, a file, a FIFO,
 * names too long, empty or not a path. Relative ones resolve against the servers' working
 * directory, the run directory. `/` is only read (restore), never written into.
 */
export function oddDirs(runDir: string, forWriting: boolean): string[] {
  return [
    "/proc/self/gym-ckpt",
    "/sys/kernel/gym",
    "/dev/null",
    "/dev/null/x",
    "relative/dir",
    "",
    " ",
    `${runDir}/fuzz-ckpt/${"d".repeat(300)}`,
    `${runDir}/fuzz-ckpt/${"d/".repeat(200)}x`,
    `${runDir}/fuzz-ckpt/plain-file`,
    `${runDir}/fuzz-ckpt/fifo`,
    `${runDir}/fuzz-ckpt/ok`,
    "\u0000",
    `${runDir}/fuzz-ckpt/a\u0000b`,
    ...(forWriting ? [] : ["/"]),
  ];
}

function nest(depth: number, objects: boolean): string {
  return objects
    ? '{"a":'.repeat(depth) + "1" + "}".repeat(depth)
    : "[".repeat(depth) + "]".repeat(depth);
}

/** Variants of a path that a router might normalise, or not. */
const PATH_VARIANTS: readonly ((path: string) => string)[] = [
  (p) => `${p}/`,
  (p) => `/${p}`,
  (p) => p.toUpperCase(),
  (p) => `${p}?x=1&x=2&__proto__=1`,
  (p) => `${p}/..`,
  (p) => p.replace(/\/([^/]*)$/, "/%2e%2e/$1"),
  (p) => p.replace(/\/([^/]*)$/, "/./$1"),
  (p) => `${p}%00`,
];

/** A random JSON path into `value` (object keys and array indexes), possibly empty. */
function pathsOf(value: unknown, prefix: (string | number)[] = []): (string | number)[][] {
  const out: (string | number)[][] = [prefix];
  if (prefix.length > 4) return out;
  if (Array.isArray(value)) {
    value.forEach((item, i) => out.push(...pathsOf(item, [...prefix, i])));
  } else if (typeof value === "object" && value !== null) {
    for (const [key, item] of Object.entries(value)) out.push(...pathsOf(item, [...prefix, key]));
  }
  return out;
}

function setAt(root: unknown, at: (string | number)[], value: unknown): unknown {
  if (at.length === 0) return value;
  const [head, ...rest] = at;
  const container = root as Record<string | number, unknown>;
  container[head as string | number] = setAt(container[head as string | number], rest, value);
  return root;
}

function deleteAt(root: unknown, at: (string | number)[]): void {
  if (at.length === 0) return;
  let parent = root as Record<string | number, unknown>;
  for (const part of at.slice(0, -1)) parent = parent[part] as Record<string | number, unknown>;
  const last = at[at.length - 1] as string | number;
  if (Array.isArray(parent)) parent.splice(last as number, 1);
  else delete parent[last];
}

/** What the generator needs to know about the running deployment. */
export interface CaseContext {
  readonly token: string;
  readonly runDir: string;
}

/** One hostile request for a random route. */
export function makeCase(routes: readonly Route[], random: Random, context: CaseContext): FuzzCase {
  const route = random.one(routes);
  let routePath = route.path;
  let kind = "";
  const fill = (value: string) => {
    routePath = routePath.replace(/\{(capture_key|rollout_id)\}/g, value);
  };
  if (/\{(capture_key|rollout_id)\}/.test(routePath)) {
    const trick = random.chance(0.5) ? random.one(PREFIX_TRICKS) : `fz-${random.int(0, 50)}`;
    fill(trick);
    kind += `prefix(${trick.length > 20 ? `${trick.slice(0, 8)}…${trick.length}` : trick})+`;
  }
  const headers: Record<string, string> = { "content-type": "application/json" };
  // Control routes mostly carry the right token, so their bodies are checked.
  if (route.control || route.path.startsWith("/training-token-capture/")) {
    const auth = random.pick([
      ["right", 8],
      ["wrong", 1],
      ["blank", 1],
    ] as const);
    if (auth === "right") headers.authorization = `Bearer ${context.token}`;
    else if (auth === "wrong") headers.authorization = "Bearer not-the-token";
    else headers.authorization = "Bearer    ";
    if (auth !== "right") kind += `auth-${auth}+`;
  }
  if (random.chance(0.04)) {
    routePath = random.one(PATH_VARIANTS)(routePath);
    kind += "path-variant+";
  }
  let method = route.method;
  if (random.chance(0.05)) {
    method = random.one(["GET", "PUT", "DELETE", "PATCH", "OPTIONS", "POST"]);
    kind += `method-${method}+`;
  }
  if (method === "GET" || method === "OPTIONS") {
    const mutation = route.method === method ? "none" : `method-${method}`;
    return {
      kind: `${kind}${method}`,
      mutation,
      server: route.server,
      method,
      path: routePath,
      headers,
    };
  }

  let value = sample(route.schema ?? undefined, random);
  if (route.control && typeof value === "object" && value !== null && !Array.isArray(value)) {
    const body = value as Record<string, unknown>;
    body.deadline_ts = Date.now() / 1000 + random.int(-5, 5);
    if (typeof body.checkpoint_id === "string") body.checkpoint_id = `fz-${random.int(0, 20)}`;
    if ("checkpoint_dir" in body || random.chance(0.2)) {
      body.checkpoint_dir = random.one(oddDirs(context.runDir, !route.path.endsWith("/restore")));
      kind += "odd-dir+";
    }
  }

  const mutation = random.pick([
    ["none", 2],
    ["wrong-type", 4],
    ["drop-field", 2],
    ["extra-field", 2],
    ["replace-body", 1],
    ["deep", 1],
    ["raw-value", 2],
    ["duplicate-key", 1],
    ["proto-key", 1],
    ["invalid-utf8", 1],
    ["not-json", 1],
    ["huge", 1],
  ] as const);
  kind += mutation;
  let text: string | null = null;
  let bytes: Buffer | null = null;
  const paths = pathsOf(value);
  switch (mutation) {
    case "none":
      break;
    case "wrong-type":
      value = setAt(value, random.one(paths), structuredClone(random.one(HOSTILE_VALUES)));
      break;
    case "drop-field": {
      const at = random.one(paths);
      if (at.length > 0) deleteAt(value, at);
      break;
    }
    case "extra-field":
      if (typeof value === "object" && value !== null && !Array.isArray(value)) {
        (value as Record<string, unknown>)[
          random.one(["extra", "constructor", "toString", "a".repeat(300)])
        ] = random.one(HOSTILE_VALUES);
      }
      break;
    case "replace-body":
      value = random.one(HOSTILE_VALUES);
      break;
    case "deep":
      text = JSON.stringify({ ...(value as object), nested: "__DEEP__" }).replace(
        '"__DEEP__"',
        nest(random.one([100, 511, 513, 5_000, 50_000]), random.chance(0.5)),
      );
      break;
    case "raw-value": {
      const marker = "__RAW_VALUE__";
      value = setAt(value, random.one(paths), marker);
      text = JSON.stringify(value).replace(`"${marker}"`, random.one(RAW_VALUES));
      break;
    }
    case "duplicate-key": {
      // The same key twice, the hostile value first or last (JSON.parse keeps the last).
      const keys =
        typeof value === "object" && value !== null && !Array.isArray(value)
          ? Object.keys(value)
          : [];
      const key = keys.length > 0 ? random.one(keys) : "episode_id";
      const extra = `${JSON.stringify(key)}:${JSON.stringify(random.one(HOSTILE_VALUES))}`;
      const body = JSON.stringify(value);
      text = random.chance(0.5)
        ? body.replace(/^\{/, `{${extra},`)
        : body.replace(/\}$/, `${body === "{}" ? "" : ","}${extra}}`);
      break;
    }
    case "proto-key":
      text = JSON.stringify(value).replace(/^\{/, '{"__proto__":{"reward":5},');
      break;
    case "invalid-utf8":
      bytes = Buffer.concat([
        Buffer.from('{"input":"'),
        Buffer.from([0xff, 0xfe, 0xc3, 0x28, 0xed, 0xa0, 0x80]),
        Buffer.from('"}'),
      ]);
      break;
    case "not-json":
      bytes = Buffer.from(random.one(["{", "nul", "'single'", '{"a":1}}', "\u0000", "[1,]"]));
      break;
    case "huge":
      text = JSON.stringify({
        ...(value as object),
        blob: "y".repeat(random.int(1, 8) * 1024 * 1024),
      });
      break;
  }
  bytes ??= Buffer.from(text ?? JSON.stringify(value) ?? "null");

  // The body's encoding: mostly identity; sometimes valid or broken compression.
  const encoding = random.pick([
    ["identity", 12],
    ["gzip", 1],
    ["deflate", 1],
    ["br", 1],
    ["gzip-garbage", 1],
    ["deflate-garbage", 1],
    ["br-garbage", 1],
    ["stacked", 1],
    ["unknown", 1],
    ["text-plain", 1],
    ["latin1", 1],
  ] as const);
  switch (encoding) {
    case "identity":
      break;
    case "gzip":
      bytes = gzipSync(bytes);
      headers["content-encoding"] = "gzip";
      break;
    case "deflate":
      bytes = deflateSync(bytes);
      headers["content-encoding"] = "deflate";
      break;
    case "br":
      bytes = brotliCompressSync(bytes);
      headers["content-encoding"] = "br";
      break;
    case "gzip-garbage":
      bytes = Buffer.concat([Buffer.from([0x1f, 0x8b, 0x08, 0]), bytes]);
      headers["content-encoding"] = "gzip";
      break;
    case "deflate-garbage":
      headers["content-encoding"] = "deflate";
      break;
    case "br-garbage":
      headers["content-encoding"] = "br";
      break;
    case "stacked":
      bytes = gzipSync(gzipSync(bytes));
      headers["content-encoding"] = "gzip, gzip";
      break;
    case "unknown":
      headers["content-encoding"] = random.one(["compress", "zstd", "x-unknown", "GZIP"]);
      break;
    case "text-plain":
      headers["content-type"] = "text/plain";
      break;
    case "latin1":
      headers["content-type"] = "application/json; charset=latin1";
      break;
  }
  if (encoding !== "identity") kind += `+${encoding}`;
  const main = method !== route.method ? `method-${method}` : mutation;
  return {
    kind,
    mutation: encoding === "identity" ? main : `${main}+${encoding}`,
    server: route.server,
    method,
    path: routePath,
    headers,
    body: bytes,
  };
}
