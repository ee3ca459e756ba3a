/**
 * The agent, environment and model profiles: each kind's data routes under the rollout prefix,
 * the fence of retired attempts on them, and the admission gate (docs/agent.md,
 * docs/environment-server.md, docs/policy-model.md). Only what needs no other server is
 * checked here: a seed, a refused `/run`, a generation call whose reply comes from the model's
 * own backend.
 */
import { captureKey } from "../identity/episode-id.js";
import type { ParticipantKind } from "../wire/control.js";
import { body, expectOk, expectRefusal, statusOf, withPrepared } from "./expect.js";
import { agentSeedBody, attemptRequest, MODEL_CALL, startSession } from "./kind-probes.js";
import type { ServerProfile } from "./profile.js";
import { PASS, expectThat, type CheckContext, type Requirement } from "./requirement.js";
import { expectCommitWritten } from "./storage-checks.js";
import { CookieJar, describeReply, type Reply } from "./target.js";

/** How long a request must stay unanswered to count as waiting for resume, in ms. */
const WAITING_WINDOW_MS = 500;

function only(kind: ParticipantKind) {
  return (profile: ServerProfile): string | null =>
    profile.kind === kind ? null : `only ${kind} servers (this is ${profile.kind})`;
}

/** The reply when `pending` settles within `ms`, null while it still waits. */
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

/** Retires `attempt` of each rollout and forgets them. */
async function cleanUp(context: CheckContext, rollouts: readonly string[], attempt: number) {
  await context.target
    .control(
      "retire",
      body(context, context.checkpointId(), {
        episode_ids: rollouts.map((rollout_id) => ({ rollout_id, attempt })),
      }),
    )
    .catch(() => undefined);
  await context.target
    .control("forget", body(context, context.checkpointId(), { rollout_ids: [...rollouts] }))
    .catch(() => undefined);
}

/** Retires attempt 0 of a fresh rollout; returns the rollout. */
async function retireFresh(context: CheckContext): Promise<string> {
  const rollout = context.rolloutId();
  expectOk(
    await context.target.control(
      "retire",
      body(context, context.checkpointId(), {
        episode_ids: [{ rollout_id: rollout, attempt: 0 }],
      }),
    ),
    "retire",
  );
  return rollout;
}

/**
 * Sends `send()` during an open checkpoint: it must still wait after a while, the status must
 * stay prepared and ready (a waiting request is not in flight), and after resume it must be
 * answered 2xx.
 */
async function expectWaitsForResume(
  context: CheckContext,
  what: string,
  send: () => Promise<Reply>,
): Promise<void> {
  let pending: Promise<Reply> | null = null;
  await withPrepared(context, async (id) => {
    pending = send();
    const early = await within(pending, WAITING_WINDOW_MS);
    expectThat(
      early === null,
      () =>
        `${what} was answered (${describeReply(early as Reply)}) while checkpoint '${id}' was open`,
    );
    const status = await statusOf(context);
    expectThat(
      status.phase === "prepared" && (status.report as { ready?: unknown }).ready === true,
      `with ${what} waiting, the status is no longer prepared and ready: a waiting request counted as in flight`,
    );
  });
  const reply = await (pending as unknown as Promise<Reply>);
  expectThat(
    reply.status >= 200 && reply.status < 300,
    () => `after resume, ${what} answered ${describeReply(reply)}`,
  );
}

const agentPrefix: Requirement = {
  id: "agent.prefix.required",
  title:
    "a /v1/responses call without a session cookie or rollout prefix is 400 rollout_id_required",
  docs: "docs/agent.md#checkpointing-on",
  appliesTo: only("agent"),
  async check(context) {
    expectRefusal(
      await context.target.data("/v1/responses", { input: "hello" }, { jar: new CookieJar() }),
      400,
      "rollout_id_required",
      "POST /v1/responses without the prefix",
    );
    return PASS;
  },
};

const agentStale: Requirement = {
  id: "agent.fencing.stale-attempt",
  title: "a seed of a retired attempt is 409 stale_attempt; the next attempt seeds",
  docs: "docs/agent.md#checkpointing-on",
  appliesTo: only("agent"),
  async check(context) {
    const rollout = await retireFresh(context);
    try {
      expectRefusal(
        await attemptRequest(context, rollout),
        409,
        "stale_attempt",
        "a seed of the retired attempt",
      );
      const next = await context.target.data("/v1/agent_sessions", agentSeedBody(rollout, 1), {
        jar: new CookieJar(),
      });
      expectThat(
        next.status >= 200 && next.status < 300,
        () => `a seed of the next attempt answered ${describeReply(next)}`,
      );
    } finally {
      await cleanUp(context, [rollout], 1);
    }
    return PASS;
  },
};

