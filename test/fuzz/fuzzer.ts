/**
 * The fuzz run. The reference deployment runs in real processes with rollouts in flight (their
 * second model call held at the fake backend); then:
 *
 * 1. `budget` hostile requests on every route of every participant (cases.ts), a few at once;
 * 2. half-sent bodies held open while a checkpoint is prepared, declared `Content-Length`s far
 *    above the body limit, and commits into odd directories;
 * 3. a real checkpoint is committed, and copies of it corrupted every way corruptions.ts knows
 *    are restored into the running servers and, after a crash, into fresh ones; then the good
 *    checkpoint restores and every rollout finishes with its reward;
 * 4. every server answers `/health` and its control `status` is idle, with nothing in flight.
 *
 * ## Findings
 * A status of 500 or above, 502/503/504 included: every upstream of this deployment is up and
 * answers (the fake backend fails nothing unless told to), so a 502 means a participant
 * forwarded something another one refused, a client mistake it should have refused itself with
 * a 4xx; a 503 or 504 would be a participant failing on its own. Also a request not answered within {@link REQUEST_TIMEOUT_MS}, a reply lost to a
 * connection reset while the body was sent (except after a 413), half-sent bodies that hold up a
 * prepare, a declared oversize body not refused at once, a corrupted restore that is accepted or
 * changes the participant's status, a good restore refused afterwards, and a server that is not
 * healthy and idle at the end.
 */
