import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { refusal } from "#sdk/cli/ckpt/refusal.js";
import {
  deadlineCorrectionMs,
  describeSkew,
  estimateClockOffset,
  translateDeadline,
} from "#sdk/client/clock.js";
import {
  ClockSkewError,
  CoordinationError,
  commit,
  discover,
  prepare,
  restore,
  resume,
  type Member,
  type Participants,
} from "#sdk/client/coordination.js";
import type { CallReply, ServerClient } from "#sdk/client/server-client.js";
import { episodeId } from "#sdk/identity/episode-id.js";
import { prepareReport, type Operation } from "#sdk/wire/control.js";

/** The controller's clock in these tests: 2026-01-01T00:00:00Z. */
const T0 = Date.UTC(2026, 0, 1);

describe("estimateClockOffset", () => {
  it("takes the status reply's now against the midpoint of the round trip", () => {
    // Sent at T0, answered 40 ms later; the server said T0 + 2.02 s, i.e. 2 s ahead at the midpoint.
    const estimate = estimateClockOffset({
      sentMs: T0,
      receivedMs: T0 + 40,
      serverNow: (T0 + 2_020) / 1000,
      dateHeader: new Date(T0 + 9_000).toUTCString(),
    });
    expect(estimate).toEqual({
      offsetMs: 2_000,
      uncertaintyMs: 20,
      roundTripMs: 40,
      source: "status",
    });
  });

  it("falls back to the Date header, taken as the middle of its second", () => {
    // The header truncates T0 - 1.7 s to T0 - 2 s; its middle, T0 - 1.5 s, is the estimate.
    const estimate = estimateClockOffset({
      sentMs: T0 - 10,
      receivedMs: T0 + 10,
      dateHeader: new Date(T0 - 1_700).toUTCString(),
    });
    expect(estimate).toEqual({
      offsetMs: -1_500,
      uncertaintyMs: 510,
      roundTripMs: 20,
      source: "date",
    });
  });

  it("is null when the reply carries neither a usable now nor a Date header", () => {
    expect(estimateClockOffset({ sentMs: T0, receivedMs: T0 + 1 })).toBeNull();
    expect(
      estimateClockOffset({ sentMs: T0, receivedMs: T0, serverNow: "soon", dateHeader: "never" }),
    ).toBeNull();
  });
});

describe("deadline translation", () => {
  it("moves a deadline by offsets beyond the noise, not by small or uncertain ones", () => {
    expect(deadlineCorrectionMs(undefined)).toBe(0);
    expect(deadlineCorrectionMs(80)).toBe(0);
    expect(deadlineCorrectionMs(400, 510)).toBe(0);
    expect(deadlineCorrectionMs(2_000.4, 20)).toBe(2_000);
    expect(deadlineCorrectionMs(-2_000, 20)).toBe(-2_000);
    expect(translateDeadline(1_767_225_630.25, 2_013)).toBe(1_767_225_632.263);
    expect(translateDeadline(1_767_225_630.25, 0)).toBe(1_767_225_630.25);
  });

  it("names the server, its offset, the direction and the bound", () => {
    expect(describeSkew("counter", 61_234, 5_000)).toBe(
      "counter's clock is 61.2 s ahead of this controller's (bound 5 s): synchronise clocks (chrony/NTP)",
    );
    expect(describeSkew("env", -60_000, 2_500)).toBe(
      "env's clock is 60 s behind this controller's (bound 2.5 s): synchronise clocks (chrony/NTP)",
    );
  });
});

interface Sent {
  server: string;
  operation: Operation;
  body: Record<string, unknown>;
}

/**
 * A ServerClient stand-in: each server answers from its own clock, `offsets[name]` ms ahead.
 * Time stands still during a probe (the probes run at once; the round trip is the estimator's).
 */
function fakeClient(offsets: Record<string, number>, sent: Sent[]): ServerClient {
  const reply = (server: string, operation: Operation, bytes: Uint8Array | null): unknown => {
    const body =
      bytes === null ? {} : (JSON.parse(Buffer.from(bytes).toString("utf8")) as Sent["body"]);
    sent.push({ server, operation, body });
    const kind = server === "policy" ? "model" : "resources";
    const report = prepareReport({ ready: true });
    switch (operation) {
      case "status":
        return { kind, instance: server, phase: "idle", report, now: 0 };
      case "prepare":
        return { phase: "prepared", report };
      case "restore":
        return { phase: "restored", source_checkpoint_id: "c", restored: [] };
      case "resume":
        return { phase: "idle", idempotent: false };
      default:
        return { phase: "committed", manifest: {}, episode_ids: [] };
    }
  };
  const client = {
    serverNames: () => Object.keys(offsets).sort(),
    server: (name: string) => ({ kind: name === "policy" ? "model" : "resources", url: "" }),
    async control(server: string, operation: Operation, bytes: Uint8Array | null) {
      return reply(server, operation, bytes);
    },
    async controlWithReply(
      server: string,
      operation: Operation,
      bytes: Uint8Array | null,
    ): Promise<CallReply<unknown>> {
      const body = reply(server, operation, bytes) as Record<string, unknown>;
      const serverMs = Date.now() + (offsets[server] ?? 0);
      return {
        status: 200,
        headers: { date: new Date(serverMs).toUTCString() },
        body: { ...body, now: serverMs / 1000 },
      };
    },
  };
  return client as unknown as ServerClient;
}

