/**
 * The core profile: what every participant's control routes do, whatever its kind (docs/
 * control-plane.md, docs/errors.md, docs/contract-notes.md). Each check opens its own
 * checkpoints with fresh IDs and resumes them, so the server is idle again afterwards.
 */
import { CONTROL_ROUTES } from "../wire/control-routes.js";
import { PARTICIPANT_KINDS, StatusReplySchema } from "../wire/control.js";
import { body, expectOk, expectPhase, expectRefusal, statusOf, withPrepared } from "./expect.js";
import {
  PASS,
  everyServer,
  expectThat,
  fail,
  skip,
  type CheckContext,
  type Requirement,
} from "./requirement.js";
import { expectCommitWritten } from "./storage-checks.js";
import { corruptCheckpoints } from "./corrupt-checkpoints.js";

const POST_ROUTES = CONTROL_ROUTES.filter((route) => route.method === "post");

/** A body of the right shape for any POST control route (auth must refuse it before acting). */
function wellFormed(context: CheckContext, id: string): Record<string, unknown> {
  return body(context, id);
}

const statusShape: Requirement = {
  id: "core.status.shape",
  title: "status answers every field of the contract (kind, instance, phase, lease, report)",
  docs: "docs/control-plane.md#status",
  appliesTo: everyServer,
  async check(context) {
    const status = await statusOf(context);
    const parsed = StatusReplySchema.safeParse(status);
    if (!parsed.success) {
      const issue = parsed.error.issues[0];
      return fail(
        `the status reply does not match the contract: ${issue?.path.join(".") || "(reply)"}: ${issue?.message ?? ""}`,
      );
    }
    expectThat(
      (PARTICIPANT_KINDS as readonly string[]).includes(parsed.data.kind),
      `kind ${JSON.stringify(parsed.data.kind)} is not one of ${PARTICIPANT_KINDS.join(", ")}`,
    );
    expectThat(
      parsed.data.phase !== "idle" || parsed.data.checkpoint_id === null,
      "an idle status names a checkpoint_id",
    );
    return PASS;
  },
};

const authMissing: Requirement = {
  id: "core.auth.required",
  title: "every control route answers 401 unauthorized without the right bearer token",
  docs: "docs/errors.md#errors",
  appliesTo: everyServer,
  async check(context) {
    const { target } = context;
    const wrong: Record<string, string | undefined>[] = [
      {},
      { authorization: "Bearer not-the-token" },
      { authorization: target.authorization.slice("Bearer ".length) },
    ];
    for (const headers of wrong) {
      const shown =
        headers.authorization === undefined ? "no Authorization header" : "a wrong token";
      const status = await target.call("GET", CONTROL_ROUTES[0]?.path ?? "", {
        headers: headers as Record<string, string>,
      });
      expectRefusal(status, 401, "unauthorized", `GET status with ${shown}`);
      for (const route of POST_ROUTES) {
        const reply = await target.call("POST", route.path, {
          body: wellFormed(context, context.checkpointId()),
          headers: headers as Record<string, string>,
        });
        expectRefusal(reply, 401, "unauthorized", `POST ${route.operation} with ${shown}`);
      }
    }
    // Refused means refused: nothing opened.
    await expectPhase(context, "idle", "after the unauthorised calls", null);
    return PASS;
  },
};

const authBeforeBody: Requirement = {
  id: "core.auth.before-body",
  title:
    "the bearer is checked before the body is parsed: a bad body without the token is 401, not 422",
  docs: "docs/contract-notes.md#requests-validation-and-errors",
  appliesTo: everyServer,
  async check(context) {
    for (const route of POST_ROUTES) {
      for (const [what, raw] of [
        ["a body that is not JSON", "{not json"],
        ["a body of the wrong shape", JSON.stringify({ checkpoint_id: 7 })],
      ] as const) {
        const reply = await context.target.call("POST", route.path, {
          body: raw,
          raw: true,
          headers: { "content-type": "application/json" },
        });
        expectRefusal(
          reply,
          401,
          "unauthorized",
          `POST ${route.operation} with ${what} and no token`,
        );
      }
    }
    return PASS;
  },
};

