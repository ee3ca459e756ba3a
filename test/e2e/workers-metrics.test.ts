/**
 * A multi-worker server's `/metrics` under the real `gym serve`: whichever worker takes the
 * scrape, it shows the whole server (the coordinator, where checkpoint operations run and the
 * participant's phase lives, and every worker, where requests are served), each sample labelled
 * with its process, each metric family once.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { request } from "node:http";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { killEverything, stateServers } from "./helpers.js";
import { childPids, CounterDeployment, postFresh } from "./workers-harness.js";

const SESSIONS = 12;
const dirs: string[] = [];

afterAll(async () => {
  for (const dir of dirs) {
    await killEverything(dir, [path.join(dir, "run.json")]);
    rmSync(dir, { recursive: true, force: true });
  }
});

/** GETs a path over a connection of its own, so consecutive scrapes may reach other workers. */
async function getFresh(
  url: string,
  timeoutMs = 60_000,
): Promise<{ status: number; text: string }> {
  return await new Promise((resolve, reject) => {
    const req = request(url, { agent: false, timeout: timeoutMs }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (chunk: Buffer) => chunks.push(chunk));
      res.on("end", () =>
        resolve({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString("utf8") }),
      );
    });
    req.on("error", reject);
    req.on("timeout", () => req.destroy(new Error(`no answer in ${timeoutMs} ms`)));
    req.end();
  });
}

interface Sample {
  readonly name: string;
  readonly labels: Record<string, string>;
  readonly value: number;
}

/** The samples of a Prometheus exposition (label values here hold no escaped quotes). */
function samplesOf(text: string): Sample[] {
  const samples: Sample[] = [];
  for (const line of text.split("\n")) {
    if (line === "" || line.startsWith("#")) continue;
    const match = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})? (\S+)/.exec(line);
    if (match === null) throw new Error(`not a sample line: ${line}`);
    const labels: Record<string, string> = {};
    for (const pair of (match[2] ?? "").matchAll(/(\w+)="([^"]*)"/g)) labels[pair[1]!] = pair[2]!;
    samples.push({ name: match[1]!, labels, value: Number(match[3]) });
  }
  return samples;
}

describe("a counter with 2 workers", { timeout: 180_000 }, () => {
  it("answers every scrape with the coordinator's and every worker's metrics", async () => {
    const dir = mkdtempSync(path.join(tmpdir(), "gym-workers-metrics-"));
    dirs.push(dir);
    const run = new CounterDeployment(dir);
    await run.serve(2);

    for (let i = 0; i < SESSIONS; i++) {
      const reply = await postFresh(run.url, `/ng-rollout/m${i}/seed_session`, {
        episode_id: { rollout_id: `m${i}`, attempt: 0 },
        task_data: { target: 1 },
      });
      expect(reply.status).toBe(200);
    }
    const prepared = await run.control("prepare", {
      checkpoint_id: "metrics-1",
      deadline_ts: Date.now() / 1000 + 30,
    });
    expect(prepared.status).toBe(200);

    // Over fresh connections, so the scrapes are spread over both workers.
    for (let scrape = 0; scrape < 4; scrape++) {
      const { status, text } = await getFresh(`${run.url}/metrics`);
      expect(status).toBe(200);
      const samples = samplesOf(text);
      const workers = new Set(samples.map((sample) => sample.labels.worker));
      expect(workers).toEqual(new Set(["coordinator", "0", "1"]));

      // Each family once: one TYPE line per name.
      const types = text.split("\n").filter((line) => line.startsWith("# TYPE "));
      expect(new Set(types).size).toBe(types.length);
      const seedTypes = types.filter((line) => line.startsWith("# TYPE http_server_request"));
      expect(seedTypes.length).toBeGreaterThan(0);

      // Every seed is counted once, by the worker that served it.
      const seeds = samples.filter(
        (sample) =>
          sample.name === "http_server_request_duration_seconds_count" &&
          (sample.labels.http_route ?? "").includes("seed_session") &&
          sample.labels.worker !== "coordinator",
      );
      expect(seeds.reduce((sum, sample) => sum + sample.value, 0)).toBe(SESSIONS);

      // The phase is the coordinator's: its participant answered the prepare.
      const prepared = samples.find(
        (sample) =>
          sample.name === "gym_participant_phase" &&
          sample.labels.phase === "prepared" &&
          sample.labels.worker === "coordinator",
      );
      expect(prepared?.value).toBe(1);
      expect(
        samples.filter(
          (sample) => sample.name === "gym_participant_phase" && sample.labels.phase === "idle",
        ),
      ).toEqual([expect.objectContaining({ value: 0 })]);
      const prepares = samples.find(
        (sample) =>
          sample.name === "gym_checkpoint_operation_duration_seconds_count" &&
          sample.labels.operation === "prepare" &&
          sample.labels.outcome === "ok",
      );
      expect(prepares).toMatchObject({ value: 1, labels: { worker: "coordinator" } });
    }
    // A worker that stops answering (SIGSTOP) is left out of scrapes after a bounded wait
    // instead of hanging them: a scrape taken by the other worker still answers.
    const coordinator = stateServers(run.stateFile)[0]?.pid ?? -1;
    const [stuck] = childPids(coordinator);
    expect(stuck).toBeDefined();
    process.kill(stuck!, "SIGSTOP");
    try {
      let answered: Set<string | undefined> | null = null;
      // A connection handed to the stopped worker is never answered; others are, within the
      // coordinator's 5 s wait for the stuck worker.
      for (let attempt = 0; attempt < 8 && answered === null; attempt++) {
        const reply = await getFresh(`${run.url}/metrics`, 15_000).catch(() => null);
        if (reply === null) continue;
        expect(reply.status).toBe(200);
        answered = new Set(samplesOf(reply.text).map((sample) => sample.labels.worker));
      }
      expect(answered).not.toBeNull();
      expect(answered!.size).toBe(2);
      expect(answered!.has("coordinator")).toBe(true);
    } finally {
      process.kill(stuck!, "SIGCONT");
    }

    const resumed = await run.control("resume", {
      checkpoint_id: "metrics-1",
      deadline_ts: Date.now() / 1000 + 30,
    });
    expect(resumed.status).toBe(200);
    await run.stop();
  });
});
