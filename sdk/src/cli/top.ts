/**
 * `gym top`: a live view of a running deployment, one row per server, read from each server's
 * own `/ready` and `/metrics` (no control token needed): readiness, phase, admission, work in
 * flight, sessions, blockers, request rate, commits, and the clock's offset from the controller's
 * as the last control call showed it. Redrawn in place on a terminal; `--once`
 * prints one snapshot. The request rate and count leave out operational and control routes, so
 * the top's own polling does not show as traffic.
 */
import { setTimeout as delay } from "node:timers/promises";
import { deploymentFetch, type DeploymentFetch } from "../client/tls.js";
import type { ResolvedDeployment, ResolvedServer } from "../wire/deployment.js";
import type { Io } from "./output.js";
import { EXIT_OK } from "./output.js";
import { deadServers } from "./dead-servers.js";
import { openRun } from "./open-run.js";
import { table } from "./table.js";

/** What one server's metrics say. */
export interface ServerSnapshot {
  readonly ready: string;
  readonly phase: string;
  readonly admission: string;
  readonly inflight: number | null;
  readonly sessions: number | null;
  readonly blockers: number | null;
  /** Work requests served so far: every route but the operational and control ones. */
  readonly requests: number | null;
  readonly commits: number | null;
  /** The server's clock minus the last controller's that called it, in seconds. */
  readonly clockOffset: number | null;
}

/** One sample of a Prometheus text exposition. */
export interface Sample {
  readonly name: string;
  readonly labels: Readonly<Record<string, string>>;
  readonly value: number;
}

/** The samples of a Prometheus text exposition (comments skipped). */
export function parsePrometheus(text: string): Sample[] {
  const samples: Sample[] = [];
  for (const line of text.split("\n")) {
    if (line === "" || line.startsWith("#")) continue;
    const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)/.exec(line);
    if (match === null) continue;
    const labels: Record<string, string> = {};
    for (const pair of (match[2] ?? "").matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) {
      labels[pair[1] as string] = (pair[2] as string).replace(/\\(.)/g, "$1");
    }
    samples.push({ name: match[1] as string, labels, value: Number(match[3]) });
  }
  return samples;
}

function sum(
  samples: readonly Sample[],
  name: string,
  where: Record<string, string> = {},
): number | null {
  const matching = samples.filter(
    (sample) =>
      sample.name === name &&
      Object.entries(where).every(([key, value]) => sample.labels[key] === value),
  );
  return matching.length === 0 ? null : matching.reduce((total, sample) => total + sample.value, 0);
}

/** The Prometheus names `gym top` reads (see docs/observability.md). */
const REQUEST_COUNT = "http_server_request_duration_seconds_count";
const OPERATION_COUNT = "gym_checkpoint_operation_duration_seconds_count";

/** Where the metrics of a deployment's servers are, or null when its `telemetry:` turns them off. */
export function metricsPathOf(deployment: ResolvedDeployment): string | null {
  const telemetry = deployment.telemetry;
  if (telemetry === undefined) return "/metrics";
  return telemetry.metrics ? telemetry.metrics_path : null;
}

/**
 * Whether a request's route (its `http_route` label) is one a poller or the controller calls
 * rather than work: `/health`, `/ready`, the metrics route, `/openapi.json` and the control
 * routes. `gym top` polls `/ready` and the metrics route itself, as Prometheus and load
 * balancers do; counting them would show a rate on an idle server, and one that grows with
 * every `gym top` watching it.
 */
export function isOperationalRoute(route: string, metricsPath: string | null): boolean {
  return (
    route === "/health" ||
    route === "/ready" ||
    route === "/openapi.json" ||
    route === metricsPath ||
    route.startsWith("/ng-control/")
  );
}

/** Work requests a scrape counts ({@link isOperationalRoute} left out), or null when none is listed. */
export function workRequests(
  samples: readonly Sample[],
  metricsPath: string | null,
): number | null {
  let total: number | null = null;
  for (const sample of samples) {
    if (sample.name !== REQUEST_COUNT) continue;
    total ??= 0;
    if (!isOperationalRoute(sample.labels.http_route ?? "", metricsPath)) total += sample.value;
  }
  return total;
}

/** How {@link snapshotOf} reads a server. */
export interface SnapshotOptions {
  /** The server's metrics route; null when metrics are off. @default "/metrics" */
  readonly metricsPath?: string | null;
  /** Bound on each request, in ms. @default 2000 */
  readonly timeoutMs?: number;
  /** How requests are sent (over the deployment's TLS: see `deploymentFetch`). @default fetch */
  readonly fetch?: DeploymentFetch;
}

