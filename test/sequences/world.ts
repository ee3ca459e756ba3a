/**
 * The world the random crash sequences share: one run of the reference deployment in real
 * processes, whose Gym servers a sequence kills (every process group, `SIGKILL`) and starts
 * again, optionally with failpoints armed in all or some of them so the next commit or restore
 * dies at an exact step.
 */
import { readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";
import type { Participants } from "#sdk/client/coordination.js";
import { FAILPOINTS_ENV } from "#sdk/util/failpoints.js";
import { CrashRun } from "../e2e/crash-harness.js";

/**
 * The lease grace of the sequences' deployment: a participant left prepared resumes on its own
 * this long after the last control call's deadline. Short, so a sequence can let it expire.
 */
export const LEASE_GRACE_SECONDS = 1;

/** The prefix of the variable that arms failpoints in one server: `<prefix><server name>`. */
const SERVER_FAILPOINTS_ENV = "GYM_SEQUENCES_FAILPOINTS_";

/**
 * Preloaded into every server (`node --import`): `GYM_FAILPOINTS` is one value for a whole
 * `gym serve`, so a server named in its own variable gets that value instead, before the SDK's
 * failpoints module reads it.
 */
const ARM_ONE_SERVER = `
const at = process.argv.indexOf("--name");
const own = at < 0 ? undefined : process.env["${SERVER_FAILPOINTS_ENV}" + process.argv[at + 1]];
if (own !== undefined) process.env.${FAILPOINTS_ENV} = own;
`;

/** Which failpoints to arm in the fresh processes, and in which servers (default: all). */
export interface Arming {
  /** A `GYM_FAILPOINTS` value. */
  readonly failpoints: string;
  readonly servers?: readonly string[];
}
/** The deployment every sequence plays against, and how to crash it. */
export class SequenceWorld {
  readonly run: CrashRun;
  /** The participants of the running processes (discovered again after each restart). */
  participants!: Participants;
  /** The failpoints armed in the running processes, or null. */
  armed: Arming | null = null;
  #ids = 0;

  /** `compiled`: the built CLI and servers, which start about twice as fast (see CrashRun). */
  constructor(
    readonly dir: string,
    options: { compiled?: boolean } = {},
  ) {
    this.run = new CrashRun(dir, "deployment.yaml", options);
    const file = this.run.deploymentFile;
    const text = readFileSync(file, "utf8");
    const preload = path.join(dir, "arm-one-server.mjs");
    writeFileSync(preload, ARM_ONE_SERVER);
    const edited = text
      .replace(/^checkpoint:\n/m, `checkpoint:\n  lease_grace_seconds: ${LEASE_GRACE_SECONDS}\n`)
      .replace(
        "node_args: &node_args [",
        `node_args: &node_args ["--import=${pathToFileURL(preload).href}", `,
      );
    if (!edited.includes("lease_grace_seconds") || !edited.includes(preload)) {
      throw new Error(`${file} has no checkpoint: block or no shared node_args anchor`);
    }
    writeFileSync(file, edited);
    // Failpoints are armed only where a sequence asks for them, never inherited.
    delete this.run.env[FAILPOINTS_ENV];
  }

  async start(): Promise<void> {
    await this.run.serve();
    this.participants = await this.run.participants();
  }

  async stop(): Promise<void> {
    await this.run.cleanup();
  }

  /**
   * `SIGKILL` of every Gym process group, then fresh processes (the backend lives on), with
   * failpoints armed in all or some of them, or none.
   */
  async crashAndServe(arming: Arming | null = null): Promise<void> {
    await this.run.crash();
    this.armed = arming;
    const names =
      arming?.servers === undefined
        ? [FAILPOINTS_ENV]
        : arming.servers.map((server) => `${SERVER_FAILPOINTS_ENV}${server}`);
    if (arming !== null) for (const name of names) this.run.env[name] = arming.failpoints;
    try {
      await this.run.serve({ afterCrash: true });
    } finally {
      for (const name of names) delete this.run.env[name];
    }
    this.participants = await this.run.participants();
  }

  /** A control ID no earlier call of this world used (`what` and the seed, for the logs). */
  nextId(seed: number, what: string): string {
    return `s${seed}-${what}${++this.#ids}`;
  }
}
