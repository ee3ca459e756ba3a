/**
 * `gym ckpt prepare --id ID`: prepare every participant in stage order, print the blockers and
 * restarts, and keep the outcome for `commit`'s default scope. `checkpoint` reuses the pieces.
 */
import { prepare, type PrepareResult } from "../../client/coordination.js";
import { sortedCaptureKeys } from "../../identity/episode-id.js";
import type { PrepareReply } from "../../wire/control.js";
import { CliError, commandOf, type Io } from "../output.js";
import { writeLastPrepare } from "../state-file.js";
import { listCell, table } from "../table.js";
import { deadlineTs, printJson, type CkptOptions } from "./common.js";
import { kindOf, memberNames, withSession, type Session } from "./session.js";

/** The prepare's table: each participant's phase, blockers and restarts. */
export function prepareTable(session: Session, result: PrepareResult): string {
  return table(
    ["SERVER", "KIND", "PHASE", "BLOCKERS", "RESTARTS"],
    memberNames(session).map((name) => {
      const reply: PrepareReply | undefined = result.replies[name];
      if (reply === undefined) return [name, kindOf(session, name), "(not contacted)", "-", "-"];
      return [
        name,
        kindOf(session, name),
        reply.phase,
        reply.report.blocker_count === 0
          ? "-"
          : `${reply.report.blocker_count}: ${listCell(reply.report.blockers)}`,
        listCell(reply.report.restarts),
      ];
    }),
  );
}

/** The prepare as `--json` prints it. */
export function prepareJson(id: string, result: PrepareResult): unknown {
  return {
    checkpoint_id: id,
    prepared: result.prepared,
    replies: result.replies,
    blockers: result.blockers(),
    restarts: sortedCaptureKeys(result.restarts()),
  };
}

/** Prepares every participant and records the outcome in the state directory (`last-prepare.json`). */
export async function runPrepare(
  session: Session,
  id: string,
  options: CkptOptions,
): Promise<PrepareResult> {
  const result = await prepare(session.participants, id, deadlineTs(options));
  writeLastPrepare(session.paths.lastPrepareFile, {
    checkpoint_id: id,
    prepared: result.prepared,
    at: new Date().toISOString(),
    replies: { ...result.replies },
  });
  return result;
}

/** The failure of a prepare that did not reach prepared: the blockers, with `hint`. */
export function notPrepared(id: string, result: PrepareResult, hint: string): CliError {
  const blockers = result.blockers();
  const count = Object.values(result.replies).reduce(
    (sum, reply) => sum + (reply.phase === "prepared" ? 0 : reply.report.blocker_count),
    0,
  );
  return new CliError(
    `checkpoint ${id} is not prepared: ${count} blocker(s) on ${Object.keys(blockers).sort().join(", ")} ` +
      `(${Object.entries(blockers)
        .map(([name, keys]) => `${name}: ${listCell(keys, 5)}`)
        .join("; ")})`,
    hint,
  );
}

/** `gym ckpt prepare --id ID`. */
export async function prepareCommand(id: string, options: CkptOptions, io: Io): Promise<number> {
  const gym = commandOf(io);
  return await withSession(options, io, "prepare", async (session) => {
    const result = await runPrepare(session, id, options);
    if (options.json === true) printJson(io, prepareJson(id, result));
    else io.out(prepareTable(session, result));
    if (!result.prepared) {
      throw notPrepared(
        id,
        result,
        `the checkpoint stays open: prepare again with the same ID to keep waiting (${gym} ckpt prepare --id ${id} --deadline 60s), or abort it with \`${gym} ckpt resume --id ${id}\``,
      );
    }
    if (options.json !== true) {
      const restarts = result.restarts();
      io.out(
        `\ncheckpoint ${id} is prepared on ${session.participants.members.length} participant(s)` +
          (restarts.length > 0 ? `; ${restarts.length} restart(s) will not be captured` : "") +
          `\nnext: ${gym} ckpt commit --id ${id} --dir DIR`,
      );
    }
    return 0;
  });
}
