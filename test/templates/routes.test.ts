/**
 * The templates teach validated input: every route of every template's server declares a
 * request schema and a reply schema, its data routes show examples in Swagger, a malformed
 * body is refused naming the field, and, with checkpointing on, the un-prefixed copies that
 * answer 400 are not advertised as usable. The template classes are imported from their
 * sources (with the SDK's), so this runs in process, without scaffolding a project.
 */
import type { OpenAPIObject, OperationObject } from "openapi3-ts/oas31";
import request from "supertest";
import { describe, expect, it } from "vitest";
import type { Server, ServerOptions } from "gym-participant-sdk";
import PlannerAgent from "../../templates/template-agent/src/index.js";
import WordCountEnvironment from "../../templates/template-environment/src/index.js";
import ExportedTally from "../../templates/template-resources-exported/src/index.js";
import RestartOnlyTally from "../../templates/template-resources-restart_only/src/index.js";
import MultiplierServer from "../../templates/template-resources-stateless/src/index.js";

const TOKEN = "template-routes-token";

/** Each template's server class, and the config its deployment file gives it. */
const TEMPLATES: readonly {
  readonly template: string;
  readonly cls: new (options: ServerOptions) => Server<unknown>;
  readonly config?: unknown;
}[] = [
  { template: "template-resources-exported", cls: ExportedTally },
  { template: "template-resources-restart_only", cls: RestartOnlyTally },
  { template: "template-resources-stateless", cls: MultiplierServer },
  { template: "template-agent", cls: PlannerAgent },
  {
    template: "template-environment",
    cls: WordCountEnvironment,
    config: { cleanup_timeout_seconds: 5 },
  },
];

/** The routes a template itself declares, each with a malformed body and the field it names. */
const MALFORMED: Record<string, readonly { path: string; body: unknown; field: string }[]> = {
  "template-resources-exported": [
    { path: "/add", body: { amount: "two" }, field: "amount" },
    { path: "/verify", body: { target: "five" }, field: "target" },
  ],
  "template-resources-restart_only": [
    { path: "/add", body: {}, field: "amount" },
    { path: "/verify", body: {}, field: "target" },
  ],
  "template-resources-stateless": [
    { path: "/multiply", body: { a: 6 }, field: "b" },
    { path: "/verify", body: { response: { output: [] } }, field: "expected_answer" },
  ],
  "template-agent": [{ path: "/v1/responses", body: { input: 7 }, field: "input" }],
  "template-environment": [
    {
      path: "/run",
      body: {
        episode_id: { rollout_id: "ep1", attempt: 0 },
        task: { task_id: { taskset: "demo", task_id: "1" }, task_input: { documents: "text" } },
      },
      field: "task.task_input.documents",
    },
  ],
};

function build(entry: (typeof TEMPLATES)[number], checkpointing: boolean): Server<unknown> {
  return new entry.cls({
    name: "template",
    logLevel: "silent",
    config: entry.config,
    checkpoint: checkpointing ? { enabled: true, control_auth_token: TOKEN } : { enabled: false },
  });
}

function operations(document: OpenAPIObject): [string, OperationObject][] {
  return Object.entries(document.paths ?? {}).flatMap(([path, item]) =>
    (["get", "post", "put", "delete"] as const).flatMap((method) => {
      const operation = item[method];
      return operation === undefined ? [] : [[`${method.toUpperCase()} ${path}`, operation]];
    }),
  ) as [string, OperationObject][];
}

/** The JSON content of an operation's body, or of its 200 reply. */
function content(operation: OperationObject, where: "request" | "reply") {
  const holder =
    where === "request"
      ? (operation.requestBody as { content?: Record<string, unknown> } | undefined)
      : (operation.responses?.["200"] as { content?: Record<string, unknown> } | undefined);
  return holder?.content?.["application/json"] as
    { schema?: Record<string, unknown>; example?: unknown } | undefined;
}

