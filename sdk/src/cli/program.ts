/**
 * The `gym` command: serve a deployment, stop it, drive checkpoints from a shell, inspect a
 * checkpoint directory, write the OpenAPI documents. {@link runCli} runs it in-process (tests do)
 * and returns the exit status: 0 success, 1 failed or refused, 2 bad usage.
 *
 * @see docs/deployment.md
 */
import { Command, CommanderError, Option } from "commander";
import { CheckpointIdSchema } from "../wire/control.js";
import type { CommitScope } from "./ckpt.js";
import {
  DEFAULT_DEADLINE_MS,
  DEFAULT_GRACE_MS,
  DEFAULT_HEALTH_TIMEOUT_MS,
  sdkVersion,
  splitList,
} from "./defaults.js";
import { formatDuration, parseDuration } from "./duration.js";
import {
  CliError,
  asCliError,
  EXIT_FAILED,
  EXIT_OK,
  EXIT_USAGE,
  UsageError,
  commandOf,
  processIo,
  type Io,
} from "./output.js";

const ROOT_HELP = `
Commands and their options:
  gym serve <deployment.yaml>   start every server, wait for GET /health, print the table
      --detach                  return once every server is up (a background supervisor stays)
      --foreground              also stream every server's log here, prefixed by its name
      --only NAME[,NAME]        start only these (the others must already run per the state file)
      --state FILE              the state file (default: .gym/run.json next to the deployment)
      --health-timeout 30s      how long each server gets to answer GET /health
      --grace 15s               SIGTERM → SIGKILL delay when stopping
  gym stop [deployment.yaml]    stop every server of the run (SIGTERM, then SIGKILL after --grace);
                                nothing running is not an error
      --kill                    SIGKILL every process group at once (simulates a crash)
      --only NAME[,NAME]  --state FILE  --deployment FILE  --grace 15s  --json
  gym ckpt <verb>               the checkpoint controller from a shell (gym ckpt --help):
      status [--deadline 30s]                 every participant's status
      prepare --id ID [--deadline 30s]        prepare in stage order; blockers and restarts
      commit --id ID --dir DIR [--scope continued|all] [--episodes FILE]
      resume --id ID                          resume in reverse stage order
      checkpoint --dir DIR [--deadline 30s]   prepare + commit + resume with a fresh ID, timed
      restore --id ID --dir DIR (--episodes FILE | --all) [--resume]
      retire (--episodes FILE | --keys KEY[,KEY]) [--id ID]
                                              stop attempts everywhere, callers first
      forget --rollouts ID[,ID] [--id ID]     drop the retired marks of finished rollouts
      inspect DIR                             verify and list a checkpoint, no server needed
      every verb but inspect: --state FILE | --deployment FILE, --json, --deadline DURATION
  gym openapi [--out DIR] [--check] [--deployment FILE]
                                              write (or check) the generated OpenAPI documents:
                                              the control contract, or each server's

Durations: 500ms, 30s, 2m. Capture keys: task-3 (attempt 0), task-3-a1 (attempt 1).
--episodes FILE is always a file of capture keys, one per line; --keys lists them inline.
Only serve and stop take the deployment file as an argument; ckpt verbs take --deployment FILE.
Exit status: 0 success; 1 failed or refused (the reason and what to do are printed); 2 bad usage.

Example:
  gym serve deployment.yaml --detach
  gym ckpt checkpoint --dir /tmp/c
  gym ckpt inspect /tmp/c
  gym stop --kill                      # a crash
  gym serve deployment.yaml --detach
  gym ckpt restore --id r1 --dir /tmp/c --all --resume

See docs/deployment.md and docs/controller.md.`;

const CKPT_HELP = `
Every verb but inspect reads the run's state file (--state FILE, or .gym/run.json next to
--deployment FILE, or ./.gym/run.json), discovers the participants and prints a table, or the
replies as JSON with --json. --deadline bounds each step (default ${formatDuration(DEFAULT_DEADLINE_MS)}).

commit's default scope (continued) sends episode_ids: null when the last prepare of that ID
reported no restarts; when it reported some, pass --episodes FILE (capture keys in flight, one
per line) and the restarts are left out, or --scope all.

--episodes FILE is a file of capture keys, one per line, for every verb that takes it; retire
also takes the keys inline with --keys KEY[,KEY].

Exit status: 0 success; 1 refused (each server's error code is printed, with what to do); 2 bad usage.`;

interface Handlers {
  readonly io: Io;
  /** Records the status an action finished with. */
  exit(code: number): void;
  /** Whether the running action prints JSON (errors then also go to stdout as JSON). */
  json(enabled: boolean): void;
}

