/**
 * Builds the OpenAPI 3.1 document of a server from the control route table
 * ({@link CONTROL_ROUTES}) and the data routes' {@link RouteDoc}s, with the same zod schemas that
 * validate requests at run time. Schema ids come from zod's native `.meta({ id })`; zod is never
 * patched.
 *
 * @see docs/openapi.md
 */
import {
  OpenAPIRegistry,
  OpenApiGeneratorV31,
  type ResponseConfig,
  type RouteConfig,
  type ZodContentObject,
} from "@asteasolutions/zod-to-openapi";
import type { ExampleObject, OpenAPIObject, TagObject } from "openapi3-ts/oas31";
import { z } from "zod";
import {
  CheckpointError,
  CheckpointStateError,
  EpisodeError,
  ERROR_CATALOGUE,
  GymError,
  InvalidRequestError,
  UnauthorizedError,
  type ErrorCode,
  type ErrorEnvelope,
} from "../errors.js";
import { SAFE_ID_PATTERN } from "../identity/episode-id.js";
import { CONTROL_ROUTES, type ControlRoute } from "../wire/control-routes.js";
import { ERROR_CODES, ErrorEnvelopeSchema } from "../wire/error-envelope.js";
import type { RouteDoc } from "../wire/route-doc.js";

/**
 * What {@link buildOpenApiDocument} puts in the document.
 *
 * @example
 * const options: OpenApiOptions = {
 *   title: "counter resources server",
 *   version: "0.1.0",
 *   controlRoutes: true,
 *   routes: [{ method: "post", path: "/verify", summary: "Score a rollout", rolloutPrefixed: true }],
 * };
 */
export interface OpenApiOptions {
  /** `info.title` of the document. */
  title: string;
  /** `info.version` of the document: the version of the server (not of OpenAPI). */
  version: string;
  /** `info.description`; omitted from the document when absent. */
  description?: string;
  /** Whether to document the checkpoint control routes of {@link CONTROL_ROUTES}. */
  controlRoutes: boolean;
  /** The data routes, documented in this order after the control routes. @default [] */
  routes?: readonly RouteDoc[];
  /**
   * Document the operational routes every server serves (`GET /health`, `GET /ready`, and
   * `GET <metricsPath>` unless it is null). @default not documented
   */
  operations?: { readonly metricsPath: string | null };
  /**
   * Whether the server runs with checkpointing on: the un-prefixed copy of a route marked
   * `rolloutRequired` then answers 400, and is documented as deprecated. @default false
   */
  checkpointing?: boolean;
}

/** The tag of the operational routes (health, readiness, metrics). */
export const OPERATIONS_TAG = "operations";

/** `GET /health`: liveness. */
export const HealthReplySchema = z
  .looseObject({
    status: z.enum(["ok", "starting", "worker_lost"]),
    name: z.string(),
    workers: z.number().int().optional(),
    expected_workers: z.number().int().optional(),
    lost_workers: z.array(z.number().int()).optional(),
  })
  .meta({
    id: "HealthReply",
    description: "`ok` while the process serves; 503 `starting` or `worker_lost` with several workers.",
  });

/** `GET /ready`: readiness. */
export const ReadyReplySchema = z
  .strictObject({
    status: z.enum(["ready", "not_ready"]),
    name: z.string(),
    reasons: z.array(z.string()).optional(),
  })
  .meta({
    id: "ReadyReply",
    description:
      "`ready`, or 503 `not_ready` with its reasons: admission closed by a checkpoint, a restore still installing, a worker missing.",
  });

/** The document could not be generated; `route` names the route at fault. */
export class OpenApiDocumentError extends Error {
  override name = "OpenApiDocumentError";
  constructor(
    /** `METHOD /path` of the route at fault, or null when no single route is. */
    readonly route: string | null,
    detail: string,
    options?: ErrorOptions,
  ) {
    super(
      route === null
        ? `cannot build the OpenAPI document: ${detail}`
        : `cannot document ${route}: ${detail}`,
      options,
    );
  }
}

/** The tag of every control operation. */
export const CONTROL_TAG = "checkpoint control";

