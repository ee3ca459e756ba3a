/**
 * `gym ckpt <verb>`: the training controller from a shell. Every verb but `inspect` reads the
 * run's state file, builds a `ServerClient` from the resolved deployment, discovers the
 * participants and calls the SDK's coordination functions (never HTTP of its own). Output is a
 * table for people, or the replies as JSON with `--json`. Exit status: 0 success, 1 refused (the
 * remote codes are printed per server), 2 bad usage.
 *
 * This module only declares the verbs. Each verb lives in its own module (`status.ts`,
 * `prepare.ts`, …), imported when it runs, so `gym --help` loads none of them.
 *
 * @see docs/deployment.md
 * @see docs/controller.md
 */
import { Option, type Command } from "commander";
import { checkpointId, duration, runner, type Handlers } from "../actions.js";
import { DEFAULT_DEADLINE_MS, STATE_OPTION_HELP, splitList } from "../defaults.js";
import { formatDuration } from "../duration.js";
import { sharedOption } from "../help.js";
import type { CkptOptions } from "./common.js";
import type { CommitScope } from "./scope.js";

const CKPT_HELP = `
Every verb but inspect reads the run's state file: --state FILE, or .gym/run.json next to
--deployment FILE, or else .gym/run.json here, in the one directory just below that has one
(two there: say which), or in the nearest directory above. It discovers the participants and
prints a table, or the replies as JSON with --json. --deadline bounds each step (default ${formatDuration(DEFAULT_DEADLINE_MS)}).

commit's default scope (continued) sends episode_ids: null when the last prepare of that ID
reported no restarts; when it reported some, pass --episodes FILE (capture keys in flight, one
per line) and the restarts are left out, or --scope all.

restore without --id takes the checkpoint --dir holds: the ID its manifests name (several:
pass --id), or for a gym collect directory the checkpoint its LATEST names; it says which.

--episodes FILE is a file of capture keys, one per line, for every verb that takes it; retire
also takes the keys inline with --keys KEY[,KEY].

Exit status: 0 success; 1 refused (each server's error code is printed, with what to do); 2 bad usage.`;

/** The flags {@link withCommon} adds, as commander parses them. */
interface CommonCkptFlags {
  state?: string;
  deployment?: string;
  json?: boolean;
  deadline?: string;
}

function common(flags: CommonCkptFlags): CkptOptions & { deadlineMs: number } {
  return {
    state: flags.state,
    deployment: flags.deployment,
    json: flags.json,
    deadlineMs: duration(flags.deadline, "--deadline", DEFAULT_DEADLINE_MS),
  };
}

/** Adds the options every verb that talks to the deployment takes. */
function withCommon(command: Command): Command {
  return command
    .addOption(sharedOption(new Option("--state <file>", STATE_OPTION_HELP)))
    .addOption(
      sharedOption(
        new Option("--deployment <file>", "find the state file next to this deployment file"),
      ),
    )
    .addOption(sharedOption(new Option("--json", "print the replies as JSON")))
    .addOption(
      sharedOption(
        new Option("--deadline <duration>", "bound of each step, e.g. 30s").default("30s"),
      ),
    );
}

const scopeOption = (): Option =>
  new Option(
    "--scope <scope>",
    "what to commit: the continued episodes of the last prepare, or all",
  )
    .choices(["continued", "all"])
    .default("continued");

/** Declares `gym ckpt` and its verbs on `program`; actions report through `handlers`. */
export function registerCkpt(program: Command, handlers: Handlers): void {
  const { io } = handlers;
  const run = runner(handlers);
  const ckpt = program
    .command("ckpt")
    .description("drive checkpoints of the running deployment (gym ckpt --help for the verbs)")
    .addHelpText("after", CKPT_HELP);

  withCommon(ckpt.command("status").description("every participant's status, as a table")).action(
    run(async (flags: CommonCkptFlags) => {
      handlers.json(flags.json === true);
      const { statusCommand } = await import("./status.js");
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
      const { prepareCommand } = await import("./prepare.js");
      return await prepareCommand(checkpointId(flags.id), common(flags), io);
    }),
  );

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
        const { commitCommand } = await import("./commit.js");
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
      const { resumeCommand } = await import("./resume.js");
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
      const { checkpointCommand } = await import("./checkpoint.js");
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
      .option(
        "--id <id>",
        "the restore's checkpoint ID, to resume it with (default: the ID the manifests in --dir name; for a gym collect directory, the checkpoint its LATEST names)",
      )
      .requiredOption(
        "--dir <dir>",
        "the checkpoint directory (without --id, a gym collect directory too)",
      )
      .option("--episodes <file>", "the episodes to continue: capture keys, one per line")
      .option("--all", "continue every episode the checkpoint holds")
      .option("--resume", "resume right after a successful restore"),
  ).action(
    run(
      async (
        flags: CommonCkptFlags & {
          id?: string;
          dir: string;
          episodes?: string;
          all?: boolean;
          resume?: boolean;
        },
      ) => {
        handlers.json(flags.json === true);
        const { restoreCommand } = await import("./restore.js");
        return await restoreCommand(
          flags.id === undefined ? undefined : checkpointId(flags.id),
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
      const { retireCommand } = await import("./retire.js");
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
      const { forgetCommand } = await import("./forget.js");
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
        const { inspectCommand } = await import("../inspect.js");
        return await inspectCommand(dir, { json: flags.json === true }, io);
      }),
    );
}