function checkpointId(value: string, flag = "--id"): string {
  const parsed = CheckpointIdSchema.safeParse(value);
  if (!parsed.success) {
    throw new UsageError(
      `${flag} ${JSON.stringify(value)} is not a checkpoint ID`,
      "use letters, digits, '.', '_' and '-', starting with a letter or digit (at most 128)",
    );
  }
  return parsed.data;
}

function duration(value: string | undefined, flag: string, fallback: number): number {
  return value === undefined ? fallback : parseDuration(value, flag);
}

function positiveDuration(value: string | undefined, flag: string, fallback: number): number {
  const ms = duration(value, flag, fallback);
  if (ms <= 0) throw new UsageError(`${flag} must be longer than 0`, `e.g. ${flag} 30s`);
  return ms;
}

interface CommonCkptFlags {
  state?: string;
  deployment?: string;
  json?: boolean;
  deadline?: string;
}

function common(flags: CommonCkptFlags): {
  state?: string;
  deployment?: string;
  json?: boolean;
  deadlineMs: number;
} {
  return {
    state: flags.state,
    deployment: flags.deployment,
    json: flags.json,
    deadlineMs: duration(flags.deadline, "--deadline", DEFAULT_DEADLINE_MS),
  };
}

function withCommon(command: Command): Command {
  return command
    .option("--state <file>", "the run's state file (default: .gym/run.json)")
    .option("--deployment <file>", "find the state file next to this deployment file")
    .option("--json", "print the replies as JSON")
    .option("--deadline <duration>", "bound of each step, e.g. 30s", "30s");
}

