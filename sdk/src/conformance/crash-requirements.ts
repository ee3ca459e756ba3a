/**
 * The crash profile: what a restore in a fresh process does (docs/control-plane.md, docs/
 * storage.md). Each check commits, kills the server (SIGKILL of its process group) and starts
 * it again, so it needs `--launch`; without it each is skipped, saying so.
 */
import { createHash } from "node:crypto";
import { readFile, rename, rm, writeFile, cp } from "node:fs/promises";
import path from "node:path";
import { MANIFEST_FILE, participantDir, recordsFileName } from "../store/paths.js";
import { body, expectOk, expectPhase, expectRefusal, statusOf, withPrepared } from "./expect.js";
import {
  attemptRequest,
  exportsSessions,
  startSession,
  type StartedSession,
} from "./kind-probes.js";
import {
  PASS,
  everyServer,
  expectThat,
  skip,
  type CheckContext,
  type Outcome,
  type Requirement,
} from "./requirement.js";
import { expectCommitWritten } from "./storage-checks.js";
import { describeReply } from "./target.js";

const NEEDS_LAUNCH =
  'needs --launch "<command>": the kit kills and restarts the server for this requirement';

/** What a check committed before the crash. */
interface Committed {
  readonly checkpointId: string;
  readonly dir: string;
  readonly sessions: readonly StartedSession[];
  readonly scope: readonly { rollout_id: string; attempt: number }[];
}

/** Starts `count` exported sessions (none when the server exports none) and commits them. */
async function commitSessions(context: CheckContext, count: number): Promise<Committed> {
  const sessions: StartedSession[] = [];
  if (exportsSessions(context) === null) {
    for (let i = 0; i < count; i++) sessions.push(await startSession(context, context.rolloutId()));
  }
  const scope = sessions.map((s) => ({ rollout_id: s.rollout, attempt: 0 }));
  const dir = await context.checkpointDir();
  const checkpointId = await withPrepared(context, async (id) => {
    const records = await expectCommitWritten(context, id, dir, scope);
    expectThat(
      records.length === sessions.length,
      `the commit of ${sessions.length} session(s) wrote ${records.length} record(s)`,
    );
    return id;
  });
  return { checkpointId, dir, sessions, scope };
}

/** Restores `from` (scope of the commit, or `scope`) with a fresh ID; returns the reply. */
async function restore(
  context: CheckContext,
  dir: string,
  scope: readonly { rollout_id: string; attempt: number }[],
) {
  const id = context.checkpointId();
  const reply = await context.target.control(
    "restore",
    body(context, id, { checkpoint_dir: dir, episode_ids: scope }),
  );
  return { id, reply };
}

/** Fails unless a restore of `committed` succeeds (phase restored, the replacements listed), then resumes. */
async function expectRestored(
  context: CheckContext,
  committed: Committed,
  dir = committed.dir,
): Promise<void> {
  const { id, reply } = await restore(context, dir, committed.scope);
  const restored = expectOk(reply, "restore in the fresh process");
  const replacements = committed.sessions.map((s) => `${s.rollout}-a1`).sort();
  expectThat(
    restored.phase === "restored" &&
      restored.source_checkpoint_id === committed.checkpointId &&
      JSON.stringify(restored.restored) === JSON.stringify(replacements),
    () =>
      `restore answered ${JSON.stringify(restored).slice(0, 300)}, expected phase restored from '${committed.checkpointId}' with restored ${JSON.stringify(replacements)}`,
  );
  await expectPhase(context, "restored", "after the restore", id);
  expectOk(await context.target.control("resume", body(context, id)), "resume after the restore");
}

/** Retires the next attempts of `sessions` and forgets their rollouts. */
async function cleanUp(
  context: CheckContext,
  sessions: readonly { readonly rollout: string }[],
  attempt: number,
): Promise<void> {
  if (sessions.length === 0) return;
  await context.target
    .control(
      "retire",
      body(context, context.checkpointId(), {
        episode_ids: sessions.map((s) => ({ rollout_id: s.rollout, attempt })),
      }),
    )
    .catch(() => undefined);
  await context.target
    .control(
      "forget",
      body(context, context.checkpointId(), { rollout_ids: sessions.map((s) => s.rollout) }),
    )
    .catch(() => undefined);
}

