import { describe, expect, it } from "vitest";
import { encodeJson } from "#sdk/json/json-value.js";
import { frozenJson } from "#sdk/json/frozen-json.js";
import {
  freshLoopState,
  loadLoopState,
  snapshotOf,
  trajectoryOf,
  withTrajectory,
  type Item,
  type LoopState,
} from "../../../reference-servers/simple-agent/src/trajectory.js";
import { objectsWalked } from "../../support/objects-walked.js";

/** A loop state after `turns` model calls, its items frozen as the turn loop freezes them. */
function loopAfter(turns: number): LoopState {
  const s = freshLoopState({ session: "c" });
  for (let t = 1; t <= turns; t++) {
    s.step = t;
    const output = frozenJson([{ type: "message", role: "assistant", content: `answer ${t}` }]);
    s.turns.push(
      frozenJson({ turn: t, answer: output, reasoning: [], tool_call_count: 0, model_call: null }),
    );
    s.questionOutputs.push(s.newOutputs.length);
    s.newOutputs.push(...output);
    s.modelCalls.push({ turn: t, response_id: `resp_${t}` });
  }
  return s;
}

describe("the Simple Agent's boundary snapshot", () => {
  it("copies nothing while the loop's lists are still at their pinned lengths", () => {
    const s = loopAfter(3);
    const snapshot = snapshotOf(s)() as Record<string, unknown>;
    expect(snapshot.new_outputs).toBe(s.newOutputs);
    expect(snapshot.turns).toBe(s.turns);
    expect(snapshot.model_calls).toBe(s.modelCalls);
    expect(snapshot.resources_server_cookies).toBe(s.resourcesCookies);
    // Walked: the snapshot, its two cookie jars and three model call references. The turns
    // and outputs are frozen copies, counted without being walked.
    expect(objectsWalked(() => encodeJson(snapshot))).toBe(1 + 2 + 3);
  });

  it("pins what the loop had at the boundary once the lists grew", () => {
    const s = loopAfter(2);
    const pinned = snapshotOf(s);
    const grown = loopAfter(3);
    s.step = 3;
    s.newOutputs.push(grown.newOutputs[2] as Item);
    s.turns.push(grown.turns[2] as (typeof s.turns)[number]);
    s.questionOutputs.push(2);
    s.modelCalls.push({ turn: 3, response_id: "resp_3" });
    const snapshot = pinned() as Record<string, unknown[]>;
    expect(snapshot.step).toBe(2);
    expect(snapshot.new_outputs).toHaveLength(2);
    expect(snapshot.turns).toHaveLength(2);
    expect(snapshot.question_outputs).toEqual([0, 1]);
    expect(snapshot.model_calls).toHaveLength(2);
    expect(s.newOutputs).toHaveLength(3);
  });

  it("restores a boundary into frozen items, so the next commit does not walk them", () => {
    const boundary = JSON.parse(encodeJson(snapshotOf(loopAfter(2))() ?? null)) as never;
    const s = loadLoopState(boundary);
    expect(Object.isFrozen(s.newOutputs[0])).toBe(true);
    expect(Object.isFrozen(s.turns[1])).toBe(true);
    s.newOutputs.push({ type: "message" }); // the lists themselves still grow
    expect(s.newOutputs).toHaveLength(3);
  });
});

describe("the Simple Agent's observations", () => {
  it("are a frozen bundle that reuses the previous one's parts and costs a commit no walk", () => {
    const input = frozenJson([{ role: "user", content: "count" }]);
    const first = withTrajectory(null, trajectoryOf(loopAfter(2), input, "root", "completed"));
    expect(Object.isFrozen(first)).toBe(true);
    const second = withTrajectory(
      first,
      trajectoryOf(loopAfter(1), input, "activation-2", "completed"),
    );
    expect(second.records).toHaveLength(2);
    expect(second.records[0]).toBe(first.records[0]);
    expect(objectsWalked(() => encodeJson({ observations: second }))).toBe(1);
  });
});