const phaseCycle: Requirement = {
  id: "core.phase.cycle",
  title: "prepare reaches prepared (status shows it), resume returns to idle",
  docs: "docs/control-plane.md#operations",
  appliesTo: everyServer,
  async check(context) {
    await withPrepared(context, async (id) => {
      await expectPhase(context, "prepared", "after prepare", id);
      const resumed = expectOk(await context.target.control("resume", body(context, id)), "resume");
      expectThat(
        resumed.phase === "idle" && resumed.idempotent === false,
        `resume answered ${JSON.stringify(resumed)}, expected {"phase":"idle","idempotent":false}`,
      );
      await expectPhase(context, "idle", "after resume", null);
    });
    return PASS;
  },
};

const phaseRefusals: Requirement = {
  id: "core.phase.refusals",
  title:
    "operations outside their phases are 409 invalid_phase (commit or renew when idle; restore, retire, forget in a checkpoint)",
  docs: "docs/control-plane.md#fencing",
  appliesTo: everyServer,
  async check(context) {
    const { target } = context;
    const idle = context.checkpointId();
    const dir = await context.checkpointDir();
    expectRefusal(
      await target.control("commit", body(context, idle, { checkpoint_dir: dir, episode_ids: [] })),
      409,
      "invalid_phase",
      "commit while idle",
    );
    expectRefusal(
      await target.control("renew", body(context, idle)),
      409,
      "invalid_phase",
      "renew while idle",
    );
    await withPrepared(context, async (id) => {
      const episode = { rollout_id: context.rolloutId(), attempt: 0 };
      expectRefusal(
        await target.control(
          "restore",
          body(context, id, { checkpoint_dir: dir, episode_ids: [] }),
        ),
        409,
        "invalid_phase",
        "restore while prepared",
      );
      expectRefusal(
        await target.control("retire", body(context, id, { episode_ids: [episode] })),
        409,
        "invalid_phase",
        "retire while prepared",
      );
      expectRefusal(
        await target.control("forget", body(context, id, { rollout_ids: [episode.rollout_id] })),
        409,
        "invalid_phase",
        "forget while prepared",
      );
      await expectPhase(context, "prepared", "after the refused calls", id);
    });
    return PASS;
  },
};

const prepareReplay: Requirement = {
  id: "core.idempotency.prepare",
  title: "a prepare retried with the same ID gets the stored reply verbatim, also once committed",
  docs: "docs/control-plane.md#replay",
  appliesTo: everyServer,
  async check(context) {
    await withPrepared(context, async (id, first) => {
      const again = await context.target.control("prepare", body(context, id));
      expectOk(again, "the retried prepare");
      expectThat(
        again.text === first.text || JSON.stringify(again.json) === JSON.stringify(first.json),
        `the retried prepare answered ${again.text.slice(0, 200)}, not the stored ${first.text.slice(0, 200)}`,
      );
      const dir = await context.checkpointDir();
      expectOk(
        await context.target.control(
          "commit",
          body(context, id, { checkpoint_dir: dir, episode_ids: [] }),
        ),
        "commit",
      );
      const afterCommit = await context.target.control("prepare", body(context, id));
      expectThat(
        afterCommit.status === 200 &&
          JSON.stringify(afterCommit.json) === JSON.stringify(first.json),
        () =>
          `a prepare retried after the commit answered ${afterCommit.text.slice(0, 200)}, not the stored reply`,
      );
    });
    return PASS;
  },
};

