/**
 * A verb's session with the running deployment: the state file read, the participants
 * discovered through a {@link ServerClient}, refusals reported per server, and the client closed
 * when the verb is done.
 */
import { CoordinationError, discover, type Participants } from "../../client/coordination.js";
import { ServerClient } from "../../client/server-client.js";
import { CliError, commandOf, type Io } from "../output.js";
import { openRun } from "../open-run.js";
import { statePaths } from "../state-file.js";
import type { StatePaths } from "../state-io.js";
import type { RunState, StateServer } from "../state-schema.js";
import type { CkptOptions } from "./common.js";
import { refusal } from "./refusal.js";

/** A running deployment's participants, ready for coordination. */
export interface Session {
  readonly state: RunState;
  readonly paths: StatePaths;
  readonly participants: Participants;
  readonly client: ServerClient;
  /** Servers the state file lists whose process is gone. */
  readonly dead: readonly StateServer[];
  /** What to do about {@link dead}, or null when every server runs. */
  readonly restartHint: string | null;
}

/**
 * Reads the state file and discovers the participants. `probeTimeoutMs` bounds each discovery
 * probe (default: the SDK's discovery default).
 */
async function openSession(
  options: CkptOptions,
  io: Io,
  probeTimeoutMs?: number,
): Promise<Session> {
  const gym = commandOf(io);
  const { stateFile, state, dead, restartHint } = openRun(options, io);
  const paths = statePaths(stateFile);
  const checkpoint = state.deployment.checkpoint;
  if (checkpoint?.enabled !== true || !checkpoint.control_auth_token) {
    throw new CliError(
      `checkpointing is off in ${state.deployment_file}`,
      `turn it on (checkpoint: {enabled: true, control_auth_token: ...}) and restart the deployment with \`${gym} serve\``,
    );
  }
  const client = new ServerClient(state.deployment);
  try {
    const requireModel = Object.values(state.deployment.servers).some(
      (server) => server.kind === "model",
    );
    const participants = await discover(client, checkpoint.control_auth_token, {
      requireModel,
      ...(probeTimeoutMs === undefined ? {} : { probeTimeoutMs }),
    });
    return { state, paths, participants, client, dead, restartHint };
  } catch (error) {
    await client.close();
    if (error instanceof CoordinationError)
      throw refusal(
        error,
        { state, paths, dead, restartHint },
        "discovering the participants",
        gym,
      );
    throw error;
  }
}

/**
 * Runs `body` in a fresh session and closes it after; a coordination failure is reported as a
 * {@link RefusalError} naming `what`.
 */
export async function withSession<T>(
  options: CkptOptions,
  io: Io,
  what: string,
  body: (session: Session) => Promise<T>,
  probeTimeoutMs?: number,
): Promise<T> {
  const session = await openSession(options, io, probeTimeoutMs);
  try {
    return await body(session);
  } catch (error) {
    if (error instanceof CoordinationError) throw refusal(error, session, what, commandOf(io));
    throw error;
  } finally {
    await session.client.close();
  }
}

/** The kind of participant `name`, or `?` when it was not discovered. */
export function kindOf(session: Session, name: string): string {
  return session.participants.members.find((member) => member.name === name)?.kind ?? "?";
}

/** The participants' names, in discovery order: the rows of every table. */
export function memberNames(session: Session): string[] {
  return session.participants.members.map((member) => member.name);
}