/** Builds the `gym` program; actions report their status through `handlers`. */
function buildProgram(handlers: Handlers): Command {
  const { io } = handlers;
  const program = new Command("gym");
  program
    .description("Serve a gym deployment, drive its checkpoints, inspect checkpoint directories.")
    .version(sdkVersion(), "-V, --version", "print the version")
    .helpOption("-h, --help", "show help")
    .exitOverride()
    .configureOutput({
      writeOut: (text) => io.out(text.replace(/\n$/, "")),
      writeErr: (text) => io.err(text.replace(/\n$/, "")),
    })
    .showHelpAfterError("(run the command with --help for its usage)")
    .addHelpText("after", ROOT_HELP);

  const run =
    <A extends unknown[]>(action: (...args: A) => Promise<number>) =>
    async (...args: A): Promise<void> => {
      handlers.exit(await action(...args));
    };

  program
    .command("serve")
    .description("start every server of a deployment and wait until each is healthy")
    .argument("<deployment>", "the deployment file (YAML or JSON)")
    .option("--state <file>", "the state file (default: .gym/run.json next to the deployment)")
    .option("--only <names>", "start only these servers (NAME[,NAME]); the others must be running")
    .option("--detach", "return once every server is up, leaving a background supervisor")
    .option("--foreground", "also stream every server's log, prefixed by its name")
    .option("--health-timeout <duration>", "how long each server gets to answer GET /health", "30s")
    .option("--grace <duration>", "SIGTERM → SIGKILL delay when stopping", "15s")
    .action(
      run(
        async (
          deployment: string,
          flags: {
            state?: string;
            only?: string;
            detach?: boolean;
            foreground?: boolean;
            healthTimeout?: string;
            grace?: string;
          },
        ) => {
          const { serve } = await import("./launcher.js");
          return await serve(
            {
              deploymentFile: deployment,
              state: flags.state,
              only: flags.only === undefined ? undefined : splitList(flags.only, "--only"),
              detach: flags.detach === true,
              foreground: flags.foreground === true,
              healthTimeoutMs: positiveDuration(
                flags.healthTimeout,
                "--health-timeout",
                DEFAULT_HEALTH_TIMEOUT_MS,
              ),
              graceMs: duration(flags.grace, "--grace", DEFAULT_GRACE_MS),
            },
            io,
          );
        },
      ),
    );

  program
    .command("stop")
    .description("stop the servers of a run: SIGTERM each process group, SIGKILL after --grace")
    .argument("[deployment]", "the deployment file the run was started from (as --deployment)")
    .option("--state <file>", "the run's state file (default: .gym/run.json)")
    .option("--deployment <file>", "find the state file next to this deployment file")
    .option("--kill", "SIGKILL every process group at once (simulates a crash)")
    .option("--only <names>", "stop only these servers (NAME[,NAME])")
    .option("--grace <duration>", "SIGTERM → SIGKILL delay", "15s")
    .option("--json", "print the outcome as JSON")
    .action(
      run(
        async (
          positional: string | undefined,
          flags: {
            state?: string;
            deployment?: string;
            kill?: boolean;
            only?: string;
            grace?: string;
            json?: boolean;
          },
        ) => {
          handlers.json(flags.json === true);
          if (positional !== undefined && flags.deployment !== undefined) {
            throw new UsageError(
              "the deployment file is given twice (as an argument and with --deployment)",
              `pass it once: ${commandOf(io)} stop FILE, or ${commandOf(io)} stop --deployment FILE`,
            );
          }
          const { stop } = await import("./launcher.js");
          return await stop(
            {
              state: flags.state,
              deployment: positional ?? flags.deployment,
              kill: flags.kill === true,
              only: flags.only === undefined ? undefined : splitList(flags.only, "--only"),
              graceMs: duration(flags.grace, "--grace", DEFAULT_GRACE_MS),
              json: flags.json === true,
            },
            io,
          );
        },
      ),
    );

  const ckpt = program
    .command("ckpt")
    .description("drive checkpoints of the running deployment (gym ckpt --help for the verbs)")
    .addHelpText("after", CKPT_HELP);

  withCommon(ckpt.command("status").description("every participant's status, as a table")).action(
    run(async (flags: CommonCkptFlags) => {
      handlers.json(flags.json === true);
      const { statusCommand } = await import("./ckpt.js");
      return await statusCommand(common(flags), io);
    }),
  );

  withCommon(
    ckpt
      .command("prepare")
      .description("prepare every participant in stage order; prints blockers and restarts")
      .requiredOption("--id <id>", "the checkpoint ID"),
  ).action(
    run(async (flags: CommonCkptFlags & { id: string }) => {
      handlers.json(flags.json === true);
      const { prepareCommand } = await import("./ckpt.js");
      return await prepareCommand(checkpointId(flags.id), common(flags), io);
    }),
  );

  const scopeOption = (): Option =>
    new Option(
      "--scope <scope>",
      "what to commit: the continued episodes of the last prepare, or all",
    )
      .choices(["continued", "all"])
      .default("continued");

  withCommon(
    ckpt
      .command("commit")
      .description("commit the prepared checkpoint to a directory")
      .requiredOption("--id <id>", "the checkpoint ID (prepared)")
      .requiredOption("--dir <dir>", "the checkpoint directory")
      .addOption(scopeOption())
      .option("--episodes <file>", "the continued episodes: capture keys, one per line"),
  ).action(
    run(
      async (
        flags: CommonCkptFlags & { id: string; dir: string; scope: CommitScope; episodes?: string },
      ) => {
        handlers.json(flags.json === true);
        const { commitCommand } = await import("./ckpt.js");
        return await commitCommand(
          checkpointId(flags.id),
          flags.dir,
          { ...common(flags), scope: flags.scope, episodes: flags.episodes },
          io,
        );
      },
    ),
  );

  withCommon(
    ckpt
      .command("resume")
      .description("resume every participant in reverse stage order (also aborts a checkpoint)")
      .requiredOption("--id <id>", "the checkpoint ID"),
  ).action(
    run(async (flags: CommonCkptFlags & { id: string }) => {
      handlers.json(flags.json === true);
      const { resumeCommand } = await import("./ckpt.js");
      return await resumeCommand(checkpointId(flags.id), common(flags), io);
    }),
  );

  withCommon(
    ckpt
      .command("checkpoint")
      .description("prepare + commit + resume with a fresh ID; prints the timings per stage")
      .requiredOption("--dir <dir>", "the checkpoint directory")
      .addOption(scopeOption())
      .option("--episodes <file>", "the continued episodes: capture keys, one per line"),
  ).action(
    run(async (flags: CommonCkptFlags & { dir: string; scope: CommitScope; episodes?: string }) => {
      handlers.json(flags.json === true);
      const { checkpointCommand } = await import("./ckpt.js");
      return await checkpointCommand(
        flags.dir,
        { ...common(flags), scope: flags.scope, episodes: flags.episodes },
        io,
      );
    }),
  );

  withCommon(
    ckpt
      .command("restore")
      .description("restore a checkpoint into fresh processes, all or nothing")
      .requiredOption("--id <id>", "the restore's checkpoint ID (resume it with the same ID)")
      .requiredOption("--dir <dir>", "the checkpoint directory")
      .option("--episodes <file>", "the episodes to continue: capture keys, one per line")
      .option("--all", "continue every episode the checkpoint holds")
      .option("--resume", "resume right after a successful restore"),
  ).action(
    run(
      async (
        flags: CommonCkptFlags & {
          id: string;
          dir: string;
          episodes?: string;
          all?: boolean;
          resume?: boolean;
        },
      ) => {
        handlers.json(flags.json === true);
        const { restoreCommand } = await import("./ckpt.js");
        return await restoreCommand(
          checkpointId(flags.id),
          flags.dir,
          {
            ...common(flags),
            episodes: flags.episodes,
            all: flags.all === true,
            resume: flags.resume === true,
          },
          io,
        );
      },
    ),
  );

  withCommon(
    ckpt
      .command("retire")
      .description("stop these attempts (and earlier ones) everywhere, callers first")
      .option("--episodes <file>", "the attempts to stop: capture keys, one per line")
      .option("--keys <keys>", "the attempts to stop, inline: capture keys, KEY[,KEY]")
      .option("--id <id>", "checkpoint ID for fencing (default: a fresh one)"),
  ).action(
    run(async (flags: CommonCkptFlags & { episodes?: string; keys?: string; id?: string }) => {
      handlers.json(flags.json === true);
      const { retireCommand } = await import("./ckpt.js");
      return await retireCommand(
        {
          file: flags.episodes,
          keys: flags.keys === undefined ? undefined : splitList(flags.keys, "--keys"),
        },
        { ...common(flags), id: flags.id === undefined ? undefined : checkpointId(flags.id) },
        io,
      );
    }),
  );

  withCommon(
    ckpt
      .command("forget")
      .description("drop the retired marks of finished rollouts, callers first")
      .requiredOption("--rollouts <ids>", "rollout IDs, ID[,ID]")
      .option("--id <id>", "checkpoint ID for fencing (default: a fresh one)"),
  ).action(
    run(async (flags: CommonCkptFlags & { rollouts: string; id?: string }) => {
      handlers.json(flags.json === true);
      const { forgetCommand } = await import("./ckpt.js");
      return await forgetCommand(
        splitList(flags.rollouts, "--rollouts"),
        { ...common(flags), id: flags.id === undefined ? undefined : checkpointId(flags.id) },
        io,
      );
    }),
  );

  ckpt
    .command("inspect")
    .description("verify and list a checkpoint directory without any server")
    .argument("<dir>", "the checkpoint directory")
    .option("--json", "print the report as JSON")
    .action(
      run(async (dir: string, flags: { json?: boolean }) => {
        handlers.json(flags.json === true);
        const { inspectCommand } = await import("./inspect.js");
        return await inspectCommand(dir, { json: flags.json === true }, io);
      }),
    );

  program
    .command("openapi")
    .description("write the OpenAPI documents generated from the wire schemas")
    .option("--out <dir>", "output directory", "openapi")
    .option("--check", "write nothing; exit 1 when a document differs from what would be written")
    .option(
      "--deployment <file>",
      "instead: one document per server of this deployment, as each serves it",
    )
    .action(
      run(async (flags: { out?: string; check?: boolean; deployment?: string }) => {
        const { openapiCommand } = await import("./openapi.js");
        return await openapiCommand(flags, io);
      }),
    );

  return program;
}

