/**
 * Failpoints: named places in the commit, restore and capture-ledger import paths where a test
 * can crash the process or make the next step fail with an I/O error, to prove that every crash
 * leaves a checkpoint whole or absent and every I/O failure is a typed refusal.
 *
 * ## Off by default, free when off
 * Nothing is armed unless a test calls {@link setFailpoint} or the process starts with
 * `GYM_FAILPOINTS` set. With nothing armed, {@link failpoint} is one `Map.size` check.
 *
 * ## Arming a real process
 * `GYM_FAILPOINTS` is a comma-separated list of `name=action` or `name=action@N` (fire from the
 * N-th time the point is reached, counting from 1; earlier passes go through), read once when
 * this module loads:
 *
 * ```sh
 * GYM_FAILPOINTS="commit.records.fsync=eio,restore.install=crash@2" gym serve deployment.yaml
 * ```
 *
 * An unknown name or action fails the process at start, naming the known ones.
 *
 * ## Actions
 * - `crash`: `SIGKILL` to this process at once: no `finally`, no exit handler, no flush.
 * - `eio`, `enospc`, `eacces`, `erofs`: throws an `Error` whose `code`, `errno` and `syscall`
 *   look like the file system's own, where the step's I/O would have run.
 *
 * @example
 * ```ts
 * setFailpoint("commit.rename", "enospc");
 * try {
 *   await writer.write(records); // rejects: invalid_checkpoint_state, ENOSPC
 * } finally {
 *   clearFailpoints();
 * }
 * ```
 * @see docs/reliability.md
 */

/**
 * Every failpoint, in the order a commit, a restore and a ledger import reach them. Each fires
 * just before the step it names (an error takes the step's place).
 *
 * - `commit.records.written`: the records are streamed into the hidden temporary, not yet fsynced.
 * - `commit.records.fsync`: fsync of the records file.
 * - `commit.dirs.fsync`: fsync of `<kind>`, `gym` and `<checkpoint_dir>` (each).
 * - `commit.manifest.temp`: writing the manifest's hidden temporary.
 * - `commit.rename`: renaming the records file to `records-<sha256>.jsonl`.
 * - `commit.link`: hard-linking the manifest's temporary to `manifest.json` (publication).
 * - `commit.published`: fsync of the participant directory after the link.
 * - `restore.read`: opening the manifest and the records file.
 * - `restore.validate`: the digest and count verdict, after the streaming pass.
 * - `restore.fence`: marking the replaced attempts retired, before any bounded work.
 * - `restore.install`: handing the records to the participant's install.
 * - `ledger.import.clear`: removing what dead executions left in the capture directory.
 * - `ledger.import.fence`: creating the retire fences of the source attempts.
 * - `ledger.import.fsync`: fsync of the capture directory that makes clearing and fences durable.
 */
export const FAILPOINTS = [
  "commit.records.written",
  "commit.records.fsync",
  "commit.dirs.fsync",
  "commit.manifest.temp",
  "commit.rename",
  "commit.link",
  "commit.published",
  "restore.read",
  "restore.validate",
  "restore.fence",
  "restore.install",
  "ledger.import.clear",
  "ledger.import.fence",
  "ledger.import.fsync",
] as const;

/** The name of a failpoint. */
export type FailpointName = (typeof FAILPOINTS)[number];

/**
 * The points with no I/O of their own: the control plane's steps around the participant's
 * hooks. `crash` there is as meaningful as anywhere; an I/O action is thrown as an unexpected
 * failure of that step would be (an untyped error, which the control plane refuses as 409
 * `checkpoint_error` naming the step).
 * Every other point stands where real I/O runs and its error is handled as that I/O's own.
 */
export const CONTROL_FAILPOINTS: readonly FailpointName[] = ["restore.fence", "restore.install"];

/** The I/O errors a failpoint can raise, by action, with the errno Linux gives them. */
const IO_ERRORS = {
  eio: { code: "EIO", errno: -5, message: "i/o error" },
  enospc: { code: "ENOSPC", errno: -28, message: "no space left on device" },
  eacces: { code: "EACCES", errno: -13, message: "permission denied" },
  erofs: { code: "EROFS", errno: -30, message: "read-only file system" },
} as const;

/** What an armed failpoint does: kill the process, or raise one I/O error. */
export type FailpointAction = "crash" | keyof typeof IO_ERRORS;

/** Every action, for parsing and for tests that walk them. */
export const FAILPOINT_ACTIONS: readonly FailpointAction[] = [
  "crash",
  ...(Object.keys(IO_ERRORS) as (keyof typeof IO_ERRORS)[]),
];