/** Runs `check` only when the kit can restart the server. */
function crashCheck(
  check: (context: CheckContext, restart: () => Promise<void>) => Promise<Outcome>,
): (context: CheckContext) => Promise<Outcome> {
  return async (context) =>
    context.restart === null ? skip(NEEDS_LAUNCH) : await check(context, context.restart);
}

const freshProcess: Requirement = {
  id: "crash.restore.fresh-process",
  title:
    "after a crash, a fresh process restores the last commit (phase restored, its replacements listed) and its sessions continue as the next attempt",
  docs: "docs/control-plane.md#operations",
  appliesTo: everyServer,
  check: crashCheck(async (context, restart) => {
    const committed = await commitSessions(context, 1);
    try {
      await restart();
      await expectPhase(context, "idle", "the fresh process", null);
      await expectRestored(context, committed);
      const tool = context.profile.kind === "resources" ? await context.tool() : null;
      for (const session of tool === null ? [] : committed.sessions) {
        const reply = await context.target.data(tool?.path ?? "", tool?.body, {
          rollout: `${session.rollout}-a1`,
          jar: session.jar,
        });
        expectThat(
          reply.status >= 200 && reply.status < 300,
          () =>
            `a tool call of the restored session under ${session.rollout}-a1 answered ${describeReply(reply)}`,
        );
      }
    } finally {
      await cleanUp(context, committed.sessions, 1);
    }
    return PASS;
  }),
};

const staleAfterRestore: Requirement = {
  id: "crash.fencing.stale-after-restore",
  title:
    "after a restore, the crashed attempts are retired: their late requests are 409 stale_attempt",
  docs: "docs/control-plane.md#fencing",
  appliesTo: everyServer,
  check: crashCheck(async (context, restart) => {
    const committed = await commitSessions(context, 1);
    // A server exporting nothing still gets a scope: the restore marks it all the same.
    const rollout = committed.sessions[0]?.rollout ?? context.rolloutId();
    const scope = [{ rollout_id: rollout, attempt: 0 }];
    try {
      await restart();
      const { id, reply } = await restore(context, committed.dir, scope);
      expectOk(reply, "restore in the fresh process");
      expectOk(await context.target.control("resume", body(context, id)), "resume");
      const marked = (await statusOf(context)).retired_rollouts;
      expectThat(
        marked === 1,
        `after a restore of one rollout the fresh process reports retired_rollouts ${String(marked)}, expected 1`,
      );
      expectRefusal(
        await attemptRequest(context, rollout),
        409,
        "stale_attempt",
        `a late request of the crashed attempt ${rollout}`,
      );
    } finally {
      await cleanUp(context, [{ rollout }], 1);
    }
    return PASS;
  }),
};

const sha256 = (text: string): string => createHash("sha256").update(text).digest("hex");

/**
 * Makes the last record of a committed checkpoint invalid for its participant (each string
 * field other than `episode_id` becomes a number) and rewrites the records file and manifest so
 * digest and count still match: only the record's validation can refuse it.
 */
