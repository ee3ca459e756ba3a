/**
 * The resources profiles: the session layer and the admission gate as docs/resources-server.md
 * states them, chosen by what the status declares (`mode`: exported, stateless, restart_only;
 * `verify`: wait or replay). Each check seeds its own rollouts and retires and forgets them
 * afterwards, so no session it made outlives it.
 */
import { captureKey } from "../identity/episode-id.js";
import { ResourcesRecordSchema } from "../participants/resources/resources-participant.js";
import { RESTART_HEADER, VERIFY_HEADER } from "../wire/checkpoint-headers.js";
import { body, expectOk, expectPhase, expectRefusal, statusOf, withPrepared } from "./expect.js";
import type { ResourcesMode, ServerProfile } from "./profile.js";
import { PASS, expectThat, skip, type CheckContext, type Requirement } from "./requirement.js";
import { expectCommitWritten } from "./storage-checks.js";
import { CookieJar, describeReply, type Reply } from "./target.js";

/** How long a request must stay unanswered to count as waiting for resume, in ms. */
const WAITING_WINDOW_MS = 500;

function resourcesOnly(profile: ServerProfile): string | null {
  return profile.kind === "resources" ? null : `only resources servers (this is ${profile.kind})`;
}

function inModes(...modes: ResourcesMode[]) {
  return (profile: ServerProfile): string | null => {
    const notResources = resourcesOnly(profile);
    if (notResources !== null) return notResources;
    if (profile.mode === null) return "the status reports no checkpoint mode";
    return modes.includes(profile.mode)
      ? null
      : `only ${modes.join(" or ")} servers (this one is ${profile.mode})`;
  };
}

/** Seeds a session of `key` for `jar`'s client; the seed must succeed. */
async function seed(context: CheckContext, key: string, jar: CookieJar): Promise<Reply> {
  const reply = await context.target.data("/seed_session", context.seedBody, { rollout: key, jar });
  expectThat(
    reply.status >= 200 && reply.status < 300,
    () =>
      `seed of ${key} answered ${describeReply(reply)} (pass the body the server needs with --seed-body)`,
  );
  return reply;
}

/** Retires `attempt` of each rollout and forgets them: the check's sessions are gone after it. */
async function cleanUp(
  context: CheckContext,
  rollouts: readonly string[],
  attempt = 1,
): Promise<void> {
  if (rollouts.length === 0) return;
  const episodes = rollouts.map((rollout_id) => ({ rollout_id, attempt }));
  await context.target
    .control("retire", body(context, context.checkpointId(), { episode_ids: episodes }))
    .catch(() => undefined);
  await context.target
    .control("forget", body(context, context.checkpointId(), { rollout_ids: [...rollouts] }))
    .catch(() => undefined);
}

/** Whether `pending` settles within `ms`: the reply when it does, null when still waiting. */
async function within<T>(pending: Promise<T>, ms: number): Promise<T | null> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<null>((resolve) => {
    timer = setTimeout(() => resolve(null), ms);
  });
  try {
    return await Promise.race([pending, late]);
  } finally {
    clearTimeout(timer);
  }
}

const declarations: Requirement = {
  id: "resources.status.declarations",
  title: "the status reports mode, verify and retired_sessions",
  docs: "docs/resources-server.md#checkpointverify",
  appliesTo: resourcesOnly,
  async check(context) {
    const status = await statusOf(context);
    expectThat(
      ["restart_only", "stateless", "exported"].includes(status.mode as string),
      `mode is ${JSON.stringify(status.mode)}, expected restart_only, stateless or exported`,
    );
    expectThat(
      status.verify === "wait" || status.verify === "replay",
      `verify is ${JSON.stringify(status.verify)}, expected wait or replay`,
    );
    expectThat(
      Number.isSafeInteger(status.retired_sessions) && (status.retired_sessions as number) >= 0,
      `retired_sessions is ${JSON.stringify(status.retired_sessions)}, expected a count`,
    );
    return PASS;
  },
};

const prefixRequired: Requirement = {
  id: "resources.prefix.required",
  title:
    "session starts, /verify and /close_session without the rollout prefix are 400 rollout_id_required",
  docs: "docs/resources-server.md#rules-with-checkpointing-on",
  appliesTo: resourcesOnly,
  async check(context) {
    for (const path of ["/seed_session", "/verify", "/close_session"]) {
      const reply = await context.target.data(path, context.seedBody, { jar: new CookieJar() });
      expectRefusal(reply, 400, "rollout_id_required", `POST ${path} without the prefix`);
    }
    return PASS;
  },
};

