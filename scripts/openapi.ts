/**
 * Writes or checks the committed OpenAPI documents under `openapi/`.
 *
 * - `tsx scripts/openapi.ts write`: regenerates every document.
 * - `tsx scripts/openapi.ts check`: regenerates in memory and exits 1 when a committed document
 *   is stale or missing (CI runs this, as fastify checks its generated validator).
 */
import { mkdir, readFile, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { buildOpenApiDocument } from "../sdk/src/openapi/build-document.js";

const ROOT = fileURLToPath(new URL("..", import.meta.url));

/** A committed document: its path from the repository root and how to build it. */
export interface CommittedDocument {
  readonly file: string;
  render(): Promise<string>;
}

/** JSON with 2-space indentation and a trailing newline: the committed form. */
export function renderJson(document: unknown): string {
  return `${JSON.stringify(document, null, 2)}\n`;
}

async function sdkVersion(): Promise<string> {
  const text = await readFile(join(ROOT, "sdk", "package.json"), "utf8");
  const { version } = JSON.parse(text) as { version?: unknown };
  if (typeof version !== "string") throw new Error("sdk/package.json has no version");
  return version;
}

/** Every committed document, in the order they are written. */
export const COMMITTED_DOCUMENTS: readonly CommittedDocument[] = [
  {
    file: "openapi/checkpoint-control.json",
    async render() {
      const document = buildOpenApiDocument({
        title: "gym-participant-sdk checkpoint control",
        version: await sdkVersion(),
        description:
          "The checkpoint control routes every participant serves under " +
          "`/ng-control/v1/checkpoint` (spec core §2, §3, §5). Generated from the SDK's route " +
          "table and zod schemas by `npm run openapi`; do not edit by hand.",
        controlRoutes: true,
      });
      return renderJson(document);
    },
  },
];

async function readCommitted(file: string): Promise<string | null> {
  try {
    return await readFile(join(ROOT, file), "utf8");
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return null;
    throw error;
  }
}

async function write(): Promise<number> {
  for (const document of COMMITTED_DOCUMENTS) {
    const target = join(ROOT, document.file);
    await mkdir(dirname(target), { recursive: true });
    await writeFile(target, await document.render(), "utf8");
    console.log(`wrote ${document.file}`);
  }
  return 0;
}

async function check(): Promise<number> {
  let stale = 0;
  for (const document of COMMITTED_DOCUMENTS) {
    const committed = await readCommitted(document.file);
    if (committed === (await document.render())) continue;
    stale += 1;
    const why = committed === null ? " (the file does not exist)" : "";
    console.error(`${document.file} is stale: run npm run openapi${why}`);
  }
  if (stale === 0) console.log("openapi documents are up to date");
  return stale === 0 ? 0 : 1;
}

async function main(argv: readonly string[]): Promise<number> {
  const [command, ...rest] = argv;
  if (rest.length === 0 && command === "write") return write();
  if (rest.length === 0 && command === "check") return check();
  console.error("usage: tsx scripts/openapi.ts write|check");
  return 2;
}

// Run only as a script: the unit test imports COMMITTED_DOCUMENTS from here.
const entry = process.argv[1];
if (entry !== undefined && import.meta.url === pathToFileURL(entry).href) {
  main(process.argv.slice(2)).then(
    (code) => {
      process.exitCode = code;
    },
    (error: unknown) => {
      console.error(error instanceof Error ? (error.stack ?? error.message) : error);
      process.exitCode = 1;
    },
  );
}
