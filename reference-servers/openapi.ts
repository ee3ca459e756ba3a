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
import { mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { loadDeploymentFile, resolveDeployment } from "../sdk/src/cli/deployment-file.js";
import { renderJson } from "../sdk/src/cli/openapi.js";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const OUT = path.join(HERE, "..", "openapi", "reference");

/** What `openApiDocument()` of a server needs; the reference classes all have it. */
interface DocumentedServer {
  openApiDocument(): unknown;
  close(): Promise<void>;
}
type ServerClass = new (options: Record<string, unknown>) => DocumentedServer;

/** Every server's document, built from the deployment's own config (no process is started). */
async function renderDocuments(): Promise<Map<string, string>> {
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
    const documents = new Map<string, string>();
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
        documents.set(`${server.name}.json`, renderJson(instance.openApiDocument()));
      } finally {
        await instance.close();
      }
    }
    return documents;
  } finally {
    await rm(runDir, { recursive: true, force: true });
  }
}

async function main(check: boolean): Promise<number> {
  const documents = await renderDocuments();
  const stale: string[] = [];
  if (!check) await mkdir(OUT, { recursive: true });
  for (const [file, text] of documents) {
    const target = path.join(OUT, file);
    const shown = path.relative(process.cwd(), target);
    if (check) {
      const committed = await readFile(target, "utf8").catch(() => null);
      if (committed !== text) stale.push(`${shown}${committed === null ? " (missing)" : ""}`);
      continue;
    }
    await writeFile(target, text, "utf8");
    process.stdout.write(`wrote ${shown}\n`);
  }
  if (stale.length > 0) {
    process.stderr.write(
      `stale reference OpenAPI documents:\n${stale.map((f) => `  - ${f}`).join("\n")}\n` +
        "what to do: regenerate them with `npm run openapi`\n",
    );
    return 1;
  }
  if (check) process.stdout.write("reference openapi documents are up to date\n");
  return 0;
}

process.exitCode = await main(process.argv.includes("--check"));