const commitReplay: Requirement = {
  id: "core.idempotency.commit",
  title:
    "a commit retried with the same directory and scope replays; another directory or scope is 409 checkpoint_conflict",
  docs: "docs/control-plane.md#replay",
  appliesTo: everyServer,
  async check(context) {
    await withPrepared(context, async (id) => {
      const dir = await context.checkpointDir();
      const other = await context.checkpointDir();
      const commit = (extra: Record<string, unknown>) =>
        context.target.control("commit", body(context, id, extra));
      const first = await commit({ checkpoint_dir: dir, episode_ids: [] });
      expectOk(first, "commit");
      const again = await commit({ checkpoint_dir: dir, episode_ids: [] });
      expectThat(
        again.status === 200 && JSON.stringify(again.json) === JSON.stringify(first.json),
        () => `the retried commit answered ${again.text.slice(0, 200)}, not the stored reply`,
      );
      expectRefusal(
        await commit({ checkpoint_dir: other, episode_ids: [] }),
        409,
        "checkpoint_conflict",
        "the commit retried into another directory",
      );
      expectRefusal(
        await commit({
          checkpoint_dir: dir,
          episode_ids: [{ rollout_id: context.rolloutId(), attempt: 0 }],
        }),
        409,
        "checkpoint_conflict",
        "the commit retried with another scope",
      );
    });
    return PASS;
  },
};

const conflict: Requirement = {
  id: "core.fencing.conflict",
  title: "while one checkpoint is open, calls naming another are 409 checkpoint_conflict",
  docs: "docs/control-plane.md#fencing",
  appliesTo: everyServer,
  async check(context) {
    await withPrepared(context, async (id) => {
      const other = context.checkpointId();
      const dir = await context.checkpointDir();
      for (const [operation, extra] of [
        ["prepare", {}],
        ["renew", {}],
        ["commit", { checkpoint_dir: dir, episode_ids: [] }],
        ["resume", {}],
      ] as const) {
        expectRefusal(
          await context.target.control(operation, body(context, other, extra)),
          409,
          "checkpoint_conflict",
          `${operation} of another checkpoint while '${id}' is open`,
        );
      }
      await expectPhase(context, "prepared", "after the refused calls", id);
    });
    return PASS;
  },
};

const staleCheckpoint: Requirement = {
  id: "core.fencing.stale-checkpoint",
  title:
    "a resumed checkpoint ID is 409 stale_checkpoint for prepare, renew, commit and restore; resuming it again is idempotent",
  docs: "docs/control-plane.md#fencing",
  appliesTo: everyServer,
  async check(context) {
    const { target } = context;
    let resumedId = "";
    await withPrepared(context, async (id) => {
      resumedId = id;
    });
    const dir = await context.checkpointDir();
    for (const [operation, extra] of [
      ["prepare", {}],
      ["renew", {}],
      ["commit", { checkpoint_dir: dir, episode_ids: [] }],
      ["restore", { checkpoint_dir: dir, episode_ids: [] }],
    ] as const) {
      expectRefusal(
        await target.control(operation, body(context, resumedId, extra)),
        409,
        "stale_checkpoint",
        `${operation} of the resumed checkpoint`,
      );
    }
    const again = expectOk(
      await target.control("resume", body(context, resumedId)),
      "resume again",
    );
    expectThat(
      again.idempotent === true,
      `resuming a resumed ID answered ${JSON.stringify(again)}`,
    );
    // A resume that reached the server before its prepare: the late prepare is stale.
    const aborted = context.checkpointId();
    expectOk(await target.control("resume", body(context, aborted)), "resume of an unknown ID");
    expectRefusal(
      await target.control("prepare", body(context, aborted)),
      409,
      "stale_checkpoint",
      "a prepare arriving after its checkpoint's resume",
    );
    await expectPhase(context, "idle", "after the refused calls", null);
    return PASS;
  },
};