const seedHeaders: Requirement = {
  id: "resources.seed.headers",
  title:
    "a seed under the prefix sets the session cookie and says its verify mode (and restart, for restart_only)",
  docs: "docs/resources-server.md#checkpointverify",
  appliesTo: inModes("restart_only", "stateless", "exported"),
  async check(context) {
    const rollout = context.rolloutId();
    const jar = new CookieJar();
    try {
      const reply = await seed(context, rollout, jar);
      expectThat(
        jar.size > 0,
        "the seed reply sets no cookie: later calls cannot name the session",
      );
      const verify = reply.headers[VERIFY_HEADER];
      expectThat(
        verify === context.profile.verify,
        `${VERIFY_HEADER} is ${JSON.stringify(verify)}, the status declares verify ${JSON.stringify(context.profile.verify)}`,
      );
      const restart = reply.headers[RESTART_HEADER];
      const expected = context.profile.mode === "restart_only" ? "1" : undefined;
      expectThat(
        restart === expected,
        `${RESTART_HEADER} is ${JSON.stringify(restart)} on a ${context.profile.mode} server, expected ${JSON.stringify(expected)}`,
      );
    } finally {
      await cleanUp(context, [rollout], 0);
    }
    return PASS;
  },
};

const admissionWaits: Requirement = {
  id: "resources.admission.waits",
  title:
    "a tool call during an open checkpoint waits for resume (no 409, not in flight), then runs",
  docs: "docs/resources-server.md#rules-with-checkpointing-on",
  appliesTo: inModes("stateless", "exported"),
  async check(context) {
    const tool = await context.tool();
    if (tool === null) return skip("no tool route known: pass --tool PATH (and --tool-body JSON)");
    const rollout = context.rolloutId();
    const jar = new CookieJar();
    try {
      await seed(context, rollout, jar);
      let call: Promise<Reply> | null = null;
      await withPrepared(context, async (id) => {
        call = context.target.data(tool.path, tool.body, { rollout, jar, timeoutMs: 30_000 });
        const early = await within(call, WAITING_WINDOW_MS);
        expectThat(
          early === null,
          () =>
            `the tool call was answered (${describeReply(early as Reply)}) while checkpoint '${id}' was open`,
        );
        const status = await statusOf(context);
        expectThat(
          status.phase === "prepared" && (status.report as { ready?: unknown }).ready === true,
          "with a tool call waiting, the status is no longer prepared and ready: a waiting request counted as in flight",
        );
      });
      const reply = await (call as unknown as Promise<Reply>);
      expectThat(
        reply.status >= 200 && reply.status < 300,
        () => `after resume the waiting tool call answered ${describeReply(reply)}`,
      );
    } finally {
      await cleanUp(context, [rollout], 0);
    }
    return PASS;
  },
};

const restartOnlyRuns: Requirement = {
  id: "resources.admission.restart-only",
  title:
    "restart_only: tool calls keep running through a checkpoint, session starts wait for resume",
  docs: "docs/resources-server.md#checkpointmode",
  appliesTo: inModes("restart_only"),
  async check(context) {
    const tool = await context.tool();
    const rollout = context.rolloutId();
    const late = context.rolloutId();
    const jar = new CookieJar();
    try {
      await seed(context, rollout, jar);
      let seeding: Promise<Reply> | null = null;
      await withPrepared(context, async () => {
        if (tool !== null) {
          const ran = await context.target.data(tool.path, tool.body, { rollout, jar });
          expectThat(
            ran.status >= 200 && ran.status < 300,
            () =>
              `a tool call during the checkpoint answered ${describeReply(ran)}, expected it to run`,
          );
        }
        seeding = context.target.data("/seed_session", context.seedBody, {
          rollout: late,
          jar: new CookieJar(),
          timeoutMs: 30_000,
        });
        const early = await within(seeding, WAITING_WINDOW_MS);
        expectThat(
          early === null,
          () => `a seed during the checkpoint was answered (${describeReply(early as Reply)})`,
        );
      });
      const reply = await (seeding as unknown as Promise<Reply>);
      expectThat(
        reply.status >= 200 && reply.status < 300,
        () => `after resume the waiting seed answered ${describeReply(reply)}`,
      );
    } finally {
      await cleanUp(context, [rollout, late], 0);
    }
    return PASS;
  },
};