import { execFileSync } from "node:child_process";
import {
  cpSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  readdirSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import type { Socket } from "node:net";
import { tmpdir } from "node:os";
import { brotliDecompressSync, gunzipSync, inflateSync } from "node:zlib";
import path from "node:path";
import {
  commit,
  prepare,
  restore,
  resume,
  status,
  type Member,
  type Participants,
} from "#sdk/client/coordination.js";
import type { EpisodeId } from "#sdk/identity/episode-id.js";
import type { StatusReply } from "#sdk/wire/control.js";
import {
  CrashRun,
  Rollout,
  counterTask,
  episodeId,
  scriptOf,
  type RunOutcome,
} from "../e2e/crash-harness.js";
import { SeededRandom as Random } from "#sdk/util/seeded-random.js";
import { stateServers } from "../e2e/helpers.js";
import { loadRoutes, makeCase, oddDirs, type FuzzCase, type Route } from "./cases.js";
import { CORRUPTIONS, type Corruption } from "./corruptions.js";
import {
  REQUEST_TIMEOUT_MS,
  curlOf,
  declaredLength,
  halfSent,
  malformedRequests,
  rawExchange,
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
   * Replay one thing only: a case number of phase 1 (`"123"`), `"cases"` (phase 1 alone),
   * `"half-sent"`, `"odd-dirs"`, `"corrupt"` (phase 3 alone) or `"corrupt:<name>"` (one
   * corruption of corruptions.ts). @default everything
   */
  readonly only?: string;
  /** Progress lines. */
  readonly log?: (line: string) => void;
  /** Stops sending and skips to the cleanup (the deployment is always stopped). */
  readonly signal?: AbortSignal;
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

/** A request slower than this is logged (not a finding: a loaded machine is slow too). */
const SLOW_MS = 5_000;

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
  /** The first attempts of the rollouts in flight. */
  #pending: Promise<RunOutcome>[] = [];

  constructor(options: FuzzOptions) {
    this.#options = options;
    const log = options.log ?? (() => undefined);
    this.#log = (line) => log(`[${((Date.now() - this.#started) / 1000).toFixed(0)} s] ${line}`);
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

  /** Records a finding; `only` narrows its repro to one part of the run (default: this run). */
  #finding(group: string, detail: string, only?: string): void {
    const { budget, only: ran } = this.#options;
    const repro =
      only !== undefined
        ? `${this.#replay} --only ${only}`
        : `${this.#replay} --budget ${budget}${ran === undefined ? "" : ` --only ${ran}`}`;
    this.#findings.push({ group, detail, repro });
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
      if (only === undefined || only === "cases" || /^\d+$/.test(only)) {
        await this.#cases(only === "cases" ? undefined : only);
      }
      this.#options.signal?.throwIfAborted();
      // The rollouts' next model calls are held again, so they stay in flight for what follows.
      await this.#run.hold({ after_calls_per_rollout: 1 });
      if (only === undefined || only === "cases" || /^\d+$/.test(only)) {
        await this.#preparable("after the hostile requests", only ?? "cases");
      }
      if (only === undefined || only === "half-sent") await this.#halfSent();
      this.#options.signal?.throwIfAborted();
      if (only === undefined || only === "odd-dirs") await this.#oddDirs();
      this.#options.signal?.throwIfAborted();
      if (only === undefined || only === "corrupt" || only.startsWith("corrupt:")) {
        const corruptions = CORRUPTIONS.filter(
          (c) => only === undefined || only === "corrupt" || only === `corrupt:${c.name}`,
        );
        if (corruptions.length === 0) throw new Error(`no corruption named ${only}`);
        await this.#corrupted(rollouts, corruptions);
      } else {
        // Nothing crashed them: the rollouts held since the start finish.
        await this.#run.release();
        await Promise.all(this.#pending);
      }
      await this.#idle();
      this.#log("done");
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
    this.#log(`deployment up: ${this.#participants.members.map((m) => m.name).join(", ")}`);
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
    this.#pending = rollouts.map((rollout) => this.#run.start(rollout).outcome);
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
    // Cases are made one at a time, in order, whatever is sent (a case may carry megabytes):
    // case N is the same in every replay of the seed.
    let made = 0;
    const nextCase = (): { id: number; fuzzCase: FuzzCase } | null => {
      if (this.#options.signal?.aborted === true) return null;
      if (only === undefined) {
        if (made >= this.#options.budget) return null;
        return { id: made++, fuzzCase: makeCase(routes, random, context) };
      }
      if (made > Number(only)) return null;
      while (made < Number(only)) {
        makeCase(routes, random, context);
        made++;
      }
      return { id: made++, fuzzCase: makeCase(routes, random, context) };
    };
    const total = only === undefined ? this.#options.budget : 1;
    let done = 0;
    // Control cases run one at a time, each with its cleanup, as one controller would send
    // them; data cases run beside them and beside each other.
    let controlTurn = Promise.resolve();
    const oneCase = async (id: number, fuzzCase: FuzzCase) => {
      const sent = Date.now();
      const outcome = await send(this.#run.url(fuzzCase.server), fuzzCase);
      const tookMs = Date.now() - sent;
      if (tookMs > SLOW_MS) {
        this.#log(
          `slow: case #${id} ${fuzzCase.server} ${fuzzCase.method} ${routeOf(fuzzCase.path)} [${fuzzCase.kind}] took ${(tookMs / 1000).toFixed(1)} s`,
        );
      }
      this.#count(outcome.status);
      this.#judge(id, fuzzCase, outcome);
      if (isControl(fuzzCase)) {
        // After a refused restore a controller retires the restore's scope, as `restore()` of
        // the coordination client does: the restore marked the scope retired, and a live
        // session of it would block prepare until retired.
        if (outcome.status >= 400 && /\/restore$/.test(fuzzCase.path)) {
          await this.#retireScope(fuzzCase);
        }
        // And it resumes what it opened: data requests wait (as the contract lets them) while
        // a checkpoint is open.
        await this.#heal(fuzzCase.server);
      }
      if (only !== undefined) {
        this.#log(
          `case #${id} ${fuzzCase.kind}: HTTP ${outcome.status} ${outcome.text.slice(0, 500)}\n  ${curlOf(this.#run.url(fuzzCase.server), fuzzCase)}`,
        );
      }
    };
    const worker = async () => {
      for (let next = nextCase(); next !== null; next = nextCase()) {
        const { id, fuzzCase } = next;
        if (isControl(fuzzCase)) {
          const turn = controlTurn.then(() => oneCase(id, fuzzCase));
          controlTurn = turn.catch(() => undefined);
          await turn;
        } else {
          await oneCase(id, fuzzCase);
        }
        const count = ++done;
        if (count % 1000 === 0) {
          this.#log(`${count}/${total} requests, ${this.#findings.length} finding(s)`);
        }
        if (count % 250 === 0) await this.#heal();
      }
    };
    await Promise.all(Array.from({ length: this.#options.concurrency ?? 4 }, worker));
    await this.#heal();
    if (only === undefined) this.#casesMs = Date.now() - started;
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
      `${route} [${fuzzCase.mutation.replace(/\+(gzip|deflate|br|stacked)$/, "")}] → ${what}`,
      `${detail}\n    ${curlOf(this.#run.url(fuzzCase.server), fuzzCase)}`,
      String(id),
    );
  }

  /** Retires the well-formed episodes a fuzzed restore named (nothing when it named none). */
  async #retireScope(fuzzCase: FuzzCase): Promise<void> {
    const episodes = scopeOf(fuzzCase);
    if (episodes.length === 0) return;
    await control(this.#run.url(fuzzCase.server), this.#run.token, "retire", {
      checkpoint_id: "fuzz-rollback",
      deadline_ts: deadline(30),
      episode_ids: episodes,
    });
  }

  /** A checkpoint can still be prepared (and is resumed): nothing hostile left a blocker. */
  async #preparable(when: string, only: string): Promise<void> {
    const id = `fuzz-check-${this.#requests}`;
    const prepared = await prepare(this.#members, id, deadline(20));
    if (!prepared.prepared) {
      this.#finding(
        `prepare blocked ${when}`,
        `blockers: ${JSON.stringify(prepared.blockers()).slice(0, 300)}`,
        only,
      );
    }
    await resume(this.#members, id, deadline(20));
  }

  /** Resumes any participant a fuzzed control call left in a checkpoint. */
  async #heal(only?: string): Promise<void> {
    const members =
      only === undefined
        ? this.#members
        : { ...this.#members, members: this.#members.members.filter((m) => m.name === only) };
    const replies = await status(members);
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
          const auth = { authorization: `Bearer ${this.#run.token}` };
          const line = await declaredLength(
            base,
            where,
            declared,
            where.startsWith("/ng-control/") ? auth : {},
          );
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
      for (const member of this.#members.members) {
        const base = this.#run.url(member.name);
        const route = dataRouteOf(routes, member.name).replace("{capture_key}", "raw-1");
        for (const [name, request] of Object.entries(
          malformedRequests(new URL(base).host, route),
        )) {
          const line = await rawExchange(base, Buffer.from(request, "latin1"));
          const status = Number(/ (\d{3}) /.exec(line)?.[1] ?? 0);
          this.#count(status);
          if (status === 0 || status >= 500) {
            this.#finding(
              `${member.name} POST ${route} [${name}] → ${line || "no answer in 5 s"}`,
              "a malformed request is refused with a 4xx",
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

  /**
   * Phase 2b: commits into odd directories (a fuzzed commit rarely finds its participant
   * prepared): each a typed refusal or a real write, never a 5xx or a hang, and nothing left
   * running afterwards (a recursive `mkdir` under /proc once spun until the process exited).
   */
  async #oddDirs(): Promise<void> {
    this.#log("commits into odd directories");
    const dirs = oddDirs(this.#dir, true);
    for (const [i, dir] of dirs.entries()) {
      const id = `fuzz-dir-${i}`;
      const prepared = await prepare(this.#members, id, deadline(20));
      if (!prepared.prepared) {
        this.#finding(
          `prepare before a commit into ${JSON.stringify(dir.slice(0, 40))}`,
          JSON.stringify(prepared.blockers()).slice(0, 300),
          "odd-dirs",
        );
      }
      await Promise.all(
        this.#members.members.map(async (member) => {
          const res = await control(this.#run.url(member.name), this.#run.token, "commit", {
            checkpoint_id: id,
            deadline_ts: deadline(15),
            checkpoint_dir: dir,
            episode_ids: [],
          });
          this.#count(res.status);
          if (res.status === 0 || res.status >= 500) {
            this.#finding(
              `${member.name} commit into ${JSON.stringify(dir.length > 40 ? `${dir.slice(0, 20)}…(${dir.length})` : dir)} → ${res.status === 0 ? "no answer" : `HTTP ${res.status}`}`,
              res.text.slice(0, 300),
              "odd-dirs",
            );
          }
        }),
      );
      await resume(this.#members, id, deadline(20));
    }
    const busy = await busyServers(this.#run.stateFile);
    for (const [name, share] of busy) {
      this.#finding(
        `${name} still busy after the commits into odd directories`,
        `${(share * 100).toFixed(0)}% of a core while idle`,
        "odd-dirs",
      );
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
    this.#log(`committed ${scope.length} episodes in flight: ${recordCounts(good)}`);
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
        const reward = outcome.body?.result?.reward;
        if (outcome.status !== 200 || reward !== 1) {
          this.#finding(
            `rollout fuzz-r${i} after the corrupted restores → HTTP ${outcome.status}, reward ${String(reward)}`,
            JSON.stringify(outcome.body).slice(0, 300),
            corruptions.length === 1 ? `corrupt:${corruptions[0]?.name}` : "corrupt",
          );
        }
      });
    } catch (error) {
      this.#finding(
        "the good checkpoint no longer restores after corrupted ones",
        String(error).slice(0, 500),
        corruptions.length === 1 ? `corrupt:${corruptions[0]?.name}` : "corrupt",
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
    // Participants are independent: each takes its corrupted restores, one after another, while
    // the others take theirs.
    const one = async (member: Member) => {
      const own = dirs.find((d) => d.instance === member.name);
      if (own === undefined) return;
      const other = dirs.find((d) => d.instance !== member.name) ?? null;
      for (const corruption of corruptions) {
        const copy = path.join(this.#dir, "checkpoints", `corrupt-${into}-${++n}`);
        cpSync(good, copy, { recursive: true });
        const applied = await corruption.apply({ checkpointDir: copy, ...own, other });
        if (!applied) continue;
        this.#corruptedRestores++;
        const before = await statusOf(this.#members, member.name);
        const res = await control(this.#run.url(member.name), this.#run.token, "restore", {
          checkpoint_id: `fuzz-corrupt-${into}-${n}`,
          deadline_ts: deadline(15),
          checkpoint_dir: copy,
          episode_ids: scope,
        });
        this.#count(res.status);
        if (this.#options.only !== undefined) {
          this.#log(
            `${member.name} (${into}), ${corruption.name}: HTTP ${res.status} ${res.text.slice(0, 300)}`,
          );
        }
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
    };
    await Promise.all(this.#members.members.map(one));
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
      if (health !== 200) this.#finding(`${member.name} /health → ${health} at the end`, "");
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
        this.#finding(`${member.name} not idle at the end`, JSON.stringify(reply).slice(0, 400));
      }
    }
  }
}

/** Whether a case goes to a control route (however its path is spelt). */
function isControl(fuzzCase: FuzzCase): boolean {
  return /\/ng-control\//i.test(fuzzCase.path);
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
 * What a refused restore changed in a participant's status (null: nothing): its phase or ID,
 * a count that grew, or a participant-specific field. Retiring is allowed: a restore marks its
 * scope retired before it reads anything, which stops the scope's live work in a running server
 * (retired counts grow, blockers appear while it stops).
 */
function installed(before: StatusReply | null, after: StatusReply | null): string | null {
  if (before === null || after === null) return "no status";
  if (after.phase !== before.phase || after.checkpoint_id !== before.checkpoint_id) {
    return `phase ${before.phase} → ${after.phase}, checkpoint ${after.checkpoint_id}`;
  }
  for (const [key, count] of Object.entries(after.report.counts)) {
    if (count > (before.report.counts[key] ?? 0)) {
      return `count ${key}: ${before.report.counts[key]} → ${count}`;
    }
  }
  const core = new Set([
    "kind",
    "instance",
    "phase",
    "checkpoint_id",
    "lease_expires_at",
    "report",
    "now", // the server's clock at the reply
  ]);
  for (const key of Object.keys(after)) {
    if (core.has(key) || key.includes("retired")) continue;
    const a = JSON.stringify((before as Record<string, unknown>)[key]);
    const b = JSON.stringify((after as Record<string, unknown>)[key]);
    if (a !== b) return `${key}: ${a?.slice(0, 150)} → ${b?.slice(0, 150)}`;
  }
  return null;
}

/** The well-formed `episode_ids` of a fuzzed control body, whatever its encoding ([] if none). */
function scopeOf(fuzzCase: FuzzCase): { rollout_id: string; attempt: number }[] {
  try {
    const encoding = fuzzCase.headers["content-encoding"];
    const raw = fuzzCase.body ?? Buffer.alloc(0);
    const bytes =
      encoding === "gzip"
        ? gunzipSync(raw)
        : encoding === "deflate"
          ? inflateSync(raw)
          : encoding === "br"
            ? brotliDecompressSync(raw)
            : raw;
    const body = JSON.parse(bytes.toString("utf8")) as { episode_ids?: unknown };
    if (!Array.isArray(body.episode_ids)) return [];
    return body.episode_ids.filter(
      (e): e is { rollout_id: string; attempt: number } =>
        typeof e === "object" &&
        e !== null &&
        typeof (e as { rollout_id?: unknown }).rollout_id === "string" &&
        Number.isSafeInteger((e as { attempt?: unknown }).attempt),
    );
  } catch {
    return [];
  }
}

/** How many records each participant wrote into a checkpoint, as its manifest says. */
function recordCounts(checkpointDir: string): string {
  const root = path.join(checkpointDir, "gym");
  return readdirSync(root)
    .flatMap((kind) =>
      readdirSync(path.join(root, kind)).map((instance) => {
        const manifest = JSON.parse(
          readFileSync(path.join(root, kind, instance, "manifest.json"), "utf8"),
        ) as { record_count: number };
        return `${instance} ${manifest.record_count}`;
      }),
    )
    .join(", ");
}

/** Sends one control request by hand, so a 5xx or a hang is seen as it is. */
async function control(
  base: string,
  token: string,
  route: string,
  body: unknown,
): Promise<{ status: number; text: string }> {
  try {
    const res = await fetch(`${base}/ng-control/v1/checkpoint/${route}`, {
      method: "POST",
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
      body: JSON.stringify(body),
      signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
    });
    return { status: res.status, text: await res.text() };
  } catch (error) {
    return { status: 0, text: String(error) };
  }
}

/** A server using more than this share of a core while nothing is asked of it is busy. */
const BUSY_SHARE = 0.3;

/**
 * The servers (by name) that use more than {@link BUSY_SHARE} of a core over two seconds in
 * which nothing is asked of them, with their share: work left running after its reply.
 */
async function busyServers(stateFile: string): Promise<Map<string, number>> {
  const servers = stateServers(stateFile).filter((s) => s.kind !== "backend");
  const ticks = () => servers.map((s) => cpuTicks(s.pid));
  const windowMs = 2_000;
  const before = ticks();
  // A measurement window, not a wait for an event: idle servers must stay idle through it.
  await new Promise((resolve) => setTimeout(resolve, windowMs));
  const after = ticks();
  const busy = new Map<string, number>();
  servers.forEach((server, i) => {
    const share = ((after[i] ?? 0) - (before[i] ?? 0)) / TICKS_PER_SECOND / (windowMs / 1000);
    if (share > BUSY_SHARE) busy.set(server.name, share);
  });
  return busy;
}

/** Linux's clock ticks per second for /proc/<pid>/stat (USER_HZ, 100 on every common build). */
const TICKS_PER_SECOND = 100;

/** User plus system CPU time of a process, in clock ticks (0 when it is gone). */
function cpuTicks(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    // The fields after the command name (which may hold spaces) start after its ")".
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return Number(fields[11]) + Number(fields[12]);
  } catch {
    return 0;
  }
}
