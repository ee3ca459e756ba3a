/**
 * The policy model's share of a commit and a restore, in this process, without servers: N
 * episodes of R ledger rows each (shaped like the capture middleware's) in a temporary ledger
 * directory. Measures the process's CPU time (user + system, all threads) of the export of every
 * episode with a warm row cache (alone in the directory, then with another writer registered, which
 * makes every read stat its file), of `commitReply`, of `install` (the ledger import) of the
 * decoded records into a fresh participant, of settling the files that import deferred, and of
 * the first export after that restore. Prints the median and range of several runs; asserts
 * nothing. Cheaper and steadier than `bench:scale` for changes to the ledger or the participant.
 *
 *   npm run bench:ledger-phases -- [--episodes 8000 --rows 5 --runs 5]
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { CaptureLedger } from "#sdk/capture/ledger/capture-ledger.js";
import { encodeRowLine } from "#sdk/capture/ledger/row-codec.js";
import { captureKey, episodeId, type EpisodeId } from "#sdk/identity/episode-id.js";
import { encodeJson } from "#sdk/json/json-value.js";
import { decodeJson } from "#sdk/json/json-decode.js";
import { PolicyParticipant, type ModelRecord } from "#sdk/participants/model/policy-participant.js";

function arg(name: string, fallback: number): number {
  const at = process.argv.indexOf(`--${name}`);
  return at === -1 ? fallback : Number(process.argv[at + 1]);
}

const EPISODES = arg("episodes", 8000);
const ROWS = arg("rows", 5);
const RUNS = arg("runs", 5);
const NOTHING_UNDELIVERED = [{ undelivered: [], cuts: [], claimed: [] }];

function row(key: string, j: number): Record<string, unknown> {
  return {
    model_call_id: `${key}-call-${j}`,
    parent_call_id: j === 0 ? null : `${key}-call-${j - 1}`,
    prev_len: 120 * j,
    delta_len: 80,
    cum_len: 200 * j,
    weight_version: "w-17",
    staging_digest: "ab".repeat(32),
    extras_digest: "cd".repeat(32),
    staging_key: `${key}/call-${j}`,
    mode: "token_in",
    chain_hash: "ef".repeat(32),
    cumulative_hash: "01".repeat(32),
    response_id: `resp_${key}_${j}`,
    admitted_at: 1_733_400_000.125 + j,
    output_fingerprint: "fp".repeat(16),
    continuation_fingerprint: null,
    fingerprint_version: 1,
    digest: "99".repeat(32),
  };
}

/** CPU milliseconds of this process so far. */
function cpuMs(): number {
  const { user, system } = process.cpuUsage();
  return (user + system) / 1000;
}

const figures = new Map<string, number[]>();

async function measure<T>(name: string, fn: () => T | Promise<T>): Promise<T> {
  const start = cpuMs();
  const result = await fn();
  const list = figures.get(name) ?? [];
  list.push(cpuMs() - start);
  figures.set(name, list);
  return result;
}

async function run(): Promise<void> {
  const dirs = [0, 1].map(() => mkdtempSync(path.join(os.tmpdir(), "ledger-phases-")));
  const [liveDir, restoredDir] = dirs as [string, string];
  try {
    const episodes = Array.from({ length: EPISODES }, (_, i) => episodeId(`rollout-${i}`, 0));
    for (const e of episodes) {
      const key = captureKey(e);
      const lines = Array.from({ length: ROWS }, (_, j) => encodeRowLine(key, row(key, j)));
      writeFileSync(path.join(liveDir, `${key}.lineage.jsonl`), lines.join(""));
    }
    const liveLedger = new CaptureLedger(liveDir);
    const live = new PolicyParticipant({ ledger: liveLedger });
    // A live server has changed its directory (its first row registered it as a writer), and
    // its cache holds every ledger it appended to.
    await liveLedger.record("warm-up", row("warm-up", 0) as never);
    await live.exportFrom(episodes, NOTHING_UNDELIVERED, live.restoredCuts);
    const records = await measure("export (warm cache)", () =>
      live.exportFrom(episodes, NOTHING_UNDELIVERED, live.restoredCuts),
    );
    // The same with another writer registered (a worker, a server sharing the directory):
    // every ledger is statted before its cached rows are used.
    const other = new CaptureLedger(liveDir);
    await other.record("other-writer", row("other-writer", 0) as never);
    await measure("export (warm, other writer)", () =>
      live.exportFrom(episodes, NOTHING_UNDELIVERED, live.restoredCuts),
    );
    await measure("commitReply", () => live.commitReply(records));

    // As a restore hands them over: decoded from the stored text.
    const decoded = records.map((r) => {
      const value = decodeJson(encodeJson(r)) as unknown as ModelRecord;
      return { ...value, episode_id: r.episode_id as EpisodeId };
    });
    const fresh = new PolicyParticipant({ ledger: new CaptureLedger(restoredDir) });
    await measure("install (import)", () => fresh.install(decoded, episodes));
    await measure("settle deferred files", () => fresh.ledger?.settleDeferred());
    const targets = episodes.map((e) => episodeId(e.rollout_id, 1));
    const again = await measure("first export after restore", () =>
      fresh.exportFrom(targets, NOTHING_UNDELIVERED, fresh.restoredCuts),
    );
    if (again.length !== EPISODES) throw new Error(`exported ${again.length} of ${EPISODES}`);
  } finally {
    for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
  }
}

for (let i = 0; i < RUNS; i++) await run();
process.stdout.write(`${EPISODES} episodes x ${ROWS} rows, ${RUNS} runs, CPU ms:\n`);
for (const [name, list] of figures) {
  const sorted = [...list].sort((a, b) => a - b);
  const median = sorted[Math.floor(sorted.length / 2)] as number;
  const range = `${(sorted[0] as number).toFixed(0)}–${(sorted.at(-1) as number).toFixed(0)}`;
  process.stdout.write(`  ${name.padEnd(28)} ${median.toFixed(0).padStart(6)}  (${range})\n`);
}