/** Prints a failure: what went wrong, then what to do. */
function report(io: Io, error: CliError): void {
  io.err(`gym: ${error.message}`);
  if (error.hint !== null) io.err(`what to do: ${error.hint}`);
}

/**
 * Runs `gym` with `argv` (without `node` and the script) and returns the exit status.
 *
 * @example
 * const code = await runCli(["ckpt", "inspect", "/tmp/c"]);
 */
export async function runCli(argv: readonly string[], io: Io = processIo()): Promise<number> {
  let code = EXIT_OK;
  let json = false;
  const program = buildProgram({
    io,
    exit: (status) => {
      code = status;
    },
    json: (enabled) => {
      json = enabled;
    },
  });
  if (argv.length === 0) {
    io.err(program.helpInformation());
    return EXIT_USAGE;
  }
  try {
    await program.parseAsync([...argv], { from: "user" });
    return code;
  } catch (error) {
    if (error instanceof CommanderError) {
      // Commander printed the message (and the usage hint) already.
      if (
        error.code === "commander.excessArguments" &&
        argv[0] === "ckpt" &&
        argv[1] !== "inspect"
      ) {
        io.err(
          "what to do: gym ckpt verbs take the deployment as --deployment FILE (or its state file as --state FILE)",
        );
      }
      return error.exitCode === 0 ? EXIT_OK : EXIT_USAGE;
    }
    const failure = asCliError(error);
    if (failure !== null) {
      if (json && failure.json !== undefined) io.out(JSON.stringify(failure.json, null, 2));
      report(io, failure);
      return failure.exitCode;
    }
    io.err(
      `gym: unexpected error: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`,
    );
    io.err("what to do: this is a bug in gym; please report it with the command you ran");
    return EXIT_FAILED;
  }
}
