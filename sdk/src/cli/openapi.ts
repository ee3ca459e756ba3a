/**
 * `gym openapi [--out DIR] [--check]`: writes (or checks) the OpenAPI documents generated from
 * the wire schemas. Today that is the control contract every participant serves; reference
 * servers add one document each for their data routes.
 *
 * @see docs/openapi.md
 */
import { mkdir, readFile, writeFile } from "node:fs/promises";
import path from "node:path";
import { buildOpenApiDocument } from "../openapi/build-document.js";
import { sdkVersion } from "./defaults.js";
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

/** `gym openapi`; returns the exit status (1 when `--check` finds a stale document). */
export async function openapiCommand(
  options: { out?: string; check?: boolean },
  io: Io,
): Promise<number> {
  const regenerate = `regenerate them with \`${commandOf(io)} openapi --out ${options.out ?? "openapi"}\` (npm run openapi)`;
  return await writeDocuments(generatedDocuments(), options, io, regenerate);
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
