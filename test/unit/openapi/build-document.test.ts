import { readFile, readdir } from "node:fs/promises";
import { fileURLToPath } from "node:url";
import path from "node:path";
import { Validator } from "@seriousme/openapi-schema-validator";
import type {
  OpenAPIObject,
  OperationObject,
  ParameterObject,
  ResponseObject,
  SchemaObject,
} from "openapi3-ts/oas31";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { ERROR_CATALOGUE } from "#sdk/errors.js";
import {
  buildOpenApiDocument,
  CONTROL_TAG,
  OpenApiDocumentError,
  type OpenApiOptions,
} from "#sdk/openapi/build-document.js";
import { CONTROL_ROUTES } from "#sdk/wire/control-routes.js";
import type { RouteDoc } from "#sdk/wire/route-doc.js";
import { generatedDocuments } from "#sdk/cli/openapi.js";

const CONTROL: OpenApiOptions = { title: "control", version: "0.0.0", controlRoutes: true };

async function expectValid(document: OpenAPIObject): Promise<void> {
  const validator = new Validator();
  // The validator may annotate what it is given: hand it a copy.
  const result = await validator.validate(structuredClone(document) as never);
  expect(result.errors ?? []).toEqual([]);
  expect(result.valid).toBe(true);
  expect(validator.version).toBe("3.1");
}

function operation(document: OpenAPIObject, path: string, method: string): OperationObject {
  const item = document.paths?.[path] as Record<string, OperationObject> | undefined;
  const op = item?.[method];
  if (op === undefined) throw new Error(`no ${method} ${path} in the document`);
  return op;
}

function response(op: OperationObject, status: string): ResponseObject | undefined {
  return op.responses?.[status] as ResponseObject | undefined;
}

/** Every error code an operation's responses carry, read from their named examples. */
function exampleCodes(op: OperationObject): Map<string, string> {
  const codes = new Map<string, string>();
  for (const [status, value] of Object.entries(op.responses ?? {})) {
    if (status === "200") continue;
    const examples = (value as ResponseObject).content?.["application/json"]?.examples ?? {};
    for (const [name, example] of Object.entries(examples)) {
      const code = (example as { value: { error: { code: string } } }).value.error.code;
      expect(name).toBe(code);
      codes.set(code, status);
    }
  }
  return codes;
}

function schema(document: OpenAPIObject, id: string): SchemaObject {
  const found = document.components?.schemas?.[id] as SchemaObject | undefined;
  if (found === undefined) throw new Error(`no component schema ${id}`);
  return found;
}

