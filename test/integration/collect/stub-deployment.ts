/**
 * A one-server deployment whose environment server is scripted: each `/run` attempt replies,
 * drops its connection, is refused with `admission_closed` or `invalid_request` (a row missing
 * a task field), or hangs until released; the control
 * routes record every operation and answer as told (prepare ready or not, restore refused or
 * not; a commit writes an empty participant directory). For the collector paths real servers
 * reach only under faults.
 */
import { writeFileSync } from "node:fs";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { hostname } from "node:os";
import path from "node:path";
import { ServerClient } from "#sdk/client/server-client.js";
import type { Participants } from "#sdk/client/coordination.js";
import { RecordsWriter } from "#sdk/store/records-writer.js";
import { CONTROL_PREFIX } from "#sdk/wire/control.js";
import type { ResolvedDeployment } from "#sdk/wire/deployment.js";

/**
 * Writes `dir/tasks.jsonl` with `count` rows `{task_id: "t<i>", q: i, ...extra(i)}` and returns
 * its path: the task file the collector tests feed the stub.
 */
export function writeTasks(
  dir: string,
  count: number,
  extra: (i: number) => object = () => ({}),
): string {
  const file = path.join(dir, "tasks.jsonl");
  const lines = Array.from({ length: count }, (_, i) => ({ task_id: `t${i}`, q: i, ...extra(i) }));
  writeFileSync(file, lines.map((line) => `${JSON.stringify(line)}\n`).join(""));
  return file;
}

/** What an attempt's `/run` does. */
export type RunBehaviour = "reply" | "drop" | "admission_closed" | "invalid" | "hang";

/** One `/run` the stub received. */
export interface ReceivedRun {
  readonly rollout_id: string;
  readonly attempt: number;
}

/** One control call the stub received. */
export interface ControlCall {
  readonly operation: string;
  readonly body: Record<string, unknown>;
}

const TOKEN = "stub-token";

function reportOf(blockers: readonly string[]): Record<string, unknown> {
  return {
    ready: blockers.length === 0,
    blockers,
    blocker_count: blockers.length,
    counts: {},
    restarts: [],
  };
}

/** The scripted environment server and the deployment naming it. */
export class StubDeployment {
  readonly runs: ReceivedRun[] = [];
  readonly control: ControlCall[] = [];
  /** Decides each attempt's behaviour; replies by default. */
  behaviour: (run: ReceivedRun, nth: number) => RunBehaviour = () => "reply";
  prepareReady = true;
  restoreRefused = false;
  #hanging: (() => void)[] = [];
  #server: Server | null = null;
  #url = "";

  async start(): Promise<void> {
    this.#server = createServer((req, res) => void this.#handle(req, res));
    await new Promise<void>((resolve) => this.#server?.listen(0, "127.0.0.1", resolve));
    this.#url = `http://127.0.0.1:${(this.#server.address() as AddressInfo).port}`;
  }

  async close(): Promise<void> {
    this.release();
    this.#server?.closeAllConnections();
    await new Promise<void>((resolve) => this.#server?.close(() => resolve()));
  }

  /** Lets every hanging `/run` reply. */
  release(): void {
    const waiting = this.#hanging;
    this.#hanging = [];
    for (const resume of waiting) resume();
  }

  /** How many `/run`s hang now. */
  get hanging(): number {
    return this.#hanging.length;
  }

  get deployment(): ResolvedDeployment {
    const port = Number(new URL(this.#url).port);
    return {
      checkpoint: { enabled: true, control_auth_token: TOKEN, lease_grace_seconds: 600 },
      servers: {
        env: {
          kind: "environment",
          url: this.#url,
          host: "127.0.0.1",
          port,
          num_workers: 1,
          config: {},
        },
      },
    };
  }

  /** A client and participants for the collector. */
  participants(): Participants {
    const client = new ServerClient(this.deployment);
    return { client, token: TOKEN, members: [{ name: "env", kind: "environment" }] };
  }

  /** The control calls of one operation, in order. */
  calls(operation: string): ControlCall[] {
    return this.control.filter((call) => call.operation === operation);
  }

  async #handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const text = Buffer.concat(chunks).toString("utf8");
    const body = (text === "" ? {} : JSON.parse(text)) as Record<string, unknown>;
    const send = (status: number, value: unknown): void => {
      res.writeHead(status, { "content-type": "application/json" });
      res.end(JSON.stringify(value));
    };
    const url = req.url ?? "";
    if (url.startsWith(CONTROL_PREFIX)) {
      const operation = url.slice(CONTROL_PREFIX.length + 1);
      this.control.push({ operation, body });
      switch (operation) {
        case "status":
          return send(200, {
            kind: "environment",
            instance: "env",
            phase: "idle",
            checkpoint_id: null,
            lease_expires_at: null,
            retired_rollouts: 0,
            report: reportOf([]),
          });
        case "prepare":
          return send(200, {
            phase: this.prepareReady ? "prepared" : "preparing",
            report: reportOf(this.prepareReady ? [] : ["busy-rollout"]),
          });
        case "restore":
          if (this.restoreRefused) {
            return send(409, {
              error: { code: "checkpoint_error", detail: "refused by the stub" },
            });
          }
          return send(200, { restored: body.episode_ids ?? [] });
        case "commit": {
          // A participant on this machine: its (empty) state is where the controller looks.
          const manifest = await new RecordsWriter({
            checkpointDir: body.checkpoint_dir as string,
            kind: "environment",
            instance: "env",
            checkpointId: body.checkpoint_id as string,
            host: hostname(),
          }).write([]);
          return send(200, { phase: "committed", manifest, episode_ids: [] });
        }
        default:
          return send(200, { phase: "idle" });
      }
    }
    // Data calls arrive under the rollout prefix: /rollouts/<key>/run.
    if (req.method === "POST" && url.endsWith("/run")) {
      const episode = body.episode_id as ReceivedRun;
      const run = { rollout_id: episode.rollout_id, attempt: episode.attempt };
      const nth = this.runs.filter(
        (r) => r.rollout_id === run.rollout_id && r.attempt === run.attempt,
      ).length;
      this.runs.push(run);
      const reply = (): void =>
        send(200, {
          episode_id: episode,
          task_id: (body.task as { task_id: unknown }).task_id,
          result: { reward: 1 },
          failure: null,
        });
      switch (this.behaviour(run, nth)) {
        case "reply":
          return reply();
        case "drop":
          req.socket.destroy();
          return;
        case "admission_closed":
          return send(409, { error: { code: "admission_closed", detail: "a checkpoint is open" } });
        case "invalid":
          return send(422, {
            error: { code: "invalid_request", detail: "task.task_input.count: Required" },
          });
        case "hang":
          this.#hanging.push(reply);
          return;
      }
    }
    send(404, { error: { code: "not_found", detail: url } });
  }
}
