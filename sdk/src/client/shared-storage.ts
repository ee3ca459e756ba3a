/**
 * The controller's check that a checkpoint directory is shared: every participant writes its
 * own subdirectory from its own machine, and the checkpoint is usable only if every machine
 * sees all of them. A directory on a disk of each node passes every commit and fails only at
 * the restore, on another machine or after the node is gone; checked here, it fails the commit
 * before anything is published.
 *
 * @see docs/storage.md
 */
import { hostname } from "node:os";
import path from "node:path";
import { CheckpointNotSharedError, type UnsharedState } from "../errors.js";
import { stateHere } from "../store/visibility.js";
import type { ResolvedDeployment } from "../wire/deployment.js";
import { ManifestSchema, type CommitReply } from "../wire/storage.js";
import type { Member } from "./coordination.js";

/** Who wrote each participant's state of a checkpoint: server name → host name (null: unknown). */
export type Writers = Readonly<Record<string, string | null>>;

/** The host name each commit reply's manifest records (`host`), by server. */
export function writersOf(
  replies: Readonly<Record<string, CommitReply>>,
): Record<string, string | null> {
  const writers: Record<string, string | null> = {};
  for (const [server, reply] of Object.entries(replies)) {
    const host = (reply.manifest as { host?: unknown } | undefined)?.host;
    writers[server] = typeof host === "string" ? host : null;
  }
  return writers;
}

/**
 * Checks, after every commit reply and before the checkpoint is published, that this machine
 * sees each participant's committed state at `checkpointDir`: its directory, the manifest its
 * reply carried, and the records file that manifest names.
 *
 * @throws CheckpointNotSharedError naming every participant whose state is missing or another
 * commit's here, the path, and the host that wrote it
 */
export async function checkCommitShared(
  deployment: ResolvedDeployment,
  checkpointDir: string,
  replies: Readonly<Record<string, CommitReply>>,
): Promise<void> {
  const top = path.resolve(checkpointDir);
  const unshared = await Promise.all(
    Object.entries(replies).map(async ([server, reply]): Promise<UnsharedState | null> => {
      const address = addressOf(deployment, server);
      const parsed = ManifestSchema.safeParse(reply.manifest);
      // A reply without a manifest breaks the contract, which is not this check's to report:
      // nothing in it says where to look.
      if (!parsed.success) return null;
      const manifest = parsed.data;
      const here = await stateHere(
        { checkpointDir: top, kind: manifest.kind, instance: manifest.instance },
        manifest,
      );
      if (here.problem === null) return null;
      const host = (manifest as { host?: unknown }).host;
      return {
        server,
        path: here.path,
        host: typeof host === "string" ? host : null,
        address,
        problem: here.problem,
      };
    }),
  );
  throwUnshared("commit", unshared);
}

/**
 * Checks, before a restore is sent, that this machine sees the manifest of every member at
 * `checkpointDir` (each participant restores from `<checkpoint_dir>/gym/<kind>/<name>`).
 * `writers` (from what was published) names the host that wrote each one.
 *
 * @throws CheckpointNotSharedError naming every member whose manifest is missing here
 */
export async function checkRestoreShared(
  deployment: ResolvedDeployment,
  checkpointDir: string,
  members: readonly Member[],
  writers: Writers = {},
): Promise<void> {
  const top = path.resolve(checkpointDir);
  const unshared = await Promise.all(
    members.map(async (member): Promise<UnsharedState | null> => {
      const here = await stateHere(
        { checkpointDir: top, kind: member.kind, instance: member.name },
        null,
      );
      if (here.problem === null) return null;
      return {
        server: member.name,
        path: here.path,
        host: writers[member.name] ?? null,
        address: addressOf(deployment, member.name),
        problem: here.problem,
      };
    }),
  );
  throwUnshared("restore", unshared);
}

function throwUnshared(
  operation: "commit" | "restore",
  found: readonly (UnsharedState | null)[],
): void {
  const unshared = found
    .filter((entry): entry is UnsharedState => entry !== null)
    .sort((a, b) => (a.server < b.server ? -1 : a.server > b.server ? 1 : 0));
  if (unshared.length > 0) throw new CheckpointNotSharedError(operation, unshared, hostname());
}

/** The host of the server's URL in the deployment, or null for a server it does not name. */
function addressOf(deployment: ResolvedDeployment, server: string): string | null {
  const url = deployment.servers[server]?.url;
  if (url === undefined) return null;
  try {
    return new URL(url).hostname;
  } catch {
    return null;
  }
}
