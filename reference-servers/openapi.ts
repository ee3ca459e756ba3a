/**
 * Writes (or, with `--check`, checks) one OpenAPI document per server of the reference
 * deployment into `openapi/reference/<server>.json`: each server's data routes and, where it is a
 * participant, the control routes, exactly as it serves them at `/openapi.json`.
 *
 *   npm run openapi          # gym openapi, then this script
 *   npm run openapi:check    # both with --check (CI)
 *
 * The reference servers import the SDK's build (`sdk/dist`): run `npm run build` first.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { loadDeploymentFile, resolveDeployment } from "../sdk/src/cli/deployment-file.js";
import { renderJson, writeDocuments, type GeneratedDocument } from "../sdk/src/cli/openapi.js";
import { CliError, type Io } from "../sdk/src/cli/output.js";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const OUT = path.join(HERE, "..", "openapi", "reference");

/** What `openApiDocument()` of a server needs; the reference classes all have it. */
interface DocumentedServer {
  openApiDocument(): unknown;
  close(): Promise<void>;
}
type ServerClass = new (options: Record<string, unknown>) => DocumentedServer;

/** Every server's document, built from the deployment's own config (no process is started). */
async function renderDocuments(): Promise<GeneratedDocument[]> {
  // Servers may create their state directories when built: keep those out of the checkout.
  const runDir = await mkdtemp(path.join(tmpdir(), "gym-openapi-"));
  try {
    const loaded = loadDeploymentFile(path.join(HERE, "deployment.yaml"), {
      env: { ...process.env, GYM_RUN_DIR: runDir },
    });
    // Fixed ports: the documents name no URL, and must not change from run to run.
    const ports = Object.fromEntries(
      Object.keys(loaded.servers).map((name, i) => [name, 40_000 + i]),
    );
    const deployment = resolveDeployment(loaded, ports);
    const documents: GeneratedDocument[] = [];
    for (const server of Object.values(loaded.servers)) {
      const module = (await import(pathToFileURL(server.entrypoint).href)) as {
        default: ServerClass;
      };
      const instance = new module.default({
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

const io: Io = {
  out: (text) => void process.stdout.write(`${text}\n`),
  err: (text) => void process.stderr.write(`${text}\n`),
  cwd: process.cwd(),
  env: process.env,
};
try {
  await writeDocuments(
    await renderDocuments(),
    { out: OUT, check: process.argv.includes("--check") },
    io,
  );
} catch (error) {
  if (!(error instanceof CliError)) throw error;
  io.err(error.message);
  if (error.hint !== null) io.err(`what to do: ${error.hint}`);
  process.exitCode = error.exitCode;
}