/** The tag of a data route that names none. */
export const DEFAULT_DATA_TAG = "data";

/** Name of the security scheme the control routes require. */
const BEARER_AUTH = "bearerAuth";

/** The path segment of the rollout prefix (see docs/concepts.md). */
const ROLLOUT_SEGMENT = "ng-rollout";

/**
 * Builds an OpenAPI 3.1.0 document: the control routes (when `controlRoutes`) in table order,
 * then each data route, then its rollout-prefixed twin.
 *
 * ## Rules
 * - Every request body is `application/json` and required; every error response carries the
 *   `ErrorEnvelope` schema, a description listing each code it may carry, and one named
 *   example per code.
 * - Control routes require the `bearerAuth` scheme and answer 401 `unauthorized`; a route with
 *   a body answers 422 `invalid_request`; the route's own codes are grouped by their status in
 *   {@link ERROR_CATALOGUE}.
 * - A data route's `:param` becomes `{param}`; with `rolloutPrefixed` it is also documented
 *   under `/ng-rollout/{capture_key}/`. With `checkpointing` and `rolloutRequired`, the
 *   un-prefixed copy is `deprecated`: it is still served (and answers 400
 *   `rollout_id_required`), so it stays in the document, and its description names the
 *   prefixed path to call instead.
 * - A route's `examples` become the `example` of its request body and 200 reply.
 * - The output is deterministic: same options, same JSON, byte for byte.
 *
 * ## Error behavior
 * Throws {@link OpenApiDocumentError} naming the route when a route cannot be documented (an
 * unsupported path, a duplicate route or operationId, a schema zod-to-openapi cannot render, an
 * example its schema refuses, `rolloutRequired` without `rolloutPrefixed`).
 *
 * @example
 * const doc = buildOpenApiDocument({ title: "gym", version: "0.1.0", controlRoutes: true });
 * doc.paths?.["/ng-control/v1/checkpoint/prepare"]?.post?.operationId; // "checkpointPrepare"
 */
export function buildOpenApiDocument(options: OpenApiOptions): OpenAPIObject {
  const entries: RouteEntry[] = [];
  if (options.operations !== undefined) entries.push(...operationRoutes(options.operations));
  if (options.controlRoutes) entries.push(...CONTROL_ROUTES.map(controlRouteConfig));
  const checkpointing = options.checkpointing ?? false;
  for (const route of options.routes ?? []) {
    entries.push(...dataRouteConfigs(route, checkpointing));
  }
  checkUnique(entries);
  checkSchemaIds(entries);

  const tags: TagObject[] = [];
  for (const entry of entries) {
    for (const name of entry.config.tags ?? []) {
      if (!tags.some((tag) => tag.name === name)) tags.push(tagObject(name));
    }
  }

  const info: OpenAPIObject["info"] = { title: options.title, version: options.version };
  if (options.description !== undefined) info.description = options.description;
  const usesBearer = entries.some((entry) => entry.config.security !== undefined);

  let document: OpenAPIObject;
  try {
    document = generate(entries, { openapi: "3.1.0", info, tags }, usesBearer);
  } catch (error) {
    throw blame(error, entries, usesBearer);
  }
  // The generator always adds an empty `webhooks`; we declare none.
  if (document.webhooks !== undefined && Object.keys(document.webhooks).length === 0) {
    delete document.webhooks;
  }
  return document;
}

/** One operation to register, with the name errors use for it. */
interface RouteEntry {
  /** `METHOD /path`, as error messages name the route. */
  readonly label: string;
  readonly config: RouteConfig;
  /** The zod schemas the operation renders (body and reply). */
  readonly schemas: readonly z.ZodType[];
}

