import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import {
  CheckpointError,
  CheckpointStateError,
  ERROR_CATALOGUE,
  EpisodeError,
  GymError,
  InvalidRequestError,
  UnauthorizedError,
} from "#sdk/errors.js";

/** The codes and statuses of the checkpoint contract, participant-specific ones included. */
const SPEC_CODES: Record<string, number> = {
  checkpoint_error: 409,
  stale_checkpoint: 409,
  checkpoint_conflict: 409,
  invalid_phase: 409,
  deadline_exceeded: 409,
  stale_attempt: 409,
  admission_closed: 409,
  restart_in_scope: 409,
  export_failed: 409,
  rollout_id_required: 400,
  invalid_rollout_id: 400,
  unauthorized: 401,
  invalid_checkpoint_state: 422,
  retire_incomplete: 409,
  activation_out_of_order: 409,
};

function documentedCodes(): Map<string, number> {
  const page = readFileSync(new URL("../../../docs/errors.md", import.meta.url), "utf8");
  const rows = [...page.matchAll(/^\| `([a-z_]+)` +\| (\d{3}) +\|/gm)];
  return new Map(rows.map((row) => [row[1] as string, Number(row[2])]));
}

describe("error catalogue", () => {
  it("holds every code of the contract with its exact status", () => {
    for (const [code, status] of Object.entries(SPEC_CODES)) {
      expect(ERROR_CATALOGUE[code as keyof typeof ERROR_CATALOGUE]?.status, code).toBe(status);
    }
  });

  it("names the same codes and statuses as docs/errors.md", () => {
    const documented = documentedCodes();
    const catalogued = new Map(
      Object.entries(ERROR_CATALOGUE).map(([code, entry]) => [code, entry.status as number]),
    );
    expect(documented).toEqual(catalogued);
  });

  it("builds every factory as its own class with its own code", () => {
    const cases: [GymError, new (...args: never[]) => GymError, string][] = [
      [CheckpointError.stale("c"), CheckpointError, "stale_checkpoint"],
      [CheckpointError.conflict("x"), CheckpointError, "checkpoint_conflict"],
      [CheckpointError.invalidPhase("commit", "idle"), CheckpointError, "invalid_phase"],
      [CheckpointError.deadline("the write"), CheckpointError, "deadline_exceeded"],
      [CheckpointError.exportFailed("c", "why"), CheckpointError, "export_failed"],
      [CheckpointError.restartInScope(["b", "a"]), CheckpointError, "restart_in_scope"],
      [EpisodeError.staleAttempt("r-a1", 1), EpisodeError, "stale_attempt"],
      [EpisodeError.admissionClosed("seed"), EpisodeError, "admission_closed"],
      [EpisodeError.rolloutIdRequired("verify"), EpisodeError, "rollout_id_required"],
      [EpisodeError.invalidRolloutId("bad"), EpisodeError, "invalid_rollout_id"],
      [new CheckpointStateError("x"), CheckpointStateError, "invalid_checkpoint_state"],
      [new UnauthorizedError(), UnauthorizedError, "unauthorized"],
      [new InvalidRequestError("x"), InvalidRequestError, "invalid_request"],
    ];
    for (const [error, cls, code] of cases) {
      expect(error).toBeInstanceOf(cls);
      expect(error).toBeInstanceOf(GymError);
      expect(error.code).toBe(code);
      expect(error.status).toBe(ERROR_CATALOGUE[error.code].status);
      expect(error.toEnvelope().error.code).toBe(code);
      expect(error.name).toBe(cls.name);
    }
  });

  it("lists restart_in_scope keys sorted", () => {
    expect(CheckpointError.restartInScope(["b", "a"]).detail).toContain("a, b");
  });

  it("keeps the cause", () => {
    const cause = new Error("disk full");
    expect(new CheckpointStateError("cannot write", null, { cause }).cause).toBe(cause);
  });

  it("adds the issues to an invalid request's envelope", () => {
    const envelope = new InvalidRequestError("bad", [
      { path: ["a", 0], message: "m" },
    ]).toEnvelope();
    expect(envelope.error.issues).toEqual([{ path: ["a", 0], message: "m" }]);
  });
});

describe("typed errors across copies of the package", () => {
  it("recognises a typed error built by another copy (dist/ beside the sources) by its brand", () => {
    // What another copy's CheckpointError looks like to this one: same brand, other prototype.
    const foreign = Object.assign(Object.create(Error.prototype) as Error, {
      code: "worker_lost",
      status: 409,
      [Symbol.for("gym-participant-sdk.GymError")]: true,
    });
    expect(foreign instanceof GymError).toBe(true);
    // A subclass keeps the prototype check: the foreign error is no CheckpointError of ours.
    expect(foreign instanceof CheckpointError).toBe(false);
    expect(new Error("plain") instanceof GymError).toBe(false);
    expect(
      CheckpointError.workerLost("prepare", "worker 1 exited") instanceof CheckpointError,
    ).toBe(true);
  });
});
