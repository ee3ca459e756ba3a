/**
 * `npm run bench:worker-export`: what a multi-worker commit costs over one process's, for the
 * records alone. One process encodes and writes N agent-sized records itself (the baseline:
 * one process per server); the other receives them as two workers' encoded exports over frame
 * channels and writes those bytes (what a coordinator does; the encoding happens in the same
 * process here, so both sides' CPU is counted). Each run is a fresh process, as a commit usually
 * is the first large write of the process that makes it. Prints CPU (every thread) and wall
 * medians and their ratio.
 *
 * `--records N` (default 8000), `--runs R` (default 5).
 */
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { connect, createServer } from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { Command } from "commander";
import { decodeExport, encodeExport } from "#sdk/workers/encoded-export.js";
import { FrameChannel } from "#sdk/workers/frame-channel.js";
import { episodeId } from "#sdk/identity/episode-id.js";
import { RecordsWriter } from "#sdk/store/records-writer.js";
import type { RecordBase } from "#sdk/wire/storage.js";
import { median } from "./median.js";

const options = new Command("bench:worker-export")
  .option("--records <n>", "records per commit", (v) => Number.parseInt(v, 10), 8000)
  .option("--runs <n>", "fresh processes per mode", (v) => Number.parseInt(v, 10), 5)
  .option("--mode <mode>", "(internal) run one commit in this process: direct or channel")
  .parse()
  .opts<{ records: number; runs: number; mode?: "direct" | "channel" }>();

/** Records shaped like the Simple Agent's (about 2.5 KB of turns each). */
function agentRecords(count: number, from: number): RecordBase[] {
  return Array.from({ length: count }, (_, i) => ({
    episode_id: episodeId(`r${from + i}`, 0),
    owner: "w0",
    turns: Array.from({ length: 6 }, (_, t) => ({
      role: t % 2 === 0 ? "user" : "assistant",
      content: `turn ${t} of rollout ${from + i}: `.repeat(16),
      n: t,
    })),
  })) as unknown as RecordBase[];
}

/** One commit in this process; prints `{cpuMs, wallMs, bytes}`. */
async function once(mode: "direct" | "channel"): Promise<void> {
  const dir = mkdtempSync(path.join(tmpdir(), "gym-worker-export-"));
  const half = Math.floor(options.records / 2);
  const shares = [agentRecords(half, 0), agentRecords(options.records - half, half)];
  const target = { checkpointDir: dir, kind: "agent" as const, instance: "a", checkpointId: "c" };
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  let records: RecordBase[];
  const cleanups: (() => void)[] = [];
  if (mode === "direct") {
    records = shares.flat();
  } else {
    const file = path.join(dir, "s.sock");
    let served = 0;
    const server = createServer(
      (socket) => new FrameChannel(socket, () => encodeExport(shares[served++ % 2]!)),
    );
    await new Promise<void>((resolve) => server.listen(file, resolve));
    const channels = await Promise.all(
      shares.map(async () => {
        const socket = connect(file);
        await new Promise<void>((resolve) => socket.once("connect", resolve));
        return new FrameChannel(socket, () => null);
      }),
    );
    cleanups.push(() => {
      for (const channel of channels) channel.close();
      server.close();
    });
    const parts = await Promise.all(channels.map((channel) => channel.call("export")));
    records = parts.flatMap((part) => decodeExport(part));
  }
  const writer = new RecordsWriter(target);
  await writer.write(records);
  const wallMs = performance.now() - t0;
  const used = process.cpuUsage(cpu0);
  for (const cleanup of cleanups) cleanup();
  rmSync(dir, { recursive: true, force: true });
  process.stdout.write(
    JSON.stringify({ cpuMs: (used.user + used.system) / 1000, wallMs, bytes: writer.bytesWritten }),
  );
}

function run(mode: "direct" | "channel"): { cpuMs: number; wallMs: number; bytes: number } {
  const self = fileURLToPath(import.meta.url);
  const child = spawnSync(
    process.execPath,
    [...process.execArgv, self, "--mode", mode, "--records", String(options.records)],
    { encoding: "utf8" },
  );
  if (child.status !== 0) throw new Error(`${mode} run failed:\n${child.stderr}`);
  return JSON.parse(child.stdout) as { cpuMs: number; wallMs: number; bytes: number };
}

if (options.mode !== undefined) {
  await once(options.mode);
} else {
  const figures = { direct: [] as number[][], channel: [] as number[][] };
  let bytes = 0;
  for (let i = 0; i < options.runs; i++) {
    for (const mode of ["direct", "channel"] as const) {
      const result = run(mode);
      figures[mode].push([result.cpuMs, result.wallMs]);
      bytes = result.bytes;
    }
  }
  const cpu = (mode: "direct" | "channel"): number => median(figures[mode].map(([c]) => c!));
  const wall = (mode: "direct" | "channel"): number => median(figures[mode].map(([, w]) => w!));
  const rows: [string, string][] = [
    ["records", String(options.records)],
    ["records file (MB)", (bytes / 1e6).toFixed(1)],
    ["fresh processes per mode", String(options.runs)],
    ["one process: CPU / wall (ms)", `${cpu("direct").toFixed(0)} / ${wall("direct").toFixed(0)}`],
    [
      "two workers' exports: CPU / wall (ms)",
      `${cpu("channel").toFixed(0)} / ${wall("channel").toFixed(0)}`,
    ],
    ["CPU ratio (workers / one process)", `${(cpu("channel") / cpu("direct")).toFixed(2)}x`],
  ];
  const width = Math.max(...rows.map(([k]) => k.length));
  for (const [k, v] of rows) process.stdout.write(`${k.padEnd(width)}  ${v}\n`);
}