function generate(
  entries: readonly RouteEntry[],
  base: Pick<OpenAPIObject, "openapi" | "info" | "tags">,
  usesBearer: boolean,
): OpenAPIObject {
  const registry = new OpenAPIRegistry();
  if (usesBearer) {
    registry.registerComponent("securitySchemes", BEARER_AUTH, {
      type: "http",
      scheme: "bearer",
      description:
        "`Authorization: Bearer <checkpoint.control_auth_token>`; anything else is 401 " +
        "`unauthorized`, checked before the body is read.",
    });
  }
  for (const entry of entries) registry.registerPath(entry.config);
  const generator = new OpenApiGeneratorV31(registry.definitions, {
    sortComponents: "alphabetically",
  });
  return generator.generateDocument(base);
}

/**
 * Turns a generator failure into an {@link OpenApiDocumentError}. The generator renders every
 * route in one pass and its errors name a schema at best, so the routes are rendered one by one
 * to find the first that fails on its own.
 */
function blame(
  error: unknown,
  entries: readonly RouteEntry[],
  usesBearer: boolean,
): OpenApiDocumentError {
  if (!isGeneratorError(error)) {
    return new OpenApiDocumentError(null, describe(error), { cause: error });
  }
  for (const entry of entries) {
    try {
      generate([entry], { openapi: "3.1.0", info: { title: "", version: "" } }, usesBearer);
    } catch (own) {
      return new OpenApiDocumentError(entry.label, describe(own), { cause: own });
    }
  }
  // Only the combination fails, e.g. two routes' schemas claim the same id.
  return new OpenApiDocumentError(null, describe(error), { cause: error });
}

/**
 * zod-to-openapi's error classes (`ZodToOpenAPIError` and its subclasses) do not extend `Error`
 * and are not exported by the package, so they are recognised by their class names.
 */
const GENERATOR_ERROR_CLASSES = new Set([
  "ZodToOpenAPIError",
  "ConflictError",
  "MissingParameterDataError",
  "UnknownZodTypeError",
]);

function isGeneratorError(error: unknown): error is { message?: unknown; data?: unknown } {
  if (error instanceof Error) return true; // e.g. zod's own "cannot be represented" errors
  if (typeof error !== "object" || error === null) return false;
  let proto: unknown = Object.getPrototypeOf(error);
  while (typeof proto === "object" && proto !== null) {
    const name = (proto as { constructor?: { name?: unknown } }).constructor?.name;
    if (typeof name === "string" && GENERATOR_ERROR_CLASSES.has(name)) return true;
    proto = Object.getPrototypeOf(proto);
  }
  return false;
}

function describe(error: unknown): string {
  if (typeof error === "object" && error !== null) {
    const { message, data } = error as { message?: unknown; data?: unknown };
    let text = typeof message === "string" ? message : String(error);
    if (data !== undefined) text += ` (${safeJson(data)})`;
    if (error.constructor.name === "UnknownZodTypeError") {
      // Its message points at `.openapi()`, which we do not patch in: `.meta` carries the same.
      text += "; with zod 4, give that schema its OpenAPI shape in `.meta({ type, ... })`";
    }
    return text;
  }
  return String(error);
}

function safeJson(value: unknown): string {
  try {
    return JSON.stringify(value, (_key, inner: unknown) =>
      // Schemas in the error data are large and cyclic-prone: name their type only.
      inner instanceof z.ZodType ? `<${inner.def.type} schema>` : inner,
    );
  } catch {
    return String(value);
  }
}

function checkUnique(entries: readonly RouteEntry[]): void {
  const labels = new Set<string>();
  const operationIds = new Set<string>();
  for (const entry of entries) {
    if (labels.has(entry.label)) {
      throw new OpenApiDocumentError(entry.label, "the route is documented twice");
    }
    labels.add(entry.label);
    const operationId = entry.config.operationId ?? "";
    if (operationIds.has(operationId)) {
      throw new OpenApiDocumentError(
        entry.label,
        `operationId '${operationId}' is already used by another route`,
      );
    }
    operationIds.add(operationId);
  }
}

/**
 * zod-to-openapi keys components by `.meta({ id })` alone: a second, different schema under an
 * id already seen is silently documented as the first. zod's own JSON Schema conversion refuses
 * that within one schema, and the ids it visits are compared across routes here.
 */