/** Reads one server's readiness and metrics; unreachable parts read as `-`. */
export async function snapshotOf(
  server: Pick<ResolvedServer, "url">,
  options: SnapshotOptions = {},
): Promise<ServerSnapshot> {
  const metricsPath = options.metricsPath === undefined ? "/metrics" : options.metricsPath;
  const timeoutMs = options.timeoutMs ?? 2_000;
  const fetch = options.fetch ?? globalThis.fetch;
  let ready = "down";
  try {
    const res = await fetch(`${server.url}/ready`, { signal: AbortSignal.timeout(timeoutMs) });
    ready = res.status === 200 ? "ready" : res.status === 503 ? "not ready" : `HTTP ${res.status}`;
  } catch {
    // down
  }
  let samples: Sample[] = [];
  if (metricsPath !== null) {
    try {
      const res = await fetch(`${server.url}${metricsPath}`, {
        signal: AbortSignal.timeout(timeoutMs),
      });
      if (res.ok) samples = parsePrometheus(await res.text());
    } catch {
      // no metrics
    }
  }
  const phase =
    samples.find((sample) => sample.name === "gym_participant_phase" && sample.value === 1)?.labels
      .phase ?? "-";
  const open = sum(samples, "gym_participant_admission_open");
  return {
    ready,
    phase,
    admission: open === null ? "-" : open > 0 ? "open" : "closed",
    inflight: sum(samples, "gym_participant_count", { count: "inflight" }),
    sessions: sum(samples, "gym_participant_count", { count: "sessions" }),
    blockers: sum(samples, "gym_participant_blockers"),
    requests: workRequests(samples, metricsPath),
    commits: sum(samples, OPERATION_COUNT, { operation: "commit", outcome: "ok" }),
    clockOffset: clockOffsetOf(samples),
  };
}

/** The largest `gym_clock_offset_seconds` of a scrape (one per worker), or null. */
export function clockOffsetOf(samples: readonly Sample[]): number | null {
  let offset: number | null = null;
  for (const sample of samples) {
    if (sample.name !== "gym_clock_offset_seconds" || !Number.isFinite(sample.value)) continue;
    if (offset === null || Math.abs(sample.value) > Math.abs(offset)) offset = sample.value;
  }
  return offset;
}

/** A clock offset as `gym top` shows it: `+2.01s`, `-0.00s`, or `-` before any control call. */
export function clockCell(seconds: number | null): string {
  if (seconds === null) return "-";
  return `${seconds < 0 ? "-" : "+"}${Math.abs(seconds).toFixed(2)}s`;
}

const cell = (value: number | null): string => (value === null ? "-" : String(value));

/** Options of `gym top`. */
export interface TopOptions {
  readonly state?: string;
  readonly deployment?: string;
  readonly intervalMs: number;
  readonly once: boolean;
}

/** Runs `gym top` until interrupted (or once). */
export async function topCommand(options: TopOptions, io: Io): Promise<number> {
  const { state } = openRun(options, io);
  const metricsPath = metricsPathOf(state.deployment);
  const http = deploymentFetch(state.deployment.tls);
  const servers = Object.entries(state.deployment.servers)
    .filter(([, server]) => server.kind !== "backend")
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  const live = !options.once && process.stdout.isTTY === true;
  let previous = new Map<string, { requests: number; at: number }>();
  let stop = false;
  const onSignal = (): void => {
    stop = true;
  };
  process.once("SIGINT", onSignal);
  try {
    for (;;) {
      const now = performance.now();
      const snapshots = await Promise.all(
        servers.map(
          async ([, server]) => await snapshotOf(server, { metricsPath, fetch: http.fetch }),
        ),
      );
      // A server whose process is gone says so, with its pid, rather than just "down".
      const gone = new Map(deadServers(state).map((entry) => [entry.name, entry.pid]));
      const next = new Map<string, { requests: number; at: number }>();
      const rows = servers.map(([name, server], i) => {
        const snapshot = snapshots[i] as ServerSnapshot;
        const before = previous.get(name);
        let rate = "-";
        if (snapshot.requests !== null) {
          next.set(name, { requests: snapshot.requests, at: now });
          if (before !== undefined && now > before.at) {
            rate = ((snapshot.requests - before.requests) / ((now - before.at) / 1000)).toFixed(1);
          }
        }
        return [
          name,
          server.kind,
          gone.has(name) ? `exited (pid ${gone.get(name)})` : snapshot.ready,
          snapshot.phase,
          snapshot.admission,
          cell(snapshot.inflight),
          cell(snapshot.sessions),
          cell(snapshot.blockers),
          rate,
          cell(snapshot.requests),
          cell(snapshot.commits),
          clockCell(snapshot.clockOffset),
        ];
      });
      previous = next;
      const text = table(
        [
          "SERVER",
          "KIND",
          "READY",
          "PHASE",
          "ADMISSION",
          "IN FLIGHT",
          "SESSIONS",
          "BLOCKERS",
          "REQ/S",
          "REQUESTS",
          "COMMITS",
          "CLOCK",
        ],
        rows,
      );
      if (live)
        process.stdout.write(
          `\x1b[H\x1b[2J${new Date().toISOString()}  (Ctrl-C to quit)\n\n${text}\n`,
        );
      else io.out(text);
      if (options.once || stop) return EXIT_OK;
      await delay(options.intervalMs);
      if (stop) return EXIT_OK;
    }
  } finally {
    process.off("SIGINT", onSignal);
    await http.close();
  }
}