const agentSeedWaits: Requirement = {
  id: "agent.admission.seed-waits",
  title: "a seed during an open checkpoint waits for resume (not in flight), then seeds",
  docs: "docs/agent.md#checkpointing-on",
  appliesTo: only("agent"),
  async check(context) {
    const rollout = context.rolloutId();
    try {
      await expectWaitsForResume(context, "a seed", () =>
        context.target.data("/v1/agent_sessions", agentSeedBody(rollout), {
          jar: new CookieJar(),
          timeoutMs: 30_000,
        }),
      );
    } finally {
      await cleanUp(context, [rollout], 0);
    }
    return PASS;
  },
};

const agentExport: Requirement = {
  id: "agent.export.in-scope",
  title: "a commit writes a record of each session in its scope and none outside it",
  docs: "docs/agent.md#checkpointing-on",
  appliesTo: only("agent"),
  async check(context) {
    const inside = (await startSession(context, context.rolloutId())).rollout;
    const outside = (await startSession(context, context.rolloutId())).rollout;
    try {
      await withPrepared(context, async (id) => {
        const records = await expectCommitWritten(context, id, await context.checkpointDir(), [
          { rollout_id: inside, attempt: 0 },
        ]);
        const keys = records.map((record) => captureKey(record.episode_id));
        expectThat(!keys.includes(outside), `the commit exported ${outside}, outside its scope`);
        expectThat(keys.includes(inside), `the commit wrote no record of ${inside}, in its scope`);
      });
    } finally {
      await cleanUp(context, [inside, outside], 0);
    }
    return PASS;
  },
};

/**
 * A kind's "a request of a retired attempt is 409 stale_attempt" requirement: the kit retires a
 * fresh rollout, sends the kind's request under its attempt and expects the refusal.
 */
function staleAttemptRequirement(spec: {
  id: string;
  kind: "environment" | "model";
  title: string;
  docs: string;
  request: string;
}): Requirement {
  return {
    id: spec.id,
    title: spec.title,
    docs: spec.docs,
    appliesTo: only(spec.kind),
    async check(context) {
      const rollout = await retireFresh(context);
      try {
        expectRefusal(await attemptRequest(context, rollout), 409, "stale_attempt", spec.request);
      } finally {
        await cleanUp(context, [rollout], 0);
      }
      return PASS;
    },
  };
}

const environmentStale = staleAttemptRequirement({
  id: "environment.fencing.stale-attempt",
  kind: "environment",
  title: "a /run of a retired attempt is 409 stale_attempt",
  docs: "docs/environment-server.md#checkpoints",
  request: "a /run of the retired attempt (pass the task the server needs with --task)",
});

const environmentClosed: Requirement = {
  id: "environment.admission.closed",
  title: "a new /run during an open checkpoint is 409 admission_closed and leaves prepare ready",
  docs: "docs/environment-server.md#checkpoints",
  appliesTo: only("environment"),
  async check(context) {
    await withPrepared(context, async () => {
      expectRefusal(
        await attemptRequest(context, context.rolloutId()),
        409,
        "admission_closed",
        "a /run during the checkpoint (pass the task the server needs with --task)",
      );
      const status = await statusOf(context);
      expectThat(
        status.phase === "prepared" && (status.report as { ready?: unknown }).ready === true,
        "after the refused /run the status is no longer prepared and ready",
      );
    });
    return PASS;
  },
};

const modelKey: Requirement = {
  id: "model.prefix.invalid-key",
  title: "a generation call under a prefix that is no capture key is 400 invalid_rollout_id",
  docs: "docs/policy-model.md#what-a-checkpoint-does-to-a-model-call",
  appliesTo: only("model"),
  async check(context) {
    expectRefusal(
      await context.target.data("/ng-rollout/-not-a-key/v1/responses", MODEL_CALL),
      400,
      "invalid_rollout_id",
      "a call under /ng-rollout/-not-a-key",
    );
    return PASS;
  },
};

const modelStale = staleAttemptRequirement({
  id: "model.fencing.stale-attempt",
  kind: "model",
  title: "a generation call of a retired attempt is 409 stale_attempt",
  docs: "docs/policy-model.md#what-a-checkpoint-does-to-a-model-call",
  request: "POST /v1/responses of the retired attempt",
});

const modelWaits: Requirement = {
  id: "model.admission.waits",
  title:
    "a generation call during an open checkpoint waits for resume (not in flight), then is served",
  docs: "docs/policy-model.md#what-a-checkpoint-does-to-a-model-call",
  appliesTo: only("model"),
  async check(context) {
    const rollout = context.rolloutId();
    try {
      await expectWaitsForResume(context, "a generation call (its backend must be up)", () =>
        context.target.data("/v1/responses", MODEL_CALL, { rollout, timeoutMs: 30_000 }),
      );
    } finally {
      await cleanUp(context, [rollout], 0);
    }
    return PASS;
  },
};

/** The agent, environment and model requirements, in the order they run. */
export const KIND_REQUIREMENTS: readonly Requirement[] = [
  agentPrefix,
  agentStale,
  agentSeedWaits,
  agentExport,
  environmentStale,
  environmentClosed,
  modelKey,
  modelStale,
  modelWaits,
];