function refId(ref: unknown): string {
  const $ref = (ref as { $ref?: string }).$ref ?? "";
  expect($ref).toMatch(/^#\/components\/schemas\//);
  return $ref.slice("#/components/schemas/".length);
}

describe("buildOpenApiDocument: control routes", () => {
  const document = buildOpenApiDocument(CONTROL);

  it("is a valid OpenAPI 3.1 document", async () => {
    expect(document.openapi).toBe("3.1.0");
    await expectValid(document);
  });

  it("documents every control route with its method, and nothing else", () => {
    for (const route of CONTROL_ROUTES) operation(document, route.path, route.method);
    expect(Object.keys(document.paths ?? {})).toEqual(CONTROL_ROUTES.map((route) => route.path));
  });

  it("gives every operation a summary, description, operationId, tag and bearer security", () => {
    expect(document.components?.securitySchemes?.bearerAuth).toMatchObject({
      type: "http",
      scheme: "bearer",
    });
    const operationIds = new Set<string>();
    for (const route of CONTROL_ROUTES) {
      const op = operation(document, route.path, route.method);
      expect(op.summary).toBe(route.summary);
      expect(op.description).toBe(route.description);
      expect(op.tags).toEqual([CONTROL_TAG]);
      expect(op.security).toEqual([{ bearerAuth: [] }]);
      expect(op.operationId).toMatch(/^checkpoint[A-Z][A-Za-z]*$/);
      operationIds.add(op.operationId ?? "");
    }
    expect(operationIds.size).toBe(CONTROL_ROUTES.length);
    const prepare = CONTROL_ROUTES.find((route) => route.operation === "prepare");
    expect(operation(document, prepare?.path ?? "", "post").operationId).toBe("checkpointPrepare");
  });

  it("answers 401 on every route and describes and exemplifies each error response", () => {
    for (const route of CONTROL_ROUTES) {
      const op = operation(document, route.path, route.method);
      expect(response(op, "401"), `${route.path} 401`).toBeDefined();
      for (const [status, value] of Object.entries(op.responses ?? {})) {
        if (status === "200") continue;
        const error = value as ResponseObject;
        const media = error.content?.["application/json"];
        expect(refId(media?.schema)).toBe("ErrorEnvelope");
        const examples = Object.keys(media?.examples ?? {});
        expect(examples.length, `${route.path} ${status} examples`).toBeGreaterThan(0);
        for (const code of examples) {
          expect(String(ERROR_CATALOGUE[code as keyof typeof ERROR_CATALOGUE].status)).toBe(status);
          expect(error.description).toContain(`\`${code}\``);
        }
      }
    }
  });

  it("lists every error code a route names, under its catalogue status", () => {
    for (const route of CONTROL_ROUTES) {
      const codes = exampleCodes(operation(document, route.path, route.method));
      const expected = new Set<string>(["unauthorized", ...route.errors]);
      if (route.request !== null) expected.add("invalid_request");
      expect([...codes.keys()].sort(), route.path).toEqual([...expected].sort());
      for (const [code, status] of codes) {
        expect(status).toBe(String(ERROR_CATALOGUE[code as keyof typeof ERROR_CATALOGUE].status));
      }
    }
  });

  it("requires a JSON body that forbids unknown properties on every POST route", () => {
    for (const route of CONTROL_ROUTES) {
      const op = operation(document, route.path, route.method);
      if (route.request === null) {
        expect(op.requestBody).toBeUndefined();
        continue;
      }
      const body = op.requestBody as { required?: boolean; content: Record<string, unknown> };
      expect(body.required).toBe(true);
      const media = body.content["application/json"] as { schema: unknown };
      const request = schema(document, refId(media.schema));
      expect(request.additionalProperties, route.path).toBe(false);
      expect(request.example, `${route.path} request example`).toBeDefined();
    }
  });

  it("documents each reply schema with an example", () => {
    const withoutExample: string[] = [];
    for (const route of CONTROL_ROUTES) {
      const ok = response(operation(document, route.path, route.method), "200");
      const id = refId(ok?.content?.["application/json"]?.schema);
      if (schema(document, id).example === undefined) withoutExample.push(id);
    }
    // CommitReply's meta carries no example yet (sdk/src/wire/storage.ts).
    expect(withoutExample.filter((id) => id !== "CommitReply")).toEqual([]);
  });

  it("defines the error envelope once, with every catalogue code", () => {
    const code = schema(document, "ErrorCode");
    expect(code.enum).toEqual(Object.keys(ERROR_CATALOGUE));
    expect(schema(document, "ErrorEnvelope").required).toEqual(["error"]);
  });

  it("is deterministic", () => {
    expect(JSON.stringify(buildOpenApiDocument(CONTROL))).toBe(JSON.stringify(document));
  });

  it("matches the committed openapi/checkpoint-control.json (run npm run openapi when stale)", async () => {
    for (const document of generatedDocuments()) {
      const path = fileURLToPath(new URL(`../../../openapi/${document.file}`, import.meta.url));
      const onDisk = await readFile(path, "utf8").catch(() => "<missing>");
      expect(onDisk, `openapi/${document.file} is stale: run npm run openapi`).toBe(
        document.render(),
      );
    }
  });
});

const CONTROL_FILE = fileURLToPath(new URL("../../../openapi/checkpoint-control.json", import.meta.url));

/**
 * Whether a schema says what a reply is: a type, a constant or enumeration, a reference to a
 * component that does, or a combination of such. `{}` (any JSON) and a schema holding only a
 * description do not.
 */
function isTyped(document: OpenAPIObject, schema: unknown, seen = new Set<string>()): boolean {
  if (typeof schema !== "object" || schema === null) return false;
  const s = schema as SchemaObject & { $ref?: string };
  if (typeof s.$ref === "string") {
    const id = s.$ref.slice("#/components/schemas/".length);
    if (seen.has(id)) return true; // a cycle: its other members decide
    return isTyped(document, document.components?.schemas?.[id], new Set([...seen, id]));
  }
  if (s.type !== undefined || s.const !== undefined || s.enum !== undefined) return true;
  const members = s.anyOf ?? s.oneOf ?? s.allOf;
  return members !== undefined && members.length > 0 && members.every((m) => isTyped(document, m, seen));
}

describe("the committed reference server documents (openapi/reference)", () => {
  const dir = fileURLToPath(new URL("../../../openapi/reference/", import.meta.url));
  const expected = ["counter", "counter_env", "inference", "policy", "simple_agent", "weather", "weather_env"];

  it("hold one valid OpenAPI 3.1 document per server of the reference deployment", async () => {
    const files = (await readdir(dir)).sort();
    expect(files).toEqual(expected.map((name) => `${name}.json`));
    for (const file of files) {
      await expectValid(JSON.parse(await readFile(path.join(dir, file), "utf8")) as OpenAPIObject);
    }
  });

  it("type every 2xx reply of every route (no empty or untyped schema)", async () => {
    const untyped: string[] = [];
    for (const file of [...expected.map((name) => path.join(dir, `${name}.json`)), CONTROL_FILE]) {
      const document = JSON.parse(await readFile(file, "utf8")) as OpenAPIObject;
      for (const [route, item] of Object.entries(document.paths ?? {})) {
        for (const [method, op] of Object.entries(item as Record<string, OperationObject>)) {
          for (const [status, value] of Object.entries(op.responses ?? {})) {
            if (!status.startsWith("2")) continue;
            const content = (value as ResponseObject).content ?? {};
            const where = `${path.basename(file)}: ${method.toUpperCase()} ${route} ${status}`;
            if (Object.keys(content).length === 0) untyped.push(`${where}: no content`);
            for (const [media, body] of Object.entries(content)) {
              if (!isTyped(document, body.schema)) untyped.push(`${where} ${media}`);
            }
          }
        }
      }
    }
    expect(untyped).toEqual([]);
  });

  it("document the control routes on participants and the upstream failures on the session routes", async () => {
    const counter = JSON.parse(await readFile(path.join(dir, "counter.json"), "utf8")) as OpenAPIObject;
    for (const route of CONTROL_ROUTES) expect(counter.paths?.[route.path]).toBeDefined();
    const verify = operation(counter, "/ng-rollout/{capture_key}/verify", "post");
    expect(Object.keys(verify.responses ?? {})).toEqual(expect.arrayContaining(["400", "409", "422", "502"]));
    // A tool is documented where an episode calls it, under the rollout prefix, too.
    for (const tool of ["/increment_counter", "/get_counter_value"]) {
      expect(operation(counter, tool, "post")).toBeDefined();
      expect(operation(counter, `/ng-rollout/{capture_key}${tool}`, "post")).toBeDefined();
    }
    const inference = JSON.parse(await readFile(path.join(dir, "inference.json"), "utf8")) as OpenAPIObject;
    expect(inference.paths?.[CONTROL_ROUTES[0]?.path ?? ""]).toBeUndefined(); // a backend is no participant
  });
});

describe("buildOpenApiDocument: data routes", () => {
  const ItemRequest = z.strictObject({ score: z.number() });
  const routes: RouteDoc[] = [
    {
      method: "post",
      path: "/items/:id",
      summary: "Score an item",
      request: ItemRequest,
      reply: z.object({ ok: z.boolean() }),
      errors: ["stale_attempt", "admission_closed", "rollout_id_required"],
      rolloutPrefixed: true,
      tag: "items",
    },
    { method: "get", path: "/health", summary: "Liveness" },
  ];
  const document = buildOpenApiDocument({ ...CONTROL, controlRoutes: false, routes });

  it("is a valid OpenAPI 3.1 document, alone and beside the control routes", async () => {
    await expectValid(document);
    await expectValid(buildOpenApiDocument({ ...CONTROL, routes }));
  });

  it("converts path parameters and documents the rollout-prefixed twin", () => {
    expect(Object.keys(document.paths ?? {})).toEqual([
      "/items/{id}",
      "/ng-rollout/{capture_key}/items/{id}",
      "/health",
    ]);
    const plain = operation(document, "/items/{id}", "post");
    const prefixed = operation(document, "/ng-rollout/{capture_key}/items/{id}", "post");
    expect(plain.operationId).not.toBe(prefixed.operationId);
    const names = (op: OperationObject) =>
      (op.parameters as ParameterObject[]).map((p) => `${p.in}:${p.name}`);
    expect(names(plain)).toEqual(["path:id"]);
    expect(names(prefixed)).toEqual(["path:capture_key", "path:id"]);
    const captureKey = (prefixed.parameters as ParameterObject[])[0];
    expect(captureKey?.required).toBe(true);
    expect((captureKey?.schema as SchemaObject).pattern).toBe("^[A-Za-z0-9][A-Za-z0-9._-]*$");
  });

  it("groups the route's codes by status, adds 422 for a body, and uses its tag", () => {
    const op = operation(document, "/items/{id}", "post");
    expect(op.tags).toEqual(["items"]);
    expect(op.security).toBeUndefined();
    expect(Object.fromEntries(exampleCodes(op))).toEqual({
      stale_attempt: "409",
      admission_closed: "409",
      rollout_id_required: "400",
      invalid_request: "422",
    });
    const health = operation(document, "/health", "get");
    expect(health.tags).toEqual(["data"]);
    expect(Object.keys(health.responses ?? {})).toEqual(["200"]);
    expect(document.paths?.["/ng-rollout/{capture_key}/health"]).toBeUndefined();
  });

  it("is deterministic", () => {
    const again = buildOpenApiDocument({ ...CONTROL, controlRoutes: false, routes });
    expect(JSON.stringify(again)).toBe(JSON.stringify(document));
  });

  it("names the route when a schema cannot be rendered", () => {
    const bad: RouteDoc = {
      method: "post",
      path: "/bad",
      summary: "Bad",
      request: z.strictObject({ when: z.map(z.string(), z.string()) }),
    };
    expect(() => buildOpenApiDocument({ ...CONTROL, routes: [...routes, bad] })).toThrow(
      OpenApiDocumentError,
    );
    try {
      buildOpenApiDocument({ ...CONTROL, routes: [...routes, bad] });
    } catch (error) {
      expect((error as OpenApiDocumentError).route).toBe("POST /bad");
      expect((error as Error).message).toContain("POST /bad");
    }
  });

  it("refuses two different schemas under one id instead of documenting one as the other", () => {
    const twin: RouteDoc = {
      method: "post",
      path: "/twin",
      summary: "Twin",
      request: z.strictObject({ other: z.string() }).meta({ id: "CheckpointRequest" }),
    };
    expect(() => buildOpenApiDocument({ ...CONTROL, routes: [twin] })).toThrow(
      /POST \/twin: schema id 'CheckpointRequest' names two different schemas/,
    );
  });

  it("refuses a route documented twice", () => {
    expect(() =>
      buildOpenApiDocument({ ...CONTROL, controlRoutes: false, routes: [routes[1]!, routes[1]!] }),
    ).toThrow(/GET \/health: the route is documented twice/);
  });
});

describe("buildOpenApiDocument: examples and routes refused without the rollout prefix", () => {
  const body = z.strictObject({ amount: z.number() });
  const reply = z.strictObject({ total: z.number() });
  const verify: RouteDoc = {
    method: "post",
    path: "/verify",
    summary: "Verify",
    request: body,
    reply,
    rolloutPrefixed: true,
    rolloutRequired: true,
    examples: { request: { amount: 2 }, reply: { total: 2 } },
  };
  const doc = (checkpointing: boolean, routes: RouteDoc[] = [verify]) =>
    buildOpenApiDocument({ ...CONTROL, controlRoutes: checkpointing, checkpointing, routes });

  it("shows a route's examples on its request body and 200 reply", async () => {
    const document = doc(true);
    await expectValid(document);
    const post = operation(document, "/verify", "post");
    const json = (holder: unknown) =>
      (holder as { content: Record<string, { example?: unknown }> }).content["application/json"];
    expect(json(post.requestBody)?.example).toEqual({ amount: 2 });
    expect(json(post.responses?.["200"])?.example).toEqual({ total: 2 });
  });

  it("marks the un-prefixed copy deprecated with checkpointing on, naming the path to call", () => {
    const post = operation(doc(true), "/verify", "post");
    expect(post.deprecated).toBe(true);
    expect(post.description).toContain("answers 400 `rollout_id_required`");
    expect(post.description).toContain("`POST /ng-rollout/{capture_key}/verify`");
    expect(operation(doc(true), "/ng-rollout/{capture_key}/verify", "post").deprecated).toBe(
      undefined,
    );
  });

  it("leaves every copy usable with checkpointing off", () => {
    expect(operation(doc(false), "/verify", "post").deprecated).toBeUndefined();
  });

  it("refuses an example its schema refuses, naming the route", () => {
    const stale = { ...verify, examples: { request: { amount: "2" } } };
    expect(() => doc(false, [stale])).toThrow(
      /POST \/verify: its request example does not match its schema/,
    );
    const metaStale = { ...verify, examples: {}, reply: reply.meta({ example: { total: "2" } }) };
    expect(() => doc(false, [metaStale])).toThrow(/its reply schema's example does not match/);
  });

  it("refuses rolloutRequired on a route not served under the prefix", () => {
    expect(() => doc(false, [{ ...verify, rolloutPrefixed: false }])).toThrow(
      /`rolloutRequired` needs `rolloutPrefixed`/,
    );
  });
});
