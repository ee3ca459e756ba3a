/**
 * Reading back what a commit wrote, with the SDK's own store reader: the directory holds the
 * manifest and one records file, the manifest matches the reply, the records match the
 * manifest's digest and count, and the records file was in place before the manifest appeared
 * (watched as the server writes: the order is observable from outside, the fsyncs are not).
 */
import { watch, type FSWatcher } from "node:fs";
import { mkdir, readFile, readdir } from "node:fs/promises";
import path from "node:path";
import { captureKey } from "../identity/episode-id.js";
import { MANIFEST_FILE, participantDir } from "../store/paths.js";
import { readStoredCheckpoint, type StoredRecord } from "../store/records-reader.js";
import { ManifestSchema } from "../wire/storage.js";
import { body, expectOk } from "./expect.js";
import { CheckFailed, expectThat, type CheckContext } from "./requirement.js";

/** How long the kit waits for the directory events of a write it was answered for, in ms. */
const EVENTS_SETTLE_MS = 2_000;

/** The names a directory watcher saw, in order; null when the directory cannot be watched. */
function watchNames(dir: string): { names: string[]; watcher: FSWatcher | null } {
  const names: string[] = [];
  try {
    const watcher = watch(dir, (_event, name) => {
      if (name !== null) names.push(String(name));
    });
    watcher.on("error", () => undefined);
    return { names, watcher };
  } catch {
    return { names, watcher: null };
  }
}

/** JSON with every object's keys sorted: two manifests compare equal whatever their key order. */
function canonical(value: unknown): string {
  return JSON.stringify(value, (_key, v: unknown) =>
    v !== null && typeof v === "object" && !Array.isArray(v)
      ? Object.fromEntries(Object.entries(v as object).sort(([a], [b]) => (a < b ? -1 : 1)))
      : v,
  );
}

/**
 * Commits `checkpointId` (prepared) into `dir` with `scope` and checks what was written;
 * returns the records read back. Fails the check on the first problem. With `order`, also
 * that the records file was in place before the manifest appeared (one requirement checks
 * the order, so a server writing out of order fails there only).
 */
export async function expectCommitWritten(
  context: CheckContext,
  checkpointId: string,
  dir: string,
  scope: readonly { rollout_id: string; attempt: number }[] | null,
  options: { readonly order?: boolean } = {},
): Promise<StoredRecord[]> {
  const { kind, instance } = context.profile;
  const here = participantDir({ checkpointDir: dir, kind, instance });
  // Made beforehand so it can be watched while the server writes into it.
  await mkdir(here, { recursive: true });
  const { names, watcher } =
    options.order === true ? watchNames(here) : { names: [], watcher: null };
  let records: StoredRecord[];
  let reply: Record<string, unknown>;
  try {
    reply = expectOk(
      await context.target.control(
        "commit",
        body(context, checkpointId, { checkpoint_dir: dir, episode_ids: scope }),
      ),
      "commit",
    );
    const files = (await readdir(here)).sort();
    const recordsFiles = files.filter((name) => name !== MANIFEST_FILE);
    expectThat(
      files.includes(MANIFEST_FILE) && recordsFiles.length === 1,
      `after the commit ${here} holds [${files.join(", ")}], expected exactly manifest.json and one records file`,
    );
    let stored: unknown;
    try {
      stored = JSON.parse(await readFile(path.join(here, MANIFEST_FILE), "utf8"));
    } catch {
      throw new CheckFailed("manifest.json is not JSON");
    }
    const manifest = ManifestSchema.safeParse(stored);
    expectThat(
      manifest.success,
      () => `manifest.json is not a manifest: ${manifest.error?.issues[0]?.message ?? ""}`,
    );
    expectThat(
      manifest.data.kind === kind && manifest.data.instance === instance,
      `manifest.json names ${manifest.data.kind}/${manifest.data.instance}, the status ${kind}/${instance}`,
    );
    expectThat(
      manifest.data.checkpoint_id === checkpointId,
      `manifest.json names checkpoint ${manifest.data.checkpoint_id}, the commit was ${checkpointId}`,
    );
    expectThat(
      manifest.data.records_file === recordsFiles[0],
      `manifest.json names ${manifest.data.records_file}, the directory holds ${recordsFiles[0]}`,
    );
    expectThat(
      canonical(reply.manifest) === canonical(stored),
      "the commit reply's manifest differs from manifest.json",
    );
    try {
      records = (await readStoredCheckpoint({ checkpointDir: dir, kind, instance, scope: null }))
        .records;
    } catch (error) {
      throw new CheckFailed(
        `the store reader refuses what the commit wrote: ${error instanceof Error ? error.message : String(error)}`,
      );
    }
    const keys = [...new Set(records.map((record) => captureKey(record.episode_id)))].sort();
    expectThat(
      canonical(reply.episode_ids) === canonical(keys),
      `the reply's episode_ids ${JSON.stringify(reply.episode_ids)} are not the records' ${JSON.stringify(keys)}`,
    );
    if (watcher !== null) {
      const until = Date.now() + EVENTS_SETTLE_MS;
      while (!names.includes(MANIFEST_FILE) && Date.now() < until) {
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
      const manifestAt = names.indexOf(MANIFEST_FILE);
      const recordsAt = names.indexOf(recordsFiles[0] as string);
      expectThat(
        manifestAt < 0 || (recordsAt >= 0 && recordsAt < manifestAt),
        `manifest.json appeared before ${recordsFiles[0]} was in place (directory events: ${names.slice(0, 8).join(", ")})`,
      );
    }
  } finally {
    watcher?.close();
  }
  return records;
}