/** The environment variable that arms failpoints in a real process. */
export const FAILPOINTS_ENV = "GYM_FAILPOINTS";

interface Armed {
  readonly action: FailpointAction;
  /** Passes that still go through before the action fires. */
  skip: number;
}

const armed = new Map<FailpointName, Armed>();

function isFailpointName(name: string): name is FailpointName {
  return (FAILPOINTS as readonly string[]).includes(name);
}

function isAction(action: string): action is FailpointAction {
  return (FAILPOINT_ACTIONS as readonly string[]).includes(action);
}

/**
 * Reaches the failpoint `name`: nothing unless it is armed; then crashes the process or throws
 * the armed I/O error (an `Error` with `code`, `errno` and `syscall` like `node:fs`'s own).
 */
export function failpoint(name: FailpointName): void {
  if (armed.size === 0) return;
  const entry = armed.get(name);
  if (entry === undefined) return;
  if (entry.skip > 0) {
    entry.skip -= 1;
    return;
  }
  if (entry.action === "crash") {
    // Immediate death as in a power cut of the process: nothing after this line runs.
    process.kill(process.pid, "SIGKILL");
    return;
  }
  const io = IO_ERRORS[entry.action];
  throw Object.assign(new Error(`${io.code}: ${io.message} (failpoint ${name})`), {
    code: io.code,
    errno: io.errno,
    syscall: name,
  });
}

/**
 * Arms `name` with `action` in this process (tests), or disarms it with `null`. With
 * `options.after`, the first `after` passes go through and the action fires from the next one.
 */
export function setFailpoint(
  name: FailpointName,
  action: FailpointAction | null,
  options: { readonly after?: number } = {},
): void {
  if (!isFailpointName(name)) throw new RangeError(`unknown failpoint ${JSON.stringify(name)}`);
  if (action === null) {
    armed.delete(name);
    return;
  }
  if (!isAction(action)) {
    throw new RangeError(
      `unknown failpoint action ${JSON.stringify(action)} (known: ${FAILPOINT_ACTIONS.join(", ")})`,
    );
  }
  const after = options.after ?? 0;
  if (!Number.isSafeInteger(after) || after < 0) {
    throw new RangeError(`failpoint 'after' must be a whole number >= 0, got ${after}`);
  }
  armed.set(name, { action, skip: after });
}

/** Disarms every failpoint. */
export function clearFailpoints(): void {
  armed.clear();
}

/** The armed failpoints and their actions (for logs and tests). */
export function armedFailpoints(): ReadonlyMap<FailpointName, FailpointAction> {
  return new Map([...armed].map(([name, entry]) => [name, entry.action]));
}

/**
 * Parses a `GYM_FAILPOINTS` value into its entries; throws a `RangeError` naming what is wrong
 * and what is known.
 */
export function parseFailpoints(
  text: string,
): { name: FailpointName; action: FailpointAction; after: number }[] {
  const entries: { name: FailpointName; action: FailpointAction; after: number }[] = [];
  for (const part of text.split(",")) {
    const item = part.trim();
    if (item === "") continue;
    const match = /^([a-z.]+)=([a-z]+)(?:@([1-9][0-9]*))?$/.exec(item);
    if (match === null) {
      throw new RangeError(
        `${FAILPOINTS_ENV}: ${JSON.stringify(item)} is not name=action or name=action@N`,
      );
    }
    const [, name = "", action = "", nth] = match;
    if (!isFailpointName(name)) {
      throw new RangeError(
        `${FAILPOINTS_ENV}: unknown failpoint ${JSON.stringify(name)} (known: ${FAILPOINTS.join(", ")})`,
      );
    }
    if (!isAction(action)) {
      throw new RangeError(
        `${FAILPOINTS_ENV}: unknown action ${JSON.stringify(action)} (known: ${FAILPOINT_ACTIONS.join(", ")})`,
      );
    }
    entries.push({ name, action, after: nth === undefined ? 0 : Number(nth) - 1 });
  }
  return entries;
}

/** Arms what `GYM_FAILPOINTS` names (replacing nothing else); a no-op when it is unset. */
export function armFromEnvironment(env: NodeJS.ProcessEnv = process.env): void {
  const text = env[FAILPOINTS_ENV];
  if (text === undefined || text === "") return;
  for (const { name, action, after } of parseFailpoints(text)) {
    setFailpoint(name, action, { after });
  }
}

armFromEnvironment();