async function spoilLastRecord(context: CheckContext, dir: string): Promise<void> {
  const { kind, instance } = context.profile;
  const here = participantDir({ checkpointDir: dir, kind, instance });
  const manifest = JSON.parse(await readFile(path.join(here, MANIFEST_FILE), "utf8")) as Record<
    string,
    unknown
  >;
  const oldFile = path.join(here, String(manifest.records_file));
  const lines = (await readFile(oldFile, "utf8")).split("\n").filter((line) => line !== "");
  const last = JSON.parse(lines.at(-1) ?? "{}") as Record<string, unknown>;
  for (const [key, value] of Object.entries(last)) {
    if (key !== "episode_id" && typeof value === "string") last[key] = 7;
  }
  lines[lines.length - 1] = JSON.stringify(last);
  const text = `${lines.join("\n")}\n`;
  const digest = sha256(text);
  await rm(oldFile);
  await writeFile(path.join(here, recordsFileName(digest)), text);
  const rewritten = { ...manifest, records_file: recordsFileName(digest), records_sha256: digest };
  await writeFile(path.join(here, `${MANIFEST_FILE}.tmp`), JSON.stringify(rewritten));
  await rename(path.join(here, `${MANIFEST_FILE}.tmp`), path.join(here, MANIFEST_FILE));
}

const allOrNothing: Requirement = {
  id: "crash.restore.all-or-nothing",
  title:
    "a restore refused for one invalid record installs none of the others, and still fences the crashed attempts",
  docs: "docs/storage.md#read-restore",
  appliesTo: everyServer,
  check: crashCheck(async (context, restart) => {
    const notExported = exportsSessions(context);
    if (notExported !== null) return skip(notExported);
    const committed = await commitSessions(context, 2);
    try {
      await restart();
      await spoilLastRecord(context, committed.dir);
      const { reply } = await restore(context, committed.dir, committed.scope);
      expectRefusal(reply, 422, "invalid_checkpoint_state", "a restore with one invalid record");
      await expectPhase(context, "idle", "after the refused restore", null);
      for (const session of committed.sessions) {
        expectRefusal(
          await attemptRequest(context, session.rollout),
          409,
          "stale_attempt",
          `after the refused restore, a request of the crashed attempt ${session.rollout}`,
        );
      }
      // Nothing was installed: a commit naming the replacements finds no session to export.
      await withPrepared(context, async (id) => {
        const dir = await context.checkpointDir();
        const records = await expectCommitWritten(
          context,
          id,
          dir,
          committed.sessions.map((s) => ({ rollout_id: s.rollout, attempt: 1 })),
        );
        expectThat(
          records.length === 0,
          () =>
            `the refused restore left ${records.length} session(s) installed: a commit exported ${records.map((r) => JSON.stringify(r.episode_id)).join(", ")}`,
        );
      });
    } finally {
      await cleanUp(context, committed.sessions, 1);
    }
    return PASS;
  }),
};

const corruptThenGood: Requirement = {
  id: "crash.restore.corrupt-then-good",
  title:
    "in a fresh process, a restore from a tampered copy is 422 and records nothing: the restore from the good checkpoint then succeeds",
  docs: "docs/storage.md#read-restore",
  appliesTo: everyServer,
  check: crashCheck(async (context, restart) => {
    const committed = await commitSessions(context, 1);
    try {
      await restart();
      const copy = `${committed.dir}-tampered`;
      await cp(committed.dir, copy, { recursive: true });
      const { kind, instance } = context.profile;
      const here = participantDir({ checkpointDir: copy, kind, instance });
      const manifest = JSON.parse(await readFile(path.join(here, MANIFEST_FILE), "utf8")) as {
        records_file: string;
      };
      // One line more than the manifest's digest and count cover.
      const extra = `${JSON.stringify({ episode_id: { rollout_id: "conformance-extra", attempt: 0 } })}\n`;
      await writeFile(path.join(here, manifest.records_file), extra, { flag: "a" });
      const { reply } = await restore(context, copy, committed.scope);
      expectRefusal(reply, 422, "invalid_checkpoint_state", "a restore from a tampered copy");
      await expectPhase(context, "idle", "after the refused restore", null);
      await expectRestored(context, committed);
    } finally {
      await cleanUp(context, committed.sessions, 1);
    }
    return PASS;
  }),
};

/** The crash requirements, in the order they run. */
export const CRASH_REQUIREMENTS: readonly Requirement[] = [
  freshProcess,
  staleAfterRestore,
  allOrNothing,
  corruptThenGood,
];