const staleAttempt: Requirement = {
  id: "resources.fencing.stale-attempt",
  title:
    "after a retire, the attempt's session and new seeds of it are 409 stale_attempt; the next attempt is admitted",
  docs: "docs/resources-server.md#rules-with-checkpointing-on",
  appliesTo: inModes("restart_only", "stateless", "exported"),
  async check(context) {
    const tool = await context.tool();
    const rollout = context.rolloutId();
    const jar = new CookieJar();
    try {
      await seed(context, rollout, jar);
      if (tool !== null) {
        const before = await context.target.data(tool.path, tool.body, { rollout, jar });
        expectThat(
          before.status >= 200 && before.status < 300,
          () => `the tool call before the retire answered ${describeReply(before)}`,
        );
      }
      expectOk(
        await context.target.control(
          "retire",
          body(context, context.checkpointId(), {
            episode_ids: [{ rollout_id: rollout, attempt: 0 }],
          }),
        ),
        "retire",
      );
      if (tool !== null) {
        expectRefusal(
          await context.target.data(tool.path, tool.body, { rollout, jar }),
          409,
          "stale_attempt",
          "a tool call of the retired attempt",
        );
      }
      expectRefusal(
        await context.target.data("/seed_session", context.seedBody, {
          rollout,
          jar: new CookieJar(),
        }),
        409,
        "stale_attempt",
        "a new seed of the retired attempt",
      );
      await seed(context, `${rollout}-a1`, new CookieJar());
    } finally {
      await cleanUp(context, [rollout], 1);
    }
    const status = await statusOf(context);
    expectThat(status.phase === "idle", "the server is not idle after the retire and forget");
    return PASS;
  },
};

const restarts: Requirement = {
  id: "resources.mode.restarts",
  title:
    "restart_only sessions are prepare's restarts and a scope naming one is 409 restart_in_scope; other modes report none",
  docs: "docs/resources-server.md#checkpointmode",
  appliesTo: inModes("restart_only", "stateless", "exported"),
  async check(context) {
    const rollout = context.rolloutId();
    try {
      await seed(context, rollout, new CookieJar());
      await withPrepared(context, async (id, prepared) => {
        const report = (prepared.json as { report?: { restarts?: unknown } }).report;
        const listed = Array.isArray(report?.restarts) && report.restarts.includes(rollout);
        if (context.profile.mode !== "restart_only") {
          expectThat(
            !listed,
            `a ${context.profile.mode} server reports its session ${rollout} as a restart`,
          );
          return;
        }
        expectThat(
          listed,
          `prepare's restarts ${JSON.stringify(report?.restarts)} leave out the live session ${rollout}`,
        );
        const dir = await context.checkpointDir();
        expectRefusal(
          await context.target.control(
            "commit",
            body(context, id, {
              checkpoint_dir: dir,
              episode_ids: [{ rollout_id: rollout, attempt: 0 }],
            }),
          ),
          409,
          "restart_in_scope",
          "a commit whose scope names a restart",
        );
        await expectPhase(context, "prepared", "after the refused commit", id);
      });
    } finally {
      await cleanUp(context, [rollout], 0);
    }
    return PASS;
  },
};

const exportedInScope: Requirement = {
  id: "resources.export.in-scope",
  title: "exported: a commit writes one valid record per session in its scope, none outside it",
  docs: "docs/resources-server.md#rules-with-checkpointing-on",
  appliesTo: inModes("exported"),
  async check(context) {
    const inside = context.rolloutId();
    const outside = context.rolloutId();
    try {
      await seed(context, inside, new CookieJar());
      await seed(context, outside, new CookieJar());
      await withPrepared(context, async (id) => {
        const dir = await context.checkpointDir();
        const records = await expectCommitWritten(context, id, dir, [
          { rollout_id: inside, attempt: 0 },
        ]);
        const keys = records.map((record) => captureKey(record.episode_id));
        expectThat(!keys.includes(outside), `the commit exported ${outside}, outside its scope`);
        expectThat(keys.includes(inside), `the commit wrote no record of ${inside}, in its scope`);
        for (const record of records) {
          const parsed = ResourcesRecordSchema.safeParse(record.value);
          expectThat(
            parsed.success,
            () =>
              `the record of ${captureKey(record.episode_id)} is not a resources record: ${parsed.error?.issues[0]?.message ?? ""}`,
          );
        }
      });
    } finally {
      await cleanUp(context, [inside, outside], 0);
    }
    return PASS;
  },
};

const statelessNothing: Requirement = {
  id: "resources.export.stateless-nothing",
  title: "stateless: a commit exports nothing, whatever its scope",
  docs: "docs/resources-server.md#checkpointmode",
  appliesTo: inModes("stateless"),
  async check(context) {
    const rollout = context.rolloutId();
    try {
      await seed(context, rollout, new CookieJar());
      await withPrepared(context, async (id) => {
        const dir = await context.checkpointDir();
        const records = await expectCommitWritten(context, id, dir, [
          { rollout_id: rollout, attempt: 0 },
        ]);
        expectThat(records.length === 0, `a stateless server wrote ${records.length} record(s)`);
      });
    } finally {
      await cleanUp(context, [rollout], 0);
    }
    return PASS;
  },
};

/** The resources requirements, in the order they run. */
export const RESOURCES_REQUIREMENTS: readonly Requirement[] = [
  declarations,
  prefixRequired,
  seedHeaders,
  admissionWaits,
  restartOnlyRuns,
  staleAttempt,
  restarts,
  exportedInScope,
  statelessNothing,
];
