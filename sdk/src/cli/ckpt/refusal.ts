/**
 * A refused or failed coordination step as `gym ckpt` reports it: each server's code and detail
 * in a table, and one hint, chosen from the remote codes, saying what to do next.
 */
import path from "node:path";
import { ClockSkewError, type CoordinationError } from "../../client/coordination.js";
import { CliError } from "../output.js";
import type { StatePaths } from "../state-io.js";
import type { RunState, StateServer } from "../state-schema.js";
import { table } from "../table.js";

/** What to do about each remote code; `gym` is the command prefix ({@link commandOf}). */
const CODE_HINTS: Record<string, (gym: string) => string> = {
  checkpoint_conflict: (gym) =>
    `another checkpoint is open on these participants: see \`${gym} ckpt status\`, then resume it with \`${gym} ckpt resume --id <its id>\``,
  invalid_phase: (gym) =>
    `a participant is not in the phase this step needs: see \`${gym} ckpt status\` (commit needs a prepared checkpoint; retire and forget need none open)`,
  stale_checkpoint: () => "this ID was already resumed: start over with a new ID",
  deadline_exceeded: () => "the deadline passed first: retry with a longer --deadline",
  unauthorized: () =>
    "the control token does not match: check checkpoint.control_auth_token in the deployment file, then restart the servers",
  export_failed: (gym) =>
    `this checkpoint can no longer commit: abort it with \`${gym} ckpt resume --id ID\` and take a new one`,
  restart_in_scope: () =>
    "the scope names an episode reported as a restart: leave it out of --episodes",
  retire_incomplete: () => "a retire did not finish: retire those episodes again, then forget",
  stale_attempt: (gym) =>
    `those attempts are retired here (a failed restore retires its replacements): forget their rollouts first (\`${gym} ckpt forget --rollouts ID,...\`), or restore into freshly started servers`,
  checkpoint_error: () =>
    "the participant refused this step for the reason in DETAIL (its log says more): fix that, then take the step again",
};

/**
 * What to do about `invalid_checkpoint_state`, which covers both sides of the store: a commit
 * that cannot write (the directory holds another commit, or cannot be written) and a restore
 * that cannot read. The details say which.
 */
function invalidStateHint(operation: string, details: readonly string[], gym: string): string {
  if (details.some((detail) => /already holds a different commit|fresh directory/.test(detail))) {
    return "the directory already holds another checkpoint's commit: write each checkpoint to a fresh directory (a new --dir)";
  }
  if (operation === "commit") {
    return "the checkpoint could not be written (see DETAIL): fix what it names (permissions, disk space, a record that is not JSON), then take the checkpoint again into a fresh --dir";
  }
  // The failed restore retired its replacements everywhere: the same processes refuse them now.
  return `the checkpoint directory cannot be restored from (see DETAIL): check it with \`${gym} ckpt inspect DIR\`, then restore it or another checkpoint into freshly started servers (this restore retired its replacement attempts here)`;
}

/** Where a refusal happened: the run, when its state file was read. */
interface RefusalContext {
  readonly state: RunState;
  readonly paths: StatePaths;
  /** Servers whose process is gone, and what to do about them. */
  readonly dead?: readonly StateServer[];
  readonly restartHint?: string | null;
}

/** The logs to read about `names`: their files when the run is known. */
function logsOf(context: RefusalContext | null, names: readonly string[]): string {
  if (context === null) return "the servers' logs";
  const logs = names.map(
    (name) => context.state.servers[name]?.log ?? path.join(context.paths.logsDir, `${name}.log`),
  );
  return logs.length === 1 ? `its log, ${logs[0]}` : `their logs: ${logs.join(", ")}`;
}

/** What to do about a refusal: the hint of the first remote code that has one, else where to look. */
function refusalHint(
  error: CoordinationError,
  names: readonly string[],
  codes: Readonly<Record<string, string>>,
  context: RefusalContext | null,
  gym: string,
): string {
  if (error instanceof ClockSkewError) {
    return `synchronise the clocks of ${names.join(", ")} with this machine's (chrony or NTP), then retry`;
  }
  for (const code of new Set(names.map((name) => codes[name]))) {
    if (code === "invalid_checkpoint_state") {
      return invalidStateHint(
        error.operation,
        names.filter((name) => codes[name] === code).map((name) => error.failures[name] ?? ""),
        gym,
      );
    }
    if (code === "checkpoint_error" && error.operation === "restore") {
      return `a restore must go to servers that have served nothing yet: stop the deployment (\`${gym} stop\`), start it again (\`${gym} serve\`), then restore`;
    }
    const hint = code === undefined ? undefined : CODE_HINTS[code];
    if (hint !== undefined) return hint(gym);
  }
  if (names.length === 0) {
    return "the deployment's model server does not take part in checkpoints: serve it with checkpointing on (a PolicyModelServer), or look at its log";
  }
  const unreachable = names.filter((name) => codes[name] === undefined);
  // A server that did not answer because its process is gone: say so, not "is it running?".
  const gone = unreachable.filter((name) => context?.dead?.some((entry) => entry.name === name));
  if (gone.length > 0 && context?.restartHint) {
    return `${gone.join(", ")} ${gone.length === 1 ? "is" : "are"} not running (named above): ${context.restartHint}`;
  }
  if (unreachable.length > 0) {
    const serve =
      context === null
        ? `\`${gym} serve <deployment.yaml>\``
        : `\`${gym} serve ${context.state.deployment_file}\``;
    return `is the deployment running? if not, start it with ${serve}; if it is, see why ${unreachable.join(", ")} did not answer in ${logsOf(context, unreachable)}`;
  }
  return `see why it was refused in ${logsOf(context, names)}`;
}

/** A failure's detail without the server name the SERVER column shows already. */
function detailOf(name: string, description: string): string {
  return description.startsWith(`${name}: `) ? description.slice(name.length + 2) : description;
}

/** A coordination step was refused or failed; printable per server. */
export class RefusalError extends CliError {
  override readonly name = "RefusalError";
  constructor(
    readonly operation: string,
    readonly failures: Readonly<Record<string, string>>,
    readonly codes: Readonly<Record<string, string>>,
    message: string,
    hint: string,
    json: unknown,
  ) {
    super(message, hint);
    this.json = json;
  }
}

/** The {@link RefusalError} a coordination failure is reported as; `what` names the step. */
export function refusal(
  error: CoordinationError,
  context: RefusalContext | null,
  what: string,
  gym: string,
): RefusalError {
  const codes = error.codes();
  const names = Object.keys(error.failures).sort();
  const hint = refusalHint(error, names, codes, context, gym);
  const body =
    names.length === 0
      ? error.message
      : `${what} failed on ${names.length} participant(s):\n` +
        table(
          ["SERVER", "CODE", "DETAIL"],
          names.map((name) => [
            name,
            codes[name] ?? "-",
            detailOf(name, error.failures[name] ?? ""),
          ]),
        );
  return new RefusalError(error.operation, error.failures, codes, body, hint, {
    error: {
      operation: error.operation,
      message: error.message,
      failures: error.failures,
      codes,
    },
  });
}