describe("coordination across skewed clocks (fake clocks)", () => {
  beforeEach(() => {
    vi.useFakeTimers({ now: T0 });
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it("discover records each participant's offset and its uncertainty", async () => {
    const sent: Sent[] = [];
    const participants = await discover(
      fakeClient({ counter: 2_000, policy: 0, weather: -61_234 }, sent),
      "t",
    );
    const clocks = Object.fromEntries(
      participants.members.map((m) => [m.name, [m.clockOffsetMs, m.clockUncertaintyMs]]),
    );
    expect(clocks).toEqual({ counter: [2_000, 0], policy: [0, 0], weather: [-61_234, 0] });
    expect(participants.maxClockSkewMs).toBe(5_000);
  });

  it("sends each participant its deadlines in its own clock; agreeing clocks share the bytes", async () => {
    const sent: Sent[] = [];
    const participants = await discover(
      fakeClient({ counter: 2_000, policy: 30, weather: -2_000 }, sent),
      "t",
    );
    sent.length = 0;
    const deadline = T0 / 1000 + 30;
    expect((await prepare(participants, "c1", deadline)).prepared).toBe(true);
    await commit(participants, {
      checkpointId: "c1",
      checkpointDir: "/tmp/c1",
      episodeIds: [episodeId("r1")],
      deadlineTs: deadline,
    });
    await resume(participants, "c1", deadline);
    const deadlines = (server: string) =>
      sent.filter((s) => s.server === server).map((s) => [s.operation, s.body.deadline_ts]);
    expect(deadlines("counter")).toEqual([
      ["prepare", deadline + 2],
      ["commit", deadline + 2],
      ["resume", deadline + 2],
    ]);
    expect(deadlines("weather")).toEqual([
      ["prepare", deadline - 2],
      ["commit", deadline - 2],
      ["resume", deadline - 2],
    ]);
    // 30 ms is within the noise: the policy model gets the controller's deadline unchanged.
    expect(deadlines("policy").map(([, d]) => d)).toEqual([deadline, deadline, deadline]);
  });

  it("refuses prepare and restore before calling anyone when a clock is beyond the bound", async () => {
    const sent: Sent[] = [];
    const participants = await discover(
      fakeClient({ counter: 61_234, policy: 0, weather: -6_000 }, sent),
      "t",
    );
    sent.length = 0;
    const error = await prepare(participants, "c1", T0 / 1000 + 30).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ClockSkewError);
    expect(error).toBeInstanceOf(CoordinationError);
    const skew = error as ClockSkewError;
    expect(skew.operation).toBe("prepare");
    expect(skew.offsetsMs).toEqual({ counter: 61_234, weather: -6_000 });
    expect(skew.message).toBe(
      "checkpoint prepare refused: counter's clock is 61.2 s ahead of this controller's (bound 5 s): " +
        "synchronise clocks (chrony/NTP); weather's clock is 6 s behind this controller's (bound 5 s): " +
        "synchronise clocks (chrony/NTP)",
    );
    await expect(
      restore(participants, {
        checkpointId: "r1",
        checkpointDir: "/tmp/c1",
        episodeIds: [episodeId("r1")],
        deadlineTs: T0 / 1000 + 30,
      }),
    ).rejects.toBeInstanceOf(ClockSkewError);
    expect(sent).toEqual([]);
    // Resume still reaches everyone: a skewed participant can always be let go.
    await resume(participants, "c1", T0 / 1000 + 30);
    expect(sent.map((s) => s.server).sort()).toEqual(["counter", "policy", "weather"]);
  });

  it("takes the bound from discover's options", async () => {
    const participants = await discover(fakeClient({ counter: 7_000, policy: 0 }, []), "t", {
      maxClockSkewMs: 10_000,
    });
    expect((await prepare(participants, "c1", T0 / 1000 + 30)).prepared).toBe(true);
    await expect(
      discover(fakeClient({ policy: 0 }, []), "t", { maxClockSkewMs: -1 }),
    ).rejects.toThrow(RangeError);
  });

  it("does not refuse an offset the measurement's uncertainty may explain (a slow reply)", async () => {
    const participants = await discover(fakeClient({ counter: 0, policy: 0 }, []), "t");
    const slow = {
      ...participants,
      members: participants.members.map((member) => ({
        ...member,
        clockOffsetMs: 6_000,
        clockUncertaintyMs: member.name === "counter" ? 2_000 : 500,
      })),
    };
    const error = (await prepare(slow, "c1", T0 / 1000 + 30).catch((e: unknown) => e)) as
      ClockSkewError | undefined;
    // policy: 6 s ± 0.5 s is beyond 5 s for sure; counter: 6 s ± 2 s may be within it.
    expect(error).toBeInstanceOf(ClockSkewError);
    expect(Object.keys(error?.offsetsMs ?? {})).toEqual(["policy"]);
  });

  it("members without a measured clock (built by hand) get the controller's deadlines", async () => {
    const sent: Sent[] = [];
    const members: Member[] = [{ name: "policy", kind: "model" }];
    const participants: Participants = {
      client: fakeClient({ policy: 60_000 }, sent),
      token: "t",
      members,
    };
    await prepare(participants, "c1", T0 / 1000 + 30);
    expect(sent.map((s) => s.body.deadline_ts)).toEqual([T0 / 1000 + 30]);
  });
});

describe("gym ckpt's report of a skew refusal", () => {
  it("names each server with its offset and says to synchronise the clocks", () => {
    const error = new ClockSkewError("prepare", { counter: 61_234 }, 5_000);
    const reported = refusal(error, null, "prepare", "gym");
    expect(reported.message).toContain("counter's clock is 61.2 s ahead of this controller's");
    expect(reported.hint).toBe(
      "synchronise the clocks of counter with this machine's (chrony or NTP), then retry",
    );
  });
});
