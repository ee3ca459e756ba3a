/**
 * The control plane of a multi-worker server's coordinator: the participant answering for every
 * worker, built from the never-serving participant of the coordinator's own server, and the
 * control plane over it.
 *
 * @see docs/workers.md
 */
import { ControlPlane, type ControlPlaneOptions } from "../control/control-plane.js";
import type { Operation } from "../wire/control.js";
import { CoordinatedParticipant } from "./coordinated-participant.js";
import { CoordinatedPolicyParticipant } from "./coordinated-policy.js";
import type { WorkerParticipant } from "./kind-hooks.js";
import { isPolicyParticipant } from "./policy-worker.js";
import type { WorkerPool } from "./worker-pool.js";

/** The coordinator's participant and the control plane that drives it. */
export interface Coordination {
  readonly participant: CoordinatedParticipant;
  readonly controlPlane: ControlPlane;
}

/**
 * Builds the coordinator's participant for `pool` from `prototype` and a control plane over it;
 * every worker's control calls go to that control plane. A model server's workers share state
 * (the capture ledger), so its coordinator does that part once ({@link CoordinatedPolicyParticipant});
 * every other kind gets the generic coordinator, which gathers each worker's own export and
 * installs each worker's share.
 */
export function coordinate(
  pool: WorkerPool,
  prototype: WorkerParticipant,
  options: Omit<ControlPlaneOptions, "spanning">,
): Coordination {
  let controlPlane: ControlPlane | null = null;
  const control = async (operation: string, body: unknown): Promise<unknown> =>
    await controlPlane!.dispatch(operation as Operation, body);
  const participant = isPolicyParticipant(prototype)
    ? new CoordinatedPolicyParticipant(pool, prototype, control)
    : new CoordinatedParticipant(pool, prototype, control);
  controlPlane = new ControlPlane(participant, { ...options, spanning: participant });
  return { participant, controlPlane };
}
