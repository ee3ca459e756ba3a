/** `gym ckpt status`: every participant's phase, checkpoint, lease and report, as a table. */
import { status } from "../../client/coordination.js";
import { DEFAULT_DEADLINE_MS } from "../defaults.js";
import { formatDuration } from "../duration.js";
import type { Io } from "../output.js";
import { listCell, table } from "../table.js";
import { printJson, type CkptOptions } from "./common.js";
import { kindOf, memberNames, withSession } from "./session.js";

/** `live/expected`, and the workers that died, for a multi-worker server; `-` otherwise. */
function workersCell(reply: Record<string, unknown>): string {
  if (typeof reply.expected_workers !== "number") return "-";
  const lost = Array.isArray(reply.lost_workers)
    ? (reply.lost_workers as { index: number; pid: number; exit: string }[])
    : [];
  const live = `${String(reply.workers)}/${reply.expected_workers}`;
  if (lost.length === 0) return live;
  const named = lost.map((worker) => `worker ${worker.index} pid ${worker.pid} ${worker.exit}`);
  return `${live}, LOST: ${named.join("; ")}`;
}

function leaseCell(expiresAt: number | null): string {
  if (expiresAt === null) return "-";
  const left = expiresAt * 1000 - Date.now();
  return left <= 0 ? "expired" : `${formatDuration(left)} left`;
}

/** `gym ckpt status`: discovery and the status calls together take at most `--deadline`. */
export async function statusCommand(options: CkptOptions, io: Io): Promise<number> {
  const deadlineMs = options.deadlineMs ?? DEFAULT_DEADLINE_MS;
  const end = Date.now() + deadlineMs;
  return await withSession(
    options,
    io,
    "status",
    async (session) => {
      const replies = await status(session.participants, Math.max(1, end - Date.now()));
      const others = Object.keys(session.state.deployment.servers)
        .filter((name) => !(name in replies))
        .sort();
      if (options.json === true) {
        printJson(io, { servers: replies, not_participants: others });
        return 0;
      }
      // The WORKERS column appears only when a server runs several workers.
      const multiWorker = Object.values(replies).some(
        (reply) => typeof (reply as Record<string, unknown>).expected_workers === "number",
      );
      const rows = memberNames(session).map((name) => {
        const reply = replies[name];
        if (reply === undefined) return [name, kindOf(session, name), "?"];
        const row = [
          name,
          reply.kind,
          reply.phase,
          reply.checkpoint_id ?? "-",
          leaseCell(reply.lease_expires_at),
          reply.report.ready ? "yes" : "no",
          reply.report.blocker_count === 0
            ? "-"
            : `${reply.report.blocker_count}: ${listCell(reply.report.blockers)}`,
          listCell(reply.report.restarts),
          String(reply.retired_rollouts),
        ];
        if (multiWorker) row.push(workersCell(reply as Record<string, unknown>));
        return row;
      });
      for (const name of others) {
        rows.push([
          name,
          session.state.deployment.servers[name]?.kind ?? "?",
          "(not a participant)",
        ]);
      }
      io.out(
        table(
          [
            "SERVER",
            "KIND",
            "PHASE",
            "CHECKPOINT",
            "LEASE",
            "READY",
            "BLOCKERS",
            "RESTARTS",
            "RETIRED",
            ...(multiWorker ? ["WORKERS"] : []),
          ],
          rows,
        ),
      );
      return 0;
    },
    deadlineMs,
  );
}