function checkSchemaIds(entries: readonly RouteEntry[]): void {
  const owners = new Map<string, { schema: unknown; owner: string }>();
  const visit = (schema: z.ZodType, owner: string, label: string | null): void => {
    try {
      z.toJSONSchema(schema, {
        io: "input",
        unrepresentable: "any",
        cycles: "ref",
        override: ({ zodSchema }) => {
          const id = z.globalRegistry.get(zodSchema)?.id;
          if (id === undefined) return;
          const seen = owners.get(id);
          if (seen === undefined) owners.set(id, { schema: zodSchema, owner });
          else if (seen.schema !== zodSchema) {
            throw new OpenApiDocumentError(
              label,
              `schema id '${id}' names two different schemas (the other is in ${seen.owner})`,
            );
          }
        },
      });
    } catch (error) {
      if (error instanceof OpenApiDocumentError) throw error;
      if (error instanceof Error && error.message.startsWith("Duplicate schema id")) {
        throw new OpenApiDocumentError(label, error.message, { cause: error });
      }
      // Anything else is the generator's to report, with its own message.
    }
  };
  visit(ErrorEnvelopeSchema, "the error envelope", null);
  for (const entry of entries) {
    for (const schema of entry.schemas) visit(schema, entry.label, entry.label);
  }
}

function operationRoutes(options: { readonly metricsPath: string | null }): RouteEntry[] {
  const entry = (path: string, config: Omit<RouteConfig, "method" | "path">, schemas: z.ZodType[]) => ({
    label: `GET ${path}`,
    config: { method: "get" as const, path, tags: [OPERATIONS_TAG], ...config },
    schemas,
  });
  const entries: RouteEntry[] = [
    entry(
      "/health",
      {
        operationId: "getHealth",
        summary: "Liveness",
        responses: {
          "200": { description: "The process serves", content: json(HealthReplySchema) },
          "503": { description: "Workers starting, or one lost", content: json(HealthReplySchema) },
        },
      },
      [HealthReplySchema],
    ),
    entry(
      "/ready",
      {
        operationId: "getReady",
        summary: "Readiness: admits new work now",
        responses: {
          "200": { description: "Ready", content: json(ReadyReplySchema) },
          "503": { description: "Not ready, with the reasons", content: json(ReadyReplySchema) },
        },
      },
      [ReadyReplySchema],
    ),
  ];
  if (options.metricsPath !== null) {
    entries.push(
      entry(
        options.metricsPath,
        {
          operationId: "getMetrics",
          summary: "Prometheus metrics (text exposition format)",
          responses: {
            "200": {
              description: "Every metric of this process",
              content: { "text/plain": { schema: z.string() } },
            },
          },
        },
        [],
      ),
    );
  }
  return entries;
}

function tagObject(name: string): TagObject {
  if (name === CONTROL_TAG) {
    return {
      name,
      description:
        "Checkpoint control plane: bearer-authenticated, never under the " +
        "rollout prefix; absent (404) when checkpointing is off.",
    };
  }
  return { name };
}

function controlRouteConfig(route: ControlRoute): RouteEntry {
  const label = `${route.method.toUpperCase()} ${route.path}`;
  const codes = errorCodes(route.request !== null, ["unauthorized", ...route.errors]);
  const config: RouteConfig = {
    method: route.method,
    path: route.path,
    operationId: `checkpoint${pascal(route.operation)}`,
    summary: route.summary,
    description: route.description,
    tags: [CONTROL_TAG],
    security: [{ [BEARER_AUTH]: [] }],
    responses: {
      "200": { description: route.summary, content: json(route.reply) },
      ...errorResponses(codes),
    },
  };
  if (route.request !== null) {
    config.request = { body: { required: true, content: json(route.request) } };
  }
  return { label, config, schemas: route.request === null ? [route.reply] : [route.request, route.reply] };
}

