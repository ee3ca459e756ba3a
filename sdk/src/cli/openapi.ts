/**
 * `gym openapi [--out DIR] [--check]`: writes (or checks) the OpenAPI documents generated from
 * the wire schemas: the control contract every participant serves. With `--deployment FILE`,
 * one document per server of that deployment instead, each exactly what the server serves at
 * `/openapi.json` (its data routes and, for a participant, the control routes).
 */
import { mkdtemp, mkdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { buildOpenApiDocument } from "../openapi/build-document.js";
import { sdkVersion } from "./defaults.js";
import { loadDeploymentFile } from "../deployment/load.js";
import { resolveDeployment } from "../deployment/resolve.js";
import { CliError, commandOf, type Io } from "./output.js";

/** One generated document: its file name inside the output directory and its text. */
export interface GeneratedDocument {
  readonly file: string;
  render(): string;
}

/** JSON with 2-space indentation and a trailing newline: the committed form. */
export function renderJson(document: unknown): string {
  return `${JSON.stringify(document, null, 2)}\n`;
}

/** Every document `gym openapi` writes. */
export function generatedDocuments(): GeneratedDocument[] {
  return [
    {
      file: "checkpoint-control.json",
      render: () =>
        renderJson(
          buildOpenApiDocument({
            title: "gym-participant-sdk checkpoint control",
            version: sdkVersion(),
            description:
              "The checkpoint control routes every participant serves under " +
              "`/ng-control/v1/checkpoint` (see docs/control-plane.md and docs/errors.md). Generated from the SDK's route " +
              "table and zod schemas by `npm run openapi`; do not edit by hand.",
            controlRoutes: true,
          }),
        ),
    },
  ];
}

/** What a server class needs to be documented without listening. */
interface DocumentedServer {
  openApiDocument(): unknown;
  close(): Promise<void>;
}
type DocumentedServerClass = new (options: Record<string, unknown>) => DocumentedServer;

/**
 * One document per server of the deployment in `file`, built from the servers' own config
 * without starting a process. Ports are fixed (the documents name no URL), and `GYM_RUN_DIR`
 * points at a scratch directory, so directories servers create when built stay out of the
 * checkout.
 */
export async function deploymentDocuments(file: string, io: Io): Promise<GeneratedDocument[]> {
  const runDir = await mkdtemp(path.join(tmpdir(), "gym-openapi-"));
  try {
    const loaded = loadDeploymentFile(path.resolve(io.cwd, file), {
      env: { ...io.env, GYM_RUN_DIR: runDir },
      cwd: io.cwd,
    });
    const names = Object.keys(loaded.servers);
    const ports = Object.fromEntries(names.map((name, i) => [name, 40_000 + i]));
    const deployment = resolveDeployment(loaded, ports);
    const documents: GeneratedDocument[] = [];
    for (const server of Object.values(loaded.servers)) {
      const module = (await import(pathToFileURL(server.entrypoint).href)) as {
        default?: unknown;
      };
      if (typeof module.default !== "function") {
        throw new CliError(
          `${server.name}: ${server.entrypoint} has no default export to document`,
          "export the server class as the module's default export",
        );
      }
      const ServerClass = module.default as DocumentedServerClass;
      const instance = new ServerClass({
        name: server.name,
        config: server.config,
        checkpoint: loaded.checkpoint,
        deployment,
        logLevel: "silent",
      });
      try {
        const text = renderJson(instance.openApiDocument());
        documents.push({ file: `${server.name}.json`, render: () => text });
      } finally {
        await instance.close();
      }
    }
    return documents;
  } finally {
    await rm(runDir, { recursive: true, force: true });
  }
}

/** `gym openapi`; returns the exit status (1 when `--check` finds a stale document). */
export async function openapiCommand(
  options: { out?: string; check?: boolean; deployment?: string },
  io: Io,
): Promise<number> {
  const from = options.deployment === undefined ? "" : ` --deployment ${options.deployment}`;
  const regenerate = `regenerate them with \`${commandOf(io)} openapi${from} --out ${options.out ?? "openapi"}\` (npm run openapi)`;
  const documents =
    options.deployment === undefined
      ? generatedDocuments()
      : await deploymentDocuments(options.deployment, io);
  return await writeDocuments(documents, options, io, regenerate);
}

/**
 * Writes `documents` into `options.out` (relative to `io.cwd`; default `openapi`), or with
 * `check` compares them with what is there and throws a {@link CliError} listing the stale
 * ones, with `regenerate` as what to do. Returns the exit status (0).
 */
export async function writeDocuments(
  documents: readonly GeneratedDocument[],
  options: { out?: string; check?: boolean },
  io: Io,
  regenerate = "regenerate them with `npm run openapi`",
): Promise<number> {
  const out = path.resolve(io.cwd, options.out ?? "openapi");
  const stale: string[] = [];
  for (const document of documents) {
    const target = path.join(out, document.file);
    const text = document.render();
    if (options.check === true) {
      let committed: string | null = null;
      try {
        committed = await readFile(target, "utf8");
      } catch {
        committed = null;
      }
      if (committed !== text) stale.push(`${target}${committed === null ? " (missing)" : ""}`);
      continue;
    }
    await mkdir(out, { recursive: true });
    await writeFile(target, text, "utf8");
    io.out(`wrote ${path.relative(io.cwd, target) || target}`);
  }
  if (stale.length > 0) {
    throw new CliError(
      `stale OpenAPI documents:\n${stale.map((file) => `  - ${file}`).join("\n")}`,
      regenerate,
    );
  }
  if (options.check === true) io.out("openapi documents are up to date");
  return 0;
}
