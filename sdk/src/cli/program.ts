/**
 * The `gym` command: serve a deployment, stop it, drive checkpoints from a shell, inspect a
 * checkpoint directory, write the OpenAPI documents. {@link runCli} runs it in-process (tests do)
 * and returns the exit status: 0 success, 1 failed or refused, 2 bad usage.
 *
 * @see docs/deployment.md
 */
import { Command, CommanderError, Option } from "commander";
import { duration, positiveDuration, runner, type Handlers } from "./actions.js";
import { registerCkpt } from "./ckpt/index.js";
import {
  DEFAULT_GRACE_MS,
  DEFAULT_HEALTH_TIMEOUT_MS,
  STATE_OPTION_HELP,
  sdkVersion,
  splitList,
} from "./defaults.js";
import { commandsOverview } from "./help.js";
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

/**
 * What the root help adds after the commands (whose overview comes from their definitions, see
 * `help.ts`): the conventions every command shares, and an example session.
 */
const ROOT_NOTES = `
Durations: 500ms, 30s, 2m. Capture keys: task-3 (attempt 0), task-3-a1 (attempt 1).
--episodes FILE is always a file of capture keys, one per line; --keys lists them inline.
Only serve, stop and kubernetes take the deployment file as an argument;
ckpt verbs take --deployment FILE.
Exit status: 0 success; 1 failed or refused (the reason and what to do are printed); 2 bad usage.

Example:
  gym serve deployment.yaml --detach
  gym ckpt checkpoint --dir /tmp/c
  gym ckpt inspect /tmp/c
  gym stop --kill                      # a crash
  gym serve deployment.yaml --detach
  gym ckpt restore --dir /tmp/c --all --resume   # the checkpoint /tmp/c holds

See docs/deployment.md and docs/controller.md.`;

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
    // Built when shown: by then every command below is defined.
    .addHelpText("after", () => `\n${commandsOverview(program)}\n${ROOT_NOTES}`);

  const run = runner(handlers);

  program
    .command("serve")
    .description("start every server of a deployment and wait until each is healthy")
    .argument("<deployment>", "the deployment file (YAML or JSON)")
    .option("--state <file>", "the state file (default: .gym/run.json next to the deployment)")
    .option("--only <names>", "start only these servers (NAME[,NAME]); the others must be running")
    .option("--node <name>", "start only this node's servers (a deployment with nodes:)")
    .option("--detach", "return once every server is up, leaving a background supervisor")
    .option("--foreground", "also stream every server's log, prefixed by its name")
    .option("--health-timeout <duration>", "how long each server gets to answer GET /health", "30s")
    .option("--grace <duration>", "SIGTERM → SIGKILL delay when stopping", "15s")
    .option(
      "--term-grace <duration>",
      "on SIGTERM keep serving until a checkpoint commits, at most this long (a Slurm requeue, a pod eviction)",
    )
    .action(
      run(
        async (
          deployment: string,
          flags: {
            state?: string;
            only?: string;
            node?: string;
            detach?: boolean;
            foreground?: boolean;
            healthTimeout?: string;
            grace?: string;
            termGrace?: string;
          },
        ) => {
          const { serve } = await import("./launcher.js");
          return await serve(
            {
              deploymentFile: deployment,
              state: flags.state,
              only: flags.only === undefined ? undefined : splitList(flags.only, "--only"),
              ...(flags.node === undefined ? {} : { node: flags.node }),
              detach: flags.detach === true,
              foreground: flags.foreground === true,
              healthTimeoutMs: positiveDuration(
                flags.healthTimeout,
                "--health-timeout",
                DEFAULT_HEALTH_TIMEOUT_MS,
              ),
              graceMs: duration(flags.grace, "--grace", DEFAULT_GRACE_MS),
              termGraceMs: duration(flags.termGrace, "--term-grace", 0),
            },
            io,
          );
        },
      ),
    );

  program
    .command("stop")
    .description(
      "stop the servers of a run: SIGTERM each process group, SIGKILL after --grace; nothing running is not an error",
    )
    .argument("[deployment]", "the deployment file the run was started from (as --deployment)")
    .option("--state <file>", STATE_OPTION_HELP)
    .option("--deployment <file>", "find the state file next to this deployment file")
    .option("--kill", "SIGKILL every process group at once (simulates a crash)")
    .option("--only <names>", "stop only these servers (NAME[,NAME])")
    .option("--node <name>", "stop this node's servers (a deployment with nodes:)")
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
            node?: string;
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
              ...(flags.node === undefined ? {} : { node: flags.node }),
              graceMs: duration(flags.grace, "--grace", DEFAULT_GRACE_MS),
              json: flags.json === true,
            },
            io,
          );
        },
      ),
    );

  registerCkpt(program, handlers);

  program
    .command("top")
    .description(
      "a live view of a running deployment: per server readiness, phase, admission, in flight, blockers, request rate, commits",
    )
    .option("--state <file>", STATE_OPTION_HELP)
    .option("--deployment <file>", "find the state file next to this deployment file")
    .option("--interval <duration>", "time between refreshes", "1s")
    .option("--once", "print one snapshot and exit")
    .action(
      run(
        async (flags: {
          state?: string;
          deployment?: string;
          interval?: string;
          once?: boolean;
        }) => {
          const { topCommand } = await import("./top.js");
          return await topCommand(
            {
              ...(flags.state === undefined ? {} : { state: flags.state }),
              ...(flags.deployment === undefined ? {} : { deployment: flags.deployment }),
              intervalMs: positiveDuration(flags.interval, "--interval", 1_000),
              once: flags.once === true,
            },
            io,
          );
        },
      ),
    );

  program
    .command("collect")
    .description(
      "run every row of a JSONL task file through the deployment, one output row per rollout; checkpoints on SIGUSR1, checkpoint-and-stop on SIGTERM (exit 75), stops when rollouts keep failing the same way (exit 3)",
    )
    .argument("<tasks>", "the JSON Lines file of tasks (one object per line)")
    .option("--output <file>", "where rows go (default: rollouts.jsonl in --checkpoint-dir)")
    .option("--state <file>", STATE_OPTION_HELP)
    .option("--deployment <file>", "find the state file next to this deployment file")
    .option("--concurrency <n>", "rows in flight at once", "16")
    .option("--repeats <k>", "rollouts per task, each with its own rollout ID", "1")
    .option("--environment <name>", "the environment server of rows that name none")
    .option("--route-field <field>", "the row field naming its environment server", "environment")
    .option(
      "--taskset <name>",
      "task set of rows whose task_id is not an object (default: file name)",
    )
    .option("--checkpoint-dir <dir>", "checkpoint here; keeps the dispatch log and the run")
    .option("--checkpoint-every <duration>", "also checkpoint this often while rows are in flight")
    .option("--resume", "continue the run --checkpoint-dir holds (a new one when it holds none)")
    .option("--reset", "discard the run --checkpoint-dir holds and the output, then start over")
    .option("--max-attempts <n>", "sends of a row without a reply before it fails", "3")
    .option(
      "--max-failures <n>",
      "stop (exit 3) once this many rollouts in a row failed the same way; 0 or none: never",
      "20",
    )
    .option("--step-timeout <duration>", "bound on each checkpoint step", "60s")
    .option("--run-timeout <duration>", "bound on one /run (default: 1h)")
    .option(
      "--wait-ready <duration>",
      "first wait this long for every server to answer /health (servers starting on other machines)",
    )
    .option("--json", "print the summary as JSON")
    .action(
      run(async (tasks: string, flags: import("./collect.js").CollectFlags) => {
        handlers.json(flags.json === true);
        const { collectCommand } = await import("./collect.js");
        return await collectCommand(tasks, flags, io);
      }),
    );

  program
    .command("conformance")
    .description(
      "check a running participant server (any language) against the contract's requirements: a table of each with where the docs state it; exit 0 only when every required check passes",
    )
    .argument("[url]", "the server's base URL, e.g. http://127.0.0.1:8001")
    .addOption(
      new Option(
        "--kind <kind>",
        "the kind the server must be (default: read from its status)",
      ).choices(["resources", "agent", "environment", "model"]),
    )
    .option("--token <token>", "the server's control token (default: $GYM_CONTROL_TOKEN)")
    .option("--only <ids>", "run only these requirements or groups (ID[,ID]; core.auth, resources)")
    .option("--skip <ids>", "leave out these requirements or groups")
    .option(
      "--expected-failures <file>",
      "known gaps, one ID a line: they do not fail the run, and fail it once they pass",
    )
    .option("--json", "print the report as JSON")
    .option("--junit <file>", "also write the report as JUnit XML")
    .option(
      "--seed <n>",
      "seed of the hostile-input slice (default: random, printed with a replay command)",
    )
    .option(
      "--checkpoint-root <dir>",
      "where the kit makes checkpoint directories; the server must see the same path (default: the temp dir)",
    )
    .option("--seed-body <json>", "body of the kit's /seed_session calls (resources)", "{}")
    .option(
      "--tool <path>",
      "a tool route the resources checks call (default: from GET /openapi.json)",
    )
    .option("--tool-body <json>", "its body")
    .option(
      "--task <json>",
      "the task of the kit's /run calls (environment; default: a single_agent_turn task)",
    )
    .option(
      "--launch <command>",
      "start the server with this shell command ({port}, {token}, {checkpoint_root} replaced; also GYM_CONFORMANCE_PORT, GYM_CONTROL_TOKEN, GYM_CONFORMANCE_CHECKPOINT_ROOT): the kit kills and restarts it for the crash requirements",
    )
    .option("--launch-timeout <seconds>", "bound on each start of the launched server", "60")
    .option("--list", "list every requirement and exit")
    .action(
      run(async (url: string | undefined, flags: import("./conformance.js").ConformanceFlags) => {
        handlers.json(flags.json === true);
        const { conformanceCommand } = await import("./conformance.js");
        return await conformanceCommand(url, flags, io);
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

  program
    .command("kubernetes")
    .description(
      "write Kubernetes manifests generated from a deployment file: per server a StatefulSet and a headless Service, the collector as a Job, a kustomization",
    )
    .argument("<deployment>", "the deployment file (each server on its own node)")
    .option("--out <dir>", "output directory (default: kubernetes)")
    .option("--namespace <name>", "the namespace of every object and Service name (default: gym)")
    .option("--image <image>", "the image every pod runs (see deploy/kubernetes/Dockerfile)")
    .option("--tasks <file>", "the collector Job's task file (without it, no Job)")
    .option("--app-dir <dir>", "where the image holds this directory (default: /app)")
    .option("--storage <size>", "size of the shared ReadWriteMany volume (default: 10Gi)")
    .option("--storage-class <name>", "its storage class (default: the cluster's)")
    .option("--step-timeout <duration>", "the collector's step bound (default: 60s)")
    .option("--check", "write nothing; exit 1 when a manifest differs from what would be written")
    .action(
      run(async (deployment: string, flags: import("./kubernetes.js").KubernetesFlags) => {
        const { kubernetesCommand } = await import("./kubernetes.js");
        return await kubernetesCommand(deployment, flags, io);
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