function dataRouteConfigs(route: RouteDoc, checkpointing: boolean): RouteEntry[] {
  const label = `${route.method.toUpperCase()} ${route.path}`;
  const { openApiPath, params } = convertPath(route.path, label);
  if (route.rolloutRequired === true && route.rolloutPrefixed !== true) {
    throw new OpenApiDocumentError(label, "`rolloutRequired` needs `rolloutPrefixed`");
  }
  checkExamples(route, label);
  const prefixedPath = `/${ROLLOUT_SEGMENT}/{capture_key}${openApiPath}`;
  // Served, but refused while checkpointing is on: documented, and marked so nobody calls it.
  const refusedUnprefixed = checkpointing && route.rolloutRequired === true;
  const hasBody = route.request !== undefined && route.request !== null;
  const codes = errorCodes(hasBody, route.errors ?? []);
  const operationId = `${route.method}${operationName(route.path)}`;

  const config = (path: string, prefixed: boolean): RouteConfig => {
    const pathParams = prefixed ? ["capture_key", ...params] : params;
    const config: RouteConfig = {
      method: route.method,
      path,
      operationId: prefixed ? `${operationId}InRollout` : operationId,
      summary: prefixed ? `${route.summary} (in a rollout)` : route.summary,
      description: describeDataRoute(route, prefixed),
      tags: [route.tag ?? DEFAULT_DATA_TAG],
      responses: {
        "200": {
          description: route.summary,
          // Absent reply schema: any JSON (the empty schema).
          content: withExample(route.reply ?? {}, route.examples?.reply),
        },
        ...errorResponses(codes),
      },
    };
    if (!prefixed && refusedUnprefixed) {
      config.deprecated = true;
      config.description =
        `${config.description ?? ""}\n\n**Refused while checkpointing is on**: this un-prefixed ` +
        `path answers 400 \`rollout_id_required\`. Call \`${route.method.toUpperCase()} ` +
        `${prefixedPath}\` instead.`;
    }
    const request: NonNullable<RouteConfig["request"]> = {};
    if (pathParams.length > 0) request.params = paramsSchema(pathParams);
    if (route.request !== undefined && route.request !== null) {
      request.body = { required: true, content: withExample(route.request, route.examples?.request) };
    }
    if (request.params !== undefined || request.body !== undefined) config.request = request;
    return config;
  };

  const schemas = [route.request, route.reply].filter((schema) => schema !== undefined && schema !== null);
  const entries: RouteEntry[] = [{ label, config: config(openApiPath, false), schemas }];
  if (route.rolloutPrefixed === true) {
    entries.push({
      label: `${route.method.toUpperCase()} /${ROLLOUT_SEGMENT}/:capture_key${route.path}`,
      config: config(prefixedPath, true),
      schemas,
    });
  }
  return entries;
}

function describeDataRoute(route: RouteDoc, prefixed: boolean): string {
  const base = route.description ?? route.summary;
  if (!prefixed) return base;
  return (
    `${base}\n\nUnder the rollout prefix: the server strips \`/${ROLLOUT_SEGMENT}/<capture key>\` ` +
    "before routing and binds the request to that episode."
  );
}

/** Express `:name` parameters; anything fancier (wildcards, optional groups) is refused. */
const EXPRESS_PARAM = /:([A-Za-z_][A-Za-z0-9_]*)/g;

function convertPath(path: string, label: string): { openApiPath: string; params: string[] } {
  if (!path.startsWith("/")) {
    throw new OpenApiDocumentError(label, "a route path must start with '/'");
  }
  if (/[*?(){}]/.test(path)) {
    throw new OpenApiDocumentError(
      label,
      "only plain segments and ':name' parameters are supported in a documented path",
    );
  }
  const params: string[] = [];
  const openApiPath = path.replace(EXPRESS_PARAM, (_match, name: string) => {
    params.push(name);
    return `{${name}}`;
  });
  if (openApiPath.includes(":")) {
    throw new OpenApiDocumentError(label, "a ':' that does not start a parameter name");
  }
  return { openApiPath, params };
}

function paramsSchema(names: readonly string[]): z.ZodObject {
  const shape: Record<string, z.ZodType> = {};
  for (const name of names) {
    shape[name] =
      name === "capture_key"
        ? z
            .string()
            .regex(SAFE_ID_PATTERN)
            .meta({
              description:
                "Capture key of the rollout attempt: `r` for attempt 0, `r-aN` for attempt N.",
              example: "task-3-a1",
            })
        : z.string().meta({ description: `Path parameter \`${name}\`.` });
  }
  return z.object(shape);
}