const leaseFollowsDeadline: Requirement = {
  id: "core.lease.follows-deadline",
  title:
    "the lease runs to deadline_ts plus the grace, and never shrinks (a renew with a past deadline is accepted)",
  docs: "docs/control-plane.md#the-lease",
  appliesTo: everyServer,
  async check(context) {
    await withPrepared(context, async (id) => {
      const far = context.deadline(3_600);
      const renewed = expectOk(
        await context.target.control("renew", { checkpoint_id: id, deadline_ts: far }),
        "renew",
      );
      const lease = renewed.lease_expires_at;
      expectThat(
        typeof lease === "number" && lease >= far,
        `renew with a deadline an hour ahead answered lease_expires_at ${JSON.stringify(lease)}, before that deadline`,
      );
      const past = expectOk(
        await context.target.control("renew", {
          checkpoint_id: id,
          deadline_ts: context.deadline(-60),
        }),
        "renew with a past deadline",
      );
      expectThat(
        past.lease_expires_at === lease,
        `renew with a past deadline moved the lease from ${lease} to ${JSON.stringify(past.lease_expires_at)}`,
      );
      const status = await statusOf(context);
      expectThat(
        status.lease_expires_at === lease,
        "the status reports another lease than renew did",
      );
    });
    const after = await statusOf(context);
    expectThat(after.lease_expires_at === null, "resume left a lease in the status");
    return PASS;
  },
};

/** The longest lease grace the kit waits out to see a lease expire, in seconds. */
const MAX_WAITED_GRACE_SECONDS = 5;

