/**
 * %PACKAGE_NAME%: an environment server whose episodes survive a crash. `/run` runs one
 * episode as stages (read each document, then verify the word count, then return), recording a
 * boundary at the start of every stage, so a checkpoint finds each episode parked at one and a
 * fresh process continues it from there as the next attempt. Run it: `npm run serve` (it
 * builds first); see README.md.
 */
import { z } from "zod";
import {
  EnvironmentServer,
  RunRequestSchema,
  TaskIdSchema,
  isMainModule,
  serveMain,
  type EpisodeOutcome,
  type RunEpisodeInput,
} from "gym-participant-sdk";

/** The task: documents to read, and how many words they hold together. */
const TaskInputSchema = z.strictObject({
  documents: z.array(z.string()),
  expected_words: z.int().min(0),
});

/**
 * `/run`'s body with this environment's task: a malformed task is refused with 422 naming the
 * field (`task.task_input.documents`, say) before an episode is admitted.
 */
const WordCountRunSchema = RunRequestSchema.extend({
  task: z.strictObject({ task_id: TaskIdSchema, task_input: TaskInputSchema }),
}).meta({
  example: {
    episode_id: { rollout_id: "task-3", attempt: 0 },
    task: {
      task_id: { taskset: "demo", task_id: "3" },
      task_input: {
        documents: ["the quick brown fox", "jumps over the lazy dog"],
        expected_words: 9,
      },
    },
  },
});

/**
 * Where an episode is, recorded at the start of every stage and read back after a restore. It
 * keeps the words counted so far as one running total, so it stays small however many documents
 * the task holds.
 */
const BoundarySchema = z.discriminatedUnion("next", [
  z.strictObject({ next: z.literal("read"), index: z.int().min(0), words: z.int().min(0) }),
  z.strictObject({ next: z.literal("verify"), words: z.int().min(0) }),
  z.strictObject({ next: z.literal("return"), words: z.int().min(0), reward: z.number() }),
]);
type Boundary = z.infer<typeof BoundarySchema>;

export default class WordCountEnvironment extends EnvironmentServer {
  static override checkpointBoundaries = true;
  /** Validates and documents `/run`, and types `runEpisode`'s body. */
  override readonly runRequest = WordCountRunSchema;

  protected override async runEpisode({
    body,
    steps,
    onCleanup,
  }: RunEpisodeInput<this>): Promise<EpisodeOutcome> {
    // Validated by runRequest before the episode began.
    const { documents, expected_words } = body.task.task_input;
    // Final cleanup (last in, first out) runs before /run replies: close sessions here.
    onCleanup(() => this.logger.debug({ episode: steps.captureKey }, "episode cleaned up"));
    // A restored attempt continues from its boundary; a new one starts at the first stage.
    let at: Boundary = BoundarySchema.nullable().parse(steps.continuation()) ?? {
      next: "read",
      index: 0,
      words: 0,
    };
    while (at.next === "read") {
      const { index, words } = at;
      if (index >= documents.length) {
        at = { next: "verify", words };
        break;
      }
      await steps.boundary(at);
      // A replay step is safe to run again after a crash, so a checkpoint does not wait for it.
      const counted = await steps.step("replay", () => countWords(documents[index] ?? ""));
      at = { next: "read", index: index + 1, words: words + counted };
    }
    if (at.next === "verify") {
      const { words } = at;
      await steps.boundary(at);
      // A wait step runs once per attempt (a /verify call, say): a checkpoint waits for it.
      const reward = await steps.step("wait", () => (words === expected_words ? 1 : 0));
      at = { next: "return", words, reward };
    }
    await steps.boundary(at);
    return { result: { reward: at.reward, words: at.words } };
  }
}

/** The number of words in `text`. */
export function countWords(text: string): number {
  return text.split(/\s+/).filter((word) => word !== "").length;
}

if (isMainModule(import.meta.url)) await serveMain(WordCountEnvironment);
