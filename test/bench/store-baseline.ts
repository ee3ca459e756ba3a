/**
 * The store's own cost of a checkpoint, as the baseline of `bench:scale`: for every participant
 * directory of a committed checkpoint, a fresh Node.js process (one at a time, nothing else
 * running) reads, verifies and validates its records with the participant's record schema, then
 * encodes, hashes, writes and fsyncs them again through the records writer. No server, no HTTP,
 * no export hook, no ledger: what is left of a commit or a restore when everything else is free.
 *
 * Run as a module by the benchmark; run as a script (`tsx store-baseline.ts <dir> <kind>
 * <instance>`) it measures one participant and prints one JSON line.
 */
import { execFile } from "node:child_process";
import { mkdtemp, readdir, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import type { z } from "zod";
import { AgentSessionRecordSchema } from "#sdk/participants/agent/agent-records.js";
import { EnvironmentRecordSchema } from "#sdk/participants/environment/environment-participant.js";
import { ModelRecordSchema } from "#sdk/participants/model/policy-participant.js";
import { ResourcesRecordSchema } from "#sdk/participants/resources/resources-participant.js";
import { readCheckpoint } from "#sdk/store/records-reader.js";
import { RecordsWriter } from "#sdk/store/records-writer.js";
import type { RecordBase } from "#sdk/wire/storage.js";

const SCHEMAS: Record<string, z.ZodType<RecordBase>> = {
  agent: AgentSessionRecordSchema as z.ZodType<RecordBase>,
  environment: EnvironmentRecordSchema as z.ZodType<RecordBase>,
  model: ModelRecordSchema as z.ZodType<RecordBase>,
  resources: ResourcesRecordSchema as z.ZodType<RecordBase>,
};

/** One participant's store cost: CPU of every thread of its process, in milliseconds. */
export interface StoreCost {
  readonly participant: string;
  readonly records: number;
  readonly bytes: number;
  readonly readCpuMs: number;
  readonly writeCpuMs: number;
}

function cpuMsSince(start: NodeJS.CpuUsage): number {
  const used = process.cpuUsage(start);
  return (used.user + used.system) / 1000;
}

/** Measures one participant in this process (a fresh one: the caller spawns it). */
async function measureHere(
  checkpointDir: string,
  kind: string,
  instance: string,
): Promise<StoreCost> {
  const recordSchema = SCHEMAS[kind];
  if (recordSchema === undefined) throw new Error(`no record schema for kind ${kind}`);
  const checkpointId = path.basename(checkpointDir);
  let start = process.cpuUsage();
  const { manifest, records } = await readCheckpoint({
    checkpointDir,
    kind: kind as never,
    instance,
    scope: null,
    recordSchema,
  });
  const readCpuMs = cpuMsSince(start);
  const bytes = (await stat(path.join(checkpointDir, "gym", kind, instance, manifest.records_file)))
    .size;
  const out = await mkdtemp(path.join(tmpdir(), "gym-store-baseline-"));
  try {
    start = process.cpuUsage();
    await new RecordsWriter({
      checkpointDir: out,
      kind: kind as never,
      instance,
      checkpointId,
    }).write(records);
    const writeCpuMs = cpuMsSince(start);
    return {
      participant: `${kind}/${instance}`,
      records: records.length,
      bytes,
      readCpuMs,
      writeCpuMs,
    };
  } finally {
    await rm(out, { recursive: true, force: true });
  }
}

/** Every participant of the checkpoint holding records, each measured in a fresh process. */
export async function measureStoreBaseline(checkpointDir: string): Promise<StoreCost[]> {
  const costs: StoreCost[] = [];
  const gym = path.join(checkpointDir, "gym");
  for (const kind of (await readdir(gym)).sort()) {
    for (const instance of (await readdir(path.join(gym, kind))).sort()) {
      const stdout = await new Promise<string>((resolve, reject) => {
        execFile(
          process.execPath,
          ["--import", "tsx", fileURLToPath(import.meta.url), checkpointDir, kind, instance],
          { maxBuffer: 1 << 20 },
          (error, out) => (error === null ? resolve(out) : reject(error)),
        );
      });
      const cost = JSON.parse(stdout.trim().split("\n").at(-1) ?? "null") as StoreCost;
      if (cost.records > 0) costs.push(cost);
    }
  }
  return costs;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const [checkpointDir, kind, instance] = process.argv.slice(2);
  if (checkpointDir === undefined || kind === undefined || instance === undefined) {
    process.stderr.write("usage: tsx store-baseline.ts <checkpoint dir> <kind> <instance>\n");
    process.exit(2);
  }
  process.stdout.write(`${JSON.stringify(await measureHere(checkpointDir, kind, instance))}\n`);
}