const leaseExpiry: Requirement = {
  id: "core.lease.expiry",
  title: "a quiet participant resumes on its own when the lease expires, and the ID is then stale",
  docs: "docs/control-plane.md#the-lease",
  appliesTo: everyServer,
  async check(context) {
    const id = context.checkpointId();
    const deadline = context.deadline(0);
    try {
      const prepared = expectOk(
        await context.target.control("prepare", { checkpoint_id: id, deadline_ts: deadline }),
        "prepare",
      );
      expectThat(prepared.phase === "prepared", `prepare answered phase ${String(prepared.phase)}`);
      const status = await statusOf(context);
      const grace = (status.lease_expires_at as number) - deadline;
      if (!(grace <= MAX_WAITED_GRACE_SECONDS)) {
        return skip(
          `lease_grace_seconds is about ${Math.round(grace)} s: the kit waits out at most ${MAX_WAITED_GRACE_SECONDS} s (start the server with a shorter grace to test expiry)`,
        );
      }
      const until = Date.now() + (grace + 5) * 1000;
      for (;;) {
        const now = await statusOf(context);
        if (now.phase === "idle") break;
        expectThat(
          Date.now() < until,
          `still ${String(now.phase)} ${Math.round(grace + 5)} s after the deadline`,
        );
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
      expectRefusal(
        await context.target.control("prepare", body(context, id)),
        409,
        "stale_checkpoint",
        "prepare of the checkpoint whose lease expired",
      );
      return PASS;
    } finally {
      await context.target.control("resume", body(context, id)).catch(() => undefined);
    }
  },
};

const retireThenForget: Requirement = {
  id: "core.retire.then-forget",
  title: "retire marks a rollout (retired_rollouts counts it), forget drops the mark",
  docs: "docs/control-plane.md#operations",
  appliesTo: everyServer,
  async check(context) {
    const { target } = context;
    const rollout = context.rolloutId();
    const before = (await statusOf(context)).retired_rollouts as number;
    const retired = expectOk(
      await target.control(
        "retire",
        body(context, context.checkpointId(), {
          episode_ids: [{ rollout_id: rollout, attempt: 1 }],
        }),
      ),
      "retire",
    );
    expectThat(
      retired.retired_count === 1,
      `retire of one attempt answered ${JSON.stringify(retired)}`,
    );
    const marked = (await statusOf(context)).retired_rollouts;
    expectThat(
      marked === before + 1,
      `retired_rollouts went from ${before} to ${String(marked)}, expected +1`,
    );
    const forgot = expectOk(
      await target.control(
        "forget",
        body(context, context.checkpointId(), { rollout_ids: [rollout] }),
      ),
      "forget",
    );
    expectThat(
      forgot.forgotten_count === 1,
      `forget of one rollout answered ${JSON.stringify(forgot)}`,
    );
    const after = (await statusOf(context)).retired_rollouts;
    expectThat(
      after === before,
      `retired_rollouts is ${String(after)} after forget, expected ${before}`,
    );
    return PASS;
  },
};

const retireMarksFirst: Requirement = {
  id: "core.deadline.retire-marks-first",
  title:
    "retire marks the attempt before any deadline-bounded work, even with a deadline already past",
  docs: "docs/control-plane.md#operations",
  appliesTo: everyServer,
  async check(context) {
    const rollout = context.rolloutId();
    const before = (await statusOf(context)).retired_rollouts as number;
    const reply = await context.target.control("retire", {
      checkpoint_id: context.checkpointId(),
      deadline_ts: context.deadline(-60),
      episode_ids: [{ rollout_id: rollout, attempt: 0 }],
    });
    expectThat(
      reply.status === 200 || (reply.status === 409 && reply.json !== undefined),
      `retire with a past deadline answered HTTP ${reply.status}, expected 200 or 409 deadline_exceeded`,
    );
    try {
      const marked = (await statusOf(context)).retired_rollouts;
      expectThat(
        marked === before + 1,
        `retired_rollouts went from ${before} to ${String(marked)}: the mark waited for the deadline`,
      );
    } finally {
      await context.target
        .control("forget", body(context, context.checkpointId(), { rollout_ids: [rollout] }))
        .catch(() => undefined);
    }
    return PASS;
  },
};

const commitWrites: Requirement = {
  id: "core.storage.records-then-manifest",
  title:
    "commit writes one records file then the manifest, which matches the reply and the records' digest and count",
  docs: "docs/storage.md#write-order-commit",
  appliesTo: everyServer,
  async check(context) {
    await withPrepared(context, async (id) => {
      const dir = await context.checkpointDir();
      await expectCommitWritten(context, id, dir, [], { order: true });
    });
    return PASS;
  },
};

const noOverwrite: Requirement = {
  id: "core.storage.manifest-final",
  title:
    "a directory holding a manifest never changes: another checkpoint's commit into it is 422 invalid_checkpoint_state",
  docs: "docs/storage.md#write-order-commit",
  appliesTo: everyServer,
  async check(context) {
    const dir = await context.checkpointDir();
    await withPrepared(context, async (id) => {
      expectOk(
        await context.target.control(
          "commit",
          body(context, id, { checkpoint_dir: dir, episode_ids: [] }),
        ),
        "the first commit",
      );
    });
    await withPrepared(context, async (id) => {
      expectRefusal(
        await context.target.control(
          "commit",
          body(context, id, { checkpoint_dir: dir, episode_ids: [] }),
        ),
        422,
        "invalid_checkpoint_state",
        "a second checkpoint's commit into the first one's directory",
      );
    });
    return PASS;
  },
};

const corruptRefused: Requirement = {
  id: "core.restore.corrupt-refused",
  title:
    "a restore from a missing, foreign or corrupt checkpoint is 422 invalid_checkpoint_state and leaves the server idle",
  docs: "docs/storage.md#read-restore",
  appliesTo: everyServer,
  async check(context) {
    for (const corrupt of corruptCheckpoints) {
      const dir = await context.checkpointDir();
      await corrupt.write(dir, context.profile);
      const id = context.checkpointId();
      try {
        const reply = await context.target.control(
          "restore",
          body(context, id, { checkpoint_dir: dir, episode_ids: [] }),
        );
        expectRefusal(reply, 422, "invalid_checkpoint_state", `restore from ${corrupt.what}`);
        await expectPhase(context, "idle", `after the refused restore from ${corrupt.what}`, null);
      } finally {
        await context.target.control("resume", body(context, id)).catch(() => undefined);
      }
    }
    return PASS;
  },
};

/** The core requirements, in the order they run. */
export const CORE_REQUIREMENTS: readonly Requirement[] = [
  statusShape,
  authMissing,
  authBeforeBody,
  phaseCycle,
  phaseRefusals,
  prepareReplay,
  commitReplay,
  conflict,
  staleCheckpoint,
  leaseFollowsDeadline,
  leaseExpiry,
  retireThenForget,
  retireMarksFirst,
  commitWrites,
  noOverwrite,
  corruptRefused,
];
