/**
 * The fuzz run. The reference deployment runs in real processes with rollouts in flight (their
 * second model call held at the fake backend); then:
 *
 * 1. `budget` hostile requests on every route of every participant (cases.ts), a few at once;
 * 2. half-sent bodies held open while a checkpoint is prepared, and declared `Content-Length`s
 *    far above the body limit;
 * 3. a real checkpoint is committed, and copies of it corrupted every way corruptions.ts knows
 *    are restored into the running servers and, after a crash, into fresh ones; then the good
 *    checkpoint restores and every rollout finishes with its reward;
 * 4. every server answers `/health` and its control `status` is idle, with nothing in flight.
 *
 * ## Findings
 * A status of 500 or above (no exception: every 502 the reference deployment may answer comes
 * from another participant refusing what this one sent it, which the first one should have
 * refused itself), a request not answered within {@link REQUEST_TIMEOUT_MS}, a reply lost to a
 * connection reset while the body was sent (except after a 413), half-sent bodies that hold up a
 * prepare, a declared oversize body not refused at once, a corrupted restore that is accepted or
 * changes the participant's status, a good restore refused afterwards, and a server that is not
 * healthy and idle at the end.
 */
import { execFileSync } from "node:child_process";
import { cpSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import type { Socket } from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import {
  commit,
  prepare,
  restore,
  resume,
  status,
  type Participants,
} from "../../sdk/src/client/coordination.js";
import type { EpisodeId } from "../../sdk/src/identity/episode-id.js";
import type { StatusReply } from "../../sdk/src/wire/control.js";
import { CrashRun, Rollout, counterTask, episodeId, scriptOf } from "../e2e/crash-harness.js";
import { Random } from "../support/seeded-random.js";
import { loadRoutes, makeCase, type FuzzCase, type Route } from "./cases.js";
import { CORRUPTIONS, type Corruption } from "./corruptions.js";
import {
  REQUEST_TIMEOUT_MS,
  curlOf,
  declaredLength,
  halfSent,
  send,
  type Outcome,
} from "./http.js";

/** How a fuzz run goes. */
export interface FuzzOptions {
  readonly seed: number;
  /** Hostile requests to send on the routes (the other phases come on top). */
  readonly budget: number;
  /** Requests in flight at once. @default 4 */
  readonly concurrency?: number;
  /** Start the built servers (needs `npm run build`) instead of the sources. @default false */
  readonly compiled?: boolean;
  /**
   * Replay one thing only: a case number of phase 1 (`"123"`), `"half-sent"`, or
   * `"corrupt:<name>"` (one corruption of corruptions.ts). @default everything
   */
  readonly only?: string;
  /** Progress lines. */
  readonly log?: (line: string) => void;
}

/** Something the deployment should not have done. */
export interface Finding {
  /** What findings are grouped by: server, route, what was done, what came back. */
  readonly group: string;
  readonly detail: string;
  /** How to see it again. */
  readonly repro: string;
}

/** What a fuzz run did and found. */
export interface FuzzReport {
  readonly seed: number;
  /** Requests sent to the participants (phase 1 cases, raw-socket probes, restores). */
  readonly requests: number;
  /** How many replies had each status (0: none). */
  readonly statuses: Record<string, number>;
  readonly corruptedRestores: number;
  readonly findings: readonly Finding[];
  readonly durationMs: number;
  /** Phase 1 alone: its duration, for the throughput figure. */
  readonly casesMs: number;
}

/** The rollouts kept in flight across the run (counter environment, two model turns each). */
const IN_FLIGHT = 3;

function deadline(seconds: number): number {
  return Date.now() / 1000 + seconds;
}

/** Runs the whole fuzz against a fresh deployment; a finding never throws. */
export async function runFuzz(options: FuzzOptions): Promise<FuzzReport> {
  const fuzz = new Fuzz(options);
  await fuzz.run();
  return fuzz.report();
}

class Fuzz {
  readonly #options: FuzzOptions;
  readonly #log: (line: string) => void;
  readonly #started = Date.now();
  readonly #dir = mkdtempSync(path.join(tmpdir(), "gym-fuzz-"));
  readonly #run: CrashRun;
  readonly #findings: Finding[] = [];
  readonly #statuses: Record<string, number> = {};
  readonly #replay: string;
  #requests = 0;
  #corruptedRestores = 0;
  #casesMs = 0;
  #participants: Participants | null = null;

  constructor(options: FuzzOptions) {
    this.#options = options;
    this.#log = options.log ?? (() => undefined);
    this.#run = new CrashRun(this.#dir, "deployment.yaml", { compiled: options.compiled === true });
    this.#replay = `npm run test:fuzz -- --seed ${options.seed}`;
  }

  report(): FuzzReport {
    return {
      seed: this.#options.seed,
      requests: this.#requests,
      statuses: this.#statuses,
      corruptedRestores: this.#corruptedRestores,
      findings: this.#findings,
      durationMs: Date.now() - this.#started,
      casesMs: this.#casesMs,
    };
  }

  #finding(group: string, detail: string, only: string): void {
    this.#findings.push({ group, detail, repro: `${this.#replay} --only ${only}` });
    this.#log(`finding: ${group}`);
  }

  #count(status: number): void {
    this.#requests++;
    this.#statuses[status] = (this.#statuses[status] ?? 0) + 1;
  }

  get #members(): Participants {
    if (this.#participants === null) throw new Error("the deployment is not running");
    return this.#participants;
  }

  async run(): Promise<void> {
    const only = this.#options.only;
    try {
      const rollouts = await this.#start();
      if (only === undefined || /^\d+$/.test(only)) await this.#cases(only);
      if (only === undefined || only === "half-sent") await this.#halfSent();
      if (only === undefined || only.startsWith("corrupt:")) {
        const corruptions = CORRUPTIONS.filter(
          (c) => only === undefined || only === `corrupt:${c.name}`,
        );
        if (corruptions.length === 0) throw new Error(`no corruption named ${only}`);
        await this.#corrupted(rollouts, corruptions);
      } else {
        await this.#run.release();
      }
      await this.#idle();
    } catch (error) {
      this.#findings.push({
        group: "the fuzz run itself failed",
        detail: error instanceof Error ? (error.stack ?? error.message) : String(error),
        repro: this.#replay,
      });
    } finally {
      await this.#run.cleanup();
      rmSync(this.#dir, { recursive: true, force: true });
    }
  }

  /** Starts the deployment and the rollouts in flight; answers the rollouts. */
  async #start(): Promise<Rollout[]> {
    await this.#run.serve();
    this.#participants = await this.#run.participants();
    const odd = path.join(this.#dir, "fuzz-ckpt");
    mkdirSync(odd, { recursive: true });
    writeFileSync(path.join(odd, "plain-file"), "not a directory");
    execFileSync("mkfifo", [path.join(odd, "fifo")]);

    const rollouts = Array.from(
      { length: IN_FLIGHT },
      (_, i) => new Rollout("counter_env", counterTask(episodeId(`fuzz-r${i}`), 2)),
    );
    await this.#run.script(scriptOf(rollouts));
    await this.#run.hold({ after_calls_per_rollout: 1 });
    for (const rollout of rollouts) void this.#run.start(rollout).outcome;
    await this.#run.heldCalls(rollouts.map((r) => r.key()));
    // The held calls keep their release event; a rule no call reaches lets the fuzz's own model
    // calls through, so a held call is never mistaken for a hang.
    await this.#run.hold({ after_calls: Number.MAX_SAFE_INTEGER });
    return rollouts;
  }

  /** Phase 1: the hostile requests (or only case `only`). */
  async #cases(only: string | undefined): Promise<void> {
    const started = Date.now();
    const routes = loadRoutes();
    const random = new Random(this.#options.seed);
    const context = { token: this.#run.token, runDir: this.#dir };
    const total = only === undefined ? this.#options.budget : Number(only) + 1;
    // Generated in order whatever is sent, so case N is the same in every replay of the seed.
    const cases: FuzzCase[] = Array.from({ length: total }, () =>
      makeCase(routes, random, context),
    );
    const picked = only === undefined ? cases.map((_, i) => i) : [Number(only)];
    let next = 0;
    let done = 0;
    const worker = async () => {
      for (let at = next++; at < picked.length; at = next++) {
        const id = picked[at] as number;
        const fuzzCase = cases[id] as FuzzCase;
        const outcome = await send(this.#run.url(fuzzCase.server), fuzzCase);
        this.#count(outcome.status);
        this.#judge(id, fuzzCase, outcome);
        if (only !== undefined)
          this.#log(
            `case #${id} ${fuzzCase.kind}: HTTP ${outcome.status} ${outcome.text.slice(0, 500)}\n  ${curlOf(this.#run.url(fuzzCase.server), fuzzCase)}`,
          );
        if (++done % 250 === 0) {
          await this.#heal();
          if (done % 1000 === 0)
            this.#log(`${done}/${picked.length} requests, ${this.#findings.length} finding(s)`);
        }
      }
    };
    await Promise.all(Array.from({ length: this.#options.concurrency ?? 4 }, worker));
    await this.#heal();
    this.#casesMs = Date.now() - started;
  }

  #judge(id: number, fuzzCase: FuzzCase, outcome: Outcome): void {
    const route = `${fuzzCase.server} ${fuzzCase.method} ${routeOf(fuzzCase.path)}`;
    let what: string | null = null;
    if (outcome.status === 0) what = "no answer";
    else if (outcome.status >= 500) what = `HTTP ${outcome.status}`;
    else if (outcome.lostReply !== undefined && outcome.status !== 413) {
      what = `HTTP ${outcome.status} lost to a reset connection`;
    }
    if (what === null) return;
    const detail = `${outcome.lostReply === undefined ? "" : `fetch: ${outcome.lostReply}; `}${outcome.text.slice(0, 300)}`;
    this.#finding(
      `${route} [${fuzzCase.mutation}] → ${what}`,
      `${detail}\n    ${curlOf(this.#run.url(fuzzCase.server), fuzzCase)}`,
      String(id),
    );
  }

  /** Resumes any participant a fuzzed control call left in a checkpoint. */
  async #heal(): Promise<void> {
    const replies = await status(this.#members);
    for (const [name, reply] of Object.entries(replies)) {
      if (reply.phase === "idle" || reply.checkpoint_id === null) continue;
      const one = {
        ...this.#members,
        members: this.#members.members.filter((m) => m.name === name),
      };
      await resume(one, reply.checkpoint_id, deadline(30)).catch(() => undefined);
    }
  }

  /** Phase 2: half-sent bodies must not hold up a prepare; absurd lengths are refused at once. */
  async #halfSent(): Promise<void> {
    this.#log("half-sent bodies and declared lengths");
    const routes = loadRoutes();
    const sockets: Socket[] = [];
    try {
      for (const member of this.#members.members) {
        const base = this.#run.url(member.name);
        const route = dataRouteOf(routes, member.name);
        for (let i = 0; i < 10; i++)
          sockets.push(await halfSent(base, route.replace("{capture_key}", `half-${i}`)));
        sockets.push(await halfSent(base, "/ng-control/v1/checkpoint/prepare"));
        for (const [where, declared] of [
          [route.replace("{capture_key}", "half-x"), 70 * 1024 * 1024],
          ["/ng-control/v1/checkpoint/prepare", 1e12],
        ] as const) {
          const line = await declaredLength(base, where, declared);
          this.#count(Number(/ (\d{3}) /.exec(line)?.[1] ?? 0));
          if (!line.startsWith("HTTP/1.1 413")) {
            this.#finding(
              `${member.name} POST ${where} declaring Content-Length ${declared} → ${line || "no answer in 5 s"}`,
              "a body declared above the limit is refused with 413 at once",
              "half-sent",
            );
          }
        }
      }
      const prepared = await prepare(this.#members, "fuzz-half-sent", deadline(20));
      if (!prepared.prepared) {
        this.#finding(
          "half-sent bodies hold up prepare",
          JSON.stringify(prepared.blockers()).slice(0, 300),
          "half-sent",
        );
      }
      await resume(this.#members, "fuzz-half-sent", deadline(20));
    } finally {
      for (const socket of sockets) socket.destroy();
    }
  }

  /** Phase 3: corrupted copies of a real checkpoint restore nothing, the good one still does. */
  async #corrupted(
    rollouts: readonly Rollout[],
    corruptions: readonly Corruption[],
  ): Promise<void> {
    this.#log("corrupted checkpoints");
    const good = path.join(this.#dir, "checkpoints", "good");
    const prepared = await prepare(this.#members, "fuzz-good", deadline(30));
    if (!prepared.prepared) throw new Error(`prepare: ${JSON.stringify(prepared.blockers())}`);
    const scope = prepared.continued(rollouts.map((r) => r.episode()));
    await commit(this.#members, {
      checkpointId: "fuzz-good",
      checkpointDir: good,
      episodeIds: scope,
      deadlineTs: deadline(60),
    });
    await resume(this.#members, "fuzz-good", deadline(30));
    // Into the running servers (they hold the live rollouts), then into fresh ones.
    await this.#restoreCorrupted(good, scope, corruptions.slice(0, 4), "running");
    await this.#run.crash();
    await this.#run.serve({ afterCrash: true });
    this.#participants = await this.#run.participants();
    await this.#restoreCorrupted(good, scope, corruptions, "fresh");

    this.#log("the good checkpoint after the corrupted ones");
    try {
      await restore(this.#members, {
        checkpointId: "fuzz-restore",
        checkpointDir: good,
        episodeIds: scope,
        deadlineTs: deadline(60),
      });
      await resume(this.#members, "fuzz-restore", deadline(30));
      await this.#run.release();
      const outcomes = await Promise.all(rollouts.map((r) => this.#run.start(r, 1).outcome));
      outcomes.forEach((outcome, i) => {
        const reward = outcome.body.result?.reward;
        if (outcome.status !== 200 || reward !== 1) {
          this.#finding(
            `rollout fuzz-r${i} after the corrupted restores → HTTP ${outcome.status}, reward ${String(reward)}`,
            JSON.stringify(outcome.body).slice(0, 300),
            "corrupt:" + (corruptions[0]?.name ?? ""),
          );
        }
      });
    } catch (error) {
      this.#finding(
        "the good checkpoint no longer restores after corrupted ones",
        String(error).slice(0, 500),
        `corrupt:${corruptions[0]?.name ?? ""}`,
      );
    }
  }

  async #restoreCorrupted(
    good: string,
    scope: readonly EpisodeId[],
    corruptions: readonly Corruption[],
    into: "running" | "fresh",
  ): Promise<void> {
    const kinds = readdirSync(path.join(good, "gym"));
    const dirs = kinds.flatMap((kind) =>
      readdirSync(path.join(good, "gym", kind)).map((instance) => ({ kind, instance })),
    );
    let n = 0;
    for (const member of this.#members.members) {
      const own = dirs.find((d) => d.instance === member.name);
      if (own === undefined) continue;
      const other = dirs.find((d) => d.instance !== member.name) ?? null;
      for (const corruption of corruptions) {
        const copy = path.join(this.#dir, "checkpoints", `corrupt-${into}-${++n}`);
        cpSync(good, copy, { recursive: true });
        const applied = await corruption.apply({ checkpointDir: copy, ...own, other });
        if (!applied) continue;
        this.#corruptedRestores++;
        const before = await statusOf(this.#members, member.name);
        const res = await restoreOne(
          this.#run.url(member.name),
          this.#run.token,
          copy,
          scope,
          `fuzz-corrupt-${into}-${n}`,
        );
        this.#count(res.status);
        const after = await statusOf(this.#members, member.name);
        const group = `${member.name} restore (${into}) of a checkpoint with ${corruption.name}`;
        if (res.status < 400 || res.status >= 500) {
          this.#finding(
            `${group} → HTTP ${res.status}`,
            res.text.slice(0, 300),
            `corrupt:${corruption.name}`,
          );
        }
        const changed = installed(before, after);
        if (changed !== null)
          this.#finding(`${group} installed something`, changed, `corrupt:${corruption.name}`);
        if (res.status >= 200 && res.status < 300) {
          await resume(
            { ...this.#members, members: [member] },
            `fuzz-corrupt-${into}-${n}`,
            deadline(20),
          );
        }
        rmSync(copy, { recursive: true, force: true });
      }
    }
  }

  /** Phase 4: every server healthy, idle and with nothing in flight. */
  async #idle(): Promise<void> {
    await this.#heal();
    const replies = await status(this.#members);
    for (const member of this.#members.members) {
      const health = await fetch(`${this.#run.url(member.name)}/health`, {
        signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
      }).then(
        (res) => res.status,
        () => 0,
      );
      if (health !== 200)
        this.#finding(`${member.name} /health → ${health} at the end`, "", "half-sent");
      const reply = replies[member.name];
      const counts = reply?.report.counts ?? {};
      if (
        reply === undefined ||
        reply.phase !== "idle" ||
        reply.checkpoint_id !== null ||
        reply.lease_expires_at !== null ||
        reply.report.blocker_count !== 0 ||
        (counts.inflight ?? 0) !== 0 ||
        (counts.held ?? 0) !== 0
      ) {
        this.#finding(
          `${member.name} not idle at the end`,
          JSON.stringify(reply).slice(0, 400),
          this.#options.only ?? "0",
        );
      }
    }
  }
}

/** A route's path with the rollout prefix folded, for grouping. */
function routeOf(requestPath: string): string {
  return requestPath
    .replace(/^\/ng-rollout\/[^/]*/, "/ng-rollout/{key}")
    .replace(
      /\/training-token-capture\/control\/rollouts\/[^/]+\/manifest/,
      "/training-token-capture/control/rollouts/{id}/manifest",
    )
    .slice(0, 80);
}

/** A data route of `server` that a rollout's request takes: a prefixed one when it has one. */
function dataRouteOf(routes: readonly Route[], server: string): string {
  const own = routes.filter((r) => r.server === server && !r.control && r.method === "POST");
  return (own.find((r) => r.path.includes("{capture_key}")) ?? own[0])?.path ?? "/run";
}

async function statusOf(participants: Participants, name: string): Promise<StatusReply | null> {
  const replies = await status({
    ...participants,
    members: participants.members.filter((m) => m.name === name),
  });
  return replies[name] ?? null;
}

/**
 * What a refused restore changed in a participant's status (null: nothing). The retired marks
 * may grow: a restore marks its scope retired before it reads anything.
 */
function installed(before: StatusReply | null, after: StatusReply | null): string | null {
  const strip = (reply: StatusReply | null) => {
    if (reply === null) return null;
    const { retired_rollouts: _retired, lease_expires_at: _lease, ...rest } = reply;
    return rest;
  };
  const a = JSON.stringify(strip(before));
  const b = JSON.stringify(strip(after));
  return a === b ? null : `before: ${a.slice(0, 200)}; after: ${b.slice(0, 200)}`;
}

/** Sends one restore by hand, so a 5xx or a hang is seen as it is. */
async function restoreOne(
  base: string,
  token: string,
  checkpointDir: string,
  scope: readonly EpisodeId[],
  checkpointId: string,
): Promise<{ status: number; text: string }> {
  try {
    const res = await fetch(`${base}/ng-control/v1/checkpoint/restore`, {
      method: "POST",
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
      body: JSON.stringify({
        checkpoint_id: checkpointId,
        deadline_ts: deadline(15),
        checkpoint_dir: checkpointDir,
        episode_ids: scope,
      }),
      signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
    });
    return { status: res.status, text: await res.text() };
  } catch (error) {
    return { status: 0, text: String(error) };
  }
}