/** `/items/:id/score` → `ItemsByIdScore`; `/` → `Root`. */
function operationName(path: string): string {
  const words = path
    .split("/")
    .filter((segment) => segment.length > 0)
    .map((segment) =>
      segment.startsWith(":") ? `By${pascal(segment.slice(1))}` : pascal(segment),
    );
  return words.length === 0 ? "Root" : words.join("");
}

function pascal(text: string): string {
  return text
    .split(/[^A-Za-z0-9]+/)
    .filter((word) => word.length > 0)
    .map((word) => word[0]!.toUpperCase() + word.slice(1))
    .join("");
}

function json(schema: z.ZodType): ZodContentObject {
  return { "application/json": { schema } };
}

/** `application/json` content, with its `example` when there is one. */
function withExample(schema: z.ZodType | object, example: unknown): ZodContentObject {
  return { "application/json": example === undefined ? { schema } : { schema, example } };
}

/**
 * Every example a route shows (its `examples`, and a request or reply schema's own
 * `.meta({ example })`) must parse with its schema: a stale example misleads whoever copies it.
 */
function checkExamples(route: RouteDoc, label: string): void {
  const check = (what: string, schema: z.ZodType | null | undefined, example: unknown): void => {
    if (example === undefined || schema === undefined || schema === null) return;
    const parsed = schema.safeParse(example);
    if (!parsed.success) {
      throw new OpenApiDocumentError(
        label,
        `its ${what} example does not match its schema: ${z.prettifyError(parsed.error)}`,
      );
    }
  };
  if (route.examples?.request !== undefined && (route.request ?? null) === null) {
    throw new OpenApiDocumentError(label, "a request example needs a request schema");
  }
  if (route.examples?.reply !== undefined && route.reply === undefined) {
    throw new OpenApiDocumentError(label, "a reply example needs a reply schema");
  }
  check("request", route.request, route.examples?.request);
  check("reply", route.reply, route.examples?.reply);
  check("request schema's", route.request, metaExample(route.request));
  check("reply schema's", route.reply, metaExample(route.reply));
}

function metaExample(schema: z.ZodType | null | undefined): unknown {
  if (schema === undefined || schema === null) return undefined;
  return (schema.meta() as { example?: unknown } | undefined)?.example;
}

/** The codes a route answers with, de-duplicated, `invalid_request` added when it has a body. */
function errorCodes(hasBody: boolean, codes: readonly ErrorCode[]): ErrorCode[] {
  const all = new Set<ErrorCode>(codes);
  if (hasBody) all.add("invalid_request");
  // Catalogue order, so the document does not depend on how a route lists its codes.
  return ERROR_CODES.filter((code) => all.has(code));
}

/** One response per status, each listing its codes with a named example per code. */
function errorResponses(codes: readonly ErrorCode[]): Record<string, ResponseConfig> {
  const byStatus = new Map<number, ErrorCode[]>();
  for (const code of codes) {
    const status = ERROR_CATALOGUE[code].status;
    byStatus.set(status, [...(byStatus.get(status) ?? []), code]);
  }
  const responses: Record<string, ResponseConfig> = {};
  for (const status of [...byStatus.keys()].sort((a, b) => a - b)) {
    const statusCodes = byStatus.get(status) ?? [];
    const examples: Record<string, ExampleObject> = {};
    for (const code of statusCodes) {
      examples[code] = { summary: ERROR_CATALOGUE[code].summary, value: ERROR_EXAMPLES[code] };
    }
    responses[String(status)] = {
      description: [
        `${STATUS_TEXT[status] ?? "Refused"}. \`error.code\` is one of:`,
        "",
        ...statusCodes.map((code) => `- \`${code}\`: ${ERROR_CATALOGUE[code].summary}`),
      ].join("\n"),
      content: { "application/json": { schema: ErrorEnvelopeSchema, examples } },
    };
  }
  return responses;
}

