/**
 * Multi-worker runs under the real `gym serve`: a one-server deployment whose worker count
 * changes between starts, requests each sent over a fresh connection (so the cluster spreads
 * them over the workers), the session owner a cookie names, and the records a commit wrote.
 */
import { readdirSync, readFileSync, writeFileSync } from "node:fs";
import { request } from "node:http";
import path from "node:path";
import { REPO, gym, stateServers } from "./helpers.js";

/** A reply: status, parsed body, and the session cookie it set (if any). */
export interface Reply {
  readonly status: number;
  readonly body: unknown;
  readonly setCookie: string | null;
}

/**
 * POSTs JSON over a connection of its own (never reused), optionally with a cookie and
 * headers; never rejects on an HTTP status.
 */
export async function postFresh(
  url: string,
  route: string,
  body: unknown,
  options: { cookie?: string; headers?: Record<string, string> } = {},
): Promise<Reply> {
  const payload = Buffer.from(JSON.stringify(body));
  return await new Promise<Reply>((resolve, reject) => {
    const req = request(
      `${url}${route}`,
      {
        method: "POST",
        agent: false,
        headers: {
          "content-type": "application/json",
          "content-length": payload.length,
          ...(options.cookie === undefined ? {} : { cookie: options.cookie }),
          ...options.headers,
        },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (chunk: Buffer) => chunks.push(chunk));
        res.on("end", () => {
          const text = Buffer.concat(chunks).toString("utf8");
          const cookie = res.headers["set-cookie"]?.[0]?.split(";")[0] ?? null;
          resolve({
            status: res.statusCode ?? 0,
            body: text.length === 0 ? null : (JSON.parse(text) as unknown),
            setCookie: cookie,
          });
        });
      },
    );
    req.on("error", reject);
    req.end(payload);
  });
}

/** The owner a signed session cookie (`name=payload.signature`) names, or null. */
export function cookieOwner(cookie: string): string | null {
  const value = cookie.slice(cookie.indexOf("=") + 1);
  const payload = value.slice(0, value.lastIndexOf("."));
  const data = JSON.parse(Buffer.from(payload, "base64url").toString("utf8")) as {
    owner?: string;
  };
  return data.owner ?? null;
}

/** The records a participant's commit wrote. */
export function committedRecords(checkpointDir: string, kind: string, name: string): unknown[] {
  const dir = path.join(checkpointDir, "gym", kind, name);
  const file = readdirSync(dir).find((f) => f.startsWith("records-") && f.endsWith(".jsonl"));
  if (file === undefined) throw new Error(`no records file in ${dir}`);
  return readFileSync(path.join(dir, file), "utf8")
    .split("\n")
    .filter((line) => line.length > 0)
    .map((line) => JSON.parse(line) as unknown);
}

/** A participant's manifest. */
export function committedManifest(
  checkpointDir: string,
  kind: string,
  name: string,
): Record<string, unknown> {
  const file = path.join(checkpointDir, "gym", kind, name, "manifest.json");
  return JSON.parse(readFileSync(file, "utf8")) as Record<string, unknown>;
}

/** A deployment of the reference counter alone, checkpointing on, rewritten per start. */
export class CounterDeployment {
  readonly file: string;
  readonly stateFile: string;
  readonly token = "workers-token";

  constructor(readonly dir: string) {
    this.file = path.join(dir, "deployment.yaml");
    this.stateFile = path.join(dir, "run.json");
  }

  /**
   * Starts the counter with `workers` workers and waits for its health: the built server and
   * CLI under plain Node (a process starts on about half the CPU of one under the TypeScript
   * loader), given 120 s, as up to five processes start at once on a loaded machine. `config`
   * is the counter's `config:` block (e.g. `expose_tools_over_mcp: true`).
   */
  async serve(workers: number, config: Readonly<Record<string, boolean>> = {}): Promise<void> {
    const entrypoint = path.join(REPO, "reference-servers", "counter", "dist", "index.js");
    const settings = Object.entries(config).map(([key, value]) => `      ${key}: ${value}`);
    writeFileSync(
      this.file,
      [
        "checkpoint:",
        "  enabled: true",
        `  control_auth_token: ${this.token}`,
        "servers:",
        "  counter:",
        "    kind: resources",
        `    entrypoint: ${entrypoint}`,
        `    num_workers: ${workers}`,
        ...(settings.length > 0 ? ["    config:", ...settings] : []),
        "",
      ].join("\n"),
    );
    const served = await gym(
      ["serve", this.file, "--detach", "--state", this.stateFile, "--health-timeout", "120s"],
      { timeoutMs: 180_000, compiled: true },
    );
    if (served.code !== 0) throw new Error(`gym serve failed:\n${served.stderr}`);
  }

  /** Where the counter listens. */
  get url(): string {
    const counter = stateServers(this.stateFile).find((server) => server.name === "counter");
    if (counter === undefined) throw new Error("counter is not running");
    return counter.url;
  }

  /** Runs the built `gym` (as {@link serve} does: no TypeScript loader to start). */
  async gym(
    args: readonly string[],
  ): Promise<{ code: number | null; stdout: string; stderr: string }> {
    return await gym(args, { timeoutMs: 120_000, compiled: true });
  }

  /** Calls a control route. */
  async control(
    operation: string,
    body?: unknown,
  ): Promise<{ status: number; body: Record<string, unknown> }> {
    const res = await fetch(`${this.url}/ng-control/v1/checkpoint/${operation}`, {
      method: body === undefined ? "GET" : "POST",
      headers: {
        authorization: `Bearer ${this.token}`,
        ...(body === undefined ? {} : { "content-type": "application/json" }),
      },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      signal: AbortSignal.timeout(60_000),
    });
    return { status: res.status, body: (await res.json()) as Record<string, unknown> };
  }

  /** Kills every process of the counter at once. */
  async crash(): Promise<void> {
    const stopped = await gym(["stop", "--kill", "--state", this.stateFile], { compiled: true });
    if (stopped.code !== 0) throw new Error(`gym stop --kill failed:\n${stopped.stderr}`);
  }

  /** Stops it gracefully. */
  async stop(): Promise<void> {
    await gym(["stop", "--state", this.stateFile], { compiled: true });
  }
}

/** The live child processes of `pid` running `script` (a coordinator's workers). */
export function childPids(pid: number, script = "server-process"): number[] {
  const children: number[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, "utf8");
      const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      const cmdline = readFileSync(`/proc/${entry}/cmdline`, "utf8");
      if (Number(fields[1]) === pid && fields[0] !== "Z" && cmdline.includes(script)) {
        children.push(Number(entry));
      }
    } catch {
      // exited meanwhile
    }
  }
  return children;
}