/** A schema's component, when it is a `$ref`. */
function resolve(document: OpenAPIObject, schema: Record<string, unknown> | undefined) {
  const ref = schema?.$ref;
  if (typeof ref !== "string") return schema;
  return document.components?.schemas?.[ref.split("/").pop() ?? ""] as Record<string, unknown>;
}

/** Whether the example shows in Swagger UI: on the media type, or on the schema itself. */
function hasExample(
  document: OpenAPIObject,
  operation: OperationObject,
  where: "request" | "reply",
) {
  const media = content(operation, where);
  return media?.example !== undefined || resolve(document, media?.schema)?.example !== undefined;
}

describe.each(TEMPLATES)("$template", (entry) => {
  const document = build(entry, true).openApiDocument();
  const data = operations(document).filter(
    ([label]) => !/ \/(health|ready|metrics)$|\/ng-control\//.test(label),
  );

  it("declares a request schema on every POST and a reply schema on every operation", () => {
    for (const [label, operation] of operations(document)) {
      const reply =
        content(operation, "reply") ??
        (operation.responses?.["200"] as { content?: Record<string, { schema?: unknown }> })
          ?.content?.["text/plain"];
      expect(reply?.schema, `${label}: 200 reply schema`).toBeDefined();
      if (label.startsWith("POST ")) {
        expect(content(operation, "request")?.schema, `${label}: request schema`).toBeDefined();
      }
    }
    for (const [label, operation] of data) {
      // Data replies name their fields: not the empty schema that stands for "any JSON".
      expect(Object.keys(content(operation, "reply")?.schema ?? {}), label).not.toEqual([]);
    }
  });

  it("shows an example request and reply on the routes it declares", () => {
    for (const { path } of MALFORMED[entry.template] ?? []) {
      const operation = document.paths?.[path]?.post;
      expect(operation, path).toBeDefined();
      expect(hasExample(document, operation!, "request"), `${path}: request example`).toBe(true);
      expect(hasExample(document, operation!, "reply"), `${path}: reply example`).toBe(true);
    }
  });

  it.each(MALFORMED[entry.template] ?? [])(
    "refuses a malformed $path body with 422 naming $field",
    async ({ path, body, field }) => {
      const reply = await request(build(entry, false).app())
        .post(path)
        .send(body as object);
      expect(reply.status).toBe(422);
      expect(reply.body.error.code).toBe("invalid_request");
      const named = (reply.body.error.issues as { path: (string | number)[] }[]).map((issue) =>
        issue.path.join("."),
      );
      expect(named).toContain(field);
    },
  );

  it("marks the un-prefixed copies that answer 400 while checkpointing as deprecated", async () => {
    const app = build(entry, true).app();
    for (const [label, operation] of data) {
      const [method, path] = label.split(" ") as [string, string];
      if (path.startsWith("/ng-rollout/")) {
        expect(operation.deprecated, label).toBeUndefined();
        continue;
      }
      const prefixed = document.paths?.[`/ng-rollout/{capture_key}${path}`];
      if (operation.deprecated === true) {
        // It says why, and which path to call instead.
        expect(operation.description, label).toContain("rollout_id_required");
        expect(operation.description, label).toContain(`/ng-rollout/{capture_key}${path}`);
        expect(prefixed, label).toBeDefined();
      }
      if (method !== "POST") continue;
      // The document and the server agree: a deprecated copy is refused, the others are not.
      const sent = await request(app)
        .post(path)
        .send(example(document, operation) as object);
      const refused = sent.status === 400 && sent.body.error?.code === "rollout_id_required";
      expect(refused, `${label} (${sent.status} ${JSON.stringify(sent.body)})`).toBe(
        operation.deprecated === true,
      );
    }
  });

  it("documents every un-prefixed copy as usable with checkpointing off", () => {
    const plain = build(entry, false).openApiDocument();
    for (const [label, operation] of operations(plain)) {
      expect(operation.deprecated, label).toBeUndefined();
    }
  });
});

/** The request example an operation shows, or `{}`. */
function example(document: OpenAPIObject, operation: OperationObject): unknown {
  const media = content(operation, "request");
  return media?.example ?? resolve(document, media?.schema)?.example ?? {};
}