const STATUS_TEXT: Record<number, string> = {
  400: "Bad request",
  401: "Unauthorized",
  404: "Not found",
  409: "Conflict",
  410: "Gone",
  422: "Unprocessable request",
  500: "Internal error",
  502: "Bad gateway",
  503: "Unavailable",
};

function envelope(error: GymError): ErrorEnvelope {
  return error.toEnvelope();
}

/**
 * One realistic envelope per code, built with the SDK's own factories where there is one so
 * the examples read like real replies. Typed by code, so a new catalogue entry needs one here.
 */
const ERROR_EXAMPLES: Record<ErrorCode, ErrorEnvelope> = {
  checkpoint_error: envelope(
    new CheckpointError("checkpoint_error", "checkpoint 'ckpt-0007' failed"),
  ),
  stale_checkpoint: envelope(CheckpointError.stale("ckpt-0006")),
  checkpoint_conflict: envelope(
    CheckpointError.conflict("checkpoint 'ckpt-0006' is active; cannot start 'ckpt-0007'"),
  ),
  invalid_phase: envelope(CheckpointError.invalidPhase("commit", "idle")),
  deadline_exceeded: envelope(CheckpointError.deadline("the records write")),
  stale_attempt: envelope(EpisodeError.staleAttempt("task-3-0", 1)),
  admission_closed: envelope(EpisodeError.admissionClosed("/seed_session")),
  restart_in_scope: envelope(CheckpointError.restartInScope(["task-9-0"])),
  export_failed: envelope(
    CheckpointError.exportFailed("ckpt-0007", "export_records raised TypeError"),
  ),
  retire_incomplete: envelope(
    new GymError(
      "retire_incomplete",
      "rollout 'task-3-0' still holds retired state; retry forget after its work is freed",
    ),
  ),
  worker_lost: envelope(
    CheckpointError.workerLost("prepare", "worker 1 (pid 4242, signal SIGKILL) of this server exited"),
  ),
  session_owner_gone: envelope(
    new GymError(
      "session_owner_gone",
      "the worker process that holds this session (5f0c9a1e2b3d4c5f6a7b8c9d0e1f2a3b) is gone, and its state with it",
    ),
  ),
  checkpoint_coordinator_unavailable: envelope(
    new GymError(
      "checkpoint_coordinator_unavailable",
      "this worker cannot reach the server's checkpoint coordinator: the peer closed the channel",
    ),
  ),
  activation_out_of_order: envelope(
    new GymError(
      "activation_out_of_order",
      "activation 3 of 'task-3-0' arrived before activation 2 completed",
    ),
  ),
  rollout_id_required: envelope(EpisodeError.rolloutIdRequired("/verify")),
  invalid_rollout_id: envelope(
    EpisodeError.invalidRolloutId(
      "'.task-3' is not a capture key: it must match ^[A-Za-z0-9][A-Za-z0-9._-]*$",
    ),
  ),
  unauthorized: envelope(new UnauthorizedError()),
  not_found: envelope(new GymError("not_found", "no route GET /ng-control/v1/checkpoint/stats")),
  invalid_request: envelope(
    new InvalidRequestError("deadline_ts: Invalid input: expected number, received string", [
      { path: ["deadline_ts"], message: "Invalid input: expected number, received string" },
    ]),
  ),
  invalid_checkpoint_state: envelope(
    new CheckpointStateError(
      "manifest.json in /checkpoints/step-120 belongs to checkpoint 'ckpt-0006', not 'ckpt-0007'",
    ),
  ),
  upstream_unreachable: envelope(
    new GymError(
      "upstream_unreachable",
      "policy: POST /v1/responses failed: cannot connect (is the server running?)",
    ),
  ),
  upstream_error: envelope(
    new GymError(
      "upstream_error",
      "counter: POST /ng-rollout/task-3/increment_counter → HTTP 409 stale_attempt: attempt 0 of rollout 'task-3' is retired",
    ),
  ),
  internal_error: envelope(new GymError("internal_error", "internal server error")),
};
