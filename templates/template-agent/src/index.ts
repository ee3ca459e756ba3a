/**
 * %PACKAGE_NAME%: an agent whose sessions survive a crash. Each activation plans, then
 * answers: two policy-model calls (the deployment's `model_server`, or a built-in echo model
 * when none is set), each right after a boundary, so a checkpoint never waits for the model and
 * a fresh process continues the activation from its last boundary. The session keeps every turn;
 * the three session hooks export the sessions at a checkpoint and restore them after a crash.
 * Run it: `npm run serve` (it builds first); see README.md.
 */
import { z } from "zod";
import {
  AgentConfigSchema,
  AgentServer,
  isMainModule,
  serveMain,
  type AgentCloseResult,
  type ExportAgentSessionsInput,
  type RebuiltAgentSession,
  type RespondInput,
  type RespondResult,
  type RestoreAgentSessionsInput,
} from "gym-participant-sdk";
import { outputText } from "gym-participant-sdk/protocol";

/** One turn of a session: what came in, what the agent answered. */
const TurnSchema = z.strictObject({ input: z.string(), output: z.string() });
type Turn = z.infer<typeof TurnSchema>;

/** A session's state: its turns so far. */
export interface Conversation {
  readonly turns: readonly Turn[];
}

/** What the export hook writes for a session (the SDK adds its own counters beside it). */
const ExportedSchema = z.strictObject({ request: z.unknown(), turns: z.array(TurnSchema) });
type Exported = z.infer<typeof ExportedSchema>;

/** Where the turn loop of an activation is: recorded at each boundary, read after a restore. */
const LoopStateSchema = z.discriminatedUnion("next", [
  z.strictObject({ next: z.literal("plan") }),
  z.strictObject({ next: z.literal("answer"), plan: z.string() }),
]);

/** The settings (`config:` in the deployment file). */
export const ConfigSchema = AgentConfigSchema.extend({
  /** The policy model server (a name in the deployment); null: the built-in echo model. */
  model_server: z.string().nullable().default(null),
});
type Config = z.infer<typeof ConfigSchema>;

export default class PlannerAgent extends AgentServer<Conversation, Config> {
  static override checkpointSessionsSupported = true;

  protected override configSchema() {
    return ConfigSchema;
  }

  protected override createSessionState(): Conversation {
    return { turns: [] };
  }

  protected override async respond({
    body,
    session,
    activation,
    rollout,
  }: RespondInput<Conversation>): Promise<RespondResult> {
    const input = typeof body.input === "string" ? body.input : JSON.stringify(body.input);
    const turns = session?.state?.turns ?? [];
    const ask = (prompt: string) =>
      // Right after a boundary: while the model works, the session counts as parked there.
      activation.modelCall((signal) => this.#model(turns, prompt, rollout?.captureKey, signal));
    const restored = LoopStateSchema.nullable().parse(activation.continuation);
    let plan: string;
    if (restored?.next === "answer") {
      plan = restored.plan; // planned before the crash: not asked again
    } else {
      await activation.boundary(() => ({ next: "plan" }));
      plan = await ask(`Plan an answer to: ${input}`);
    }
    await activation.boundary(() => ({ next: "answer", plan }));
    const output = await ask(`${plan}\nNow answer: ${input}`);
    if (session !== null) {
      this.setSessionState(session.key, { turns: [...turns, { input, output }] });
    }
    return { response: reply(output) };
  }

  protected override closeSessionState({
    state,
  }: {
    state: Conversation | undefined;
  }): AgentCloseResult {
    return { agent_observations: { turns: [...(state?.turns ?? [])] }, resources_cookies: null };
  }

  // ---- The session hooks -------------------------------------------------------------------

  protected override exportAgentSessions({ sessionKeys }: ExportAgentSessionsInput) {
    const sessions = new Map<string, Exported>();
    for (const key of sessionKeys) {
      const view = this.sessionView(key);
      if (view?.request == null || view.state === undefined) continue; // dropped meanwhile
      sessions.set(key, { request: view.request, turns: [...view.state.turns] });
    }
    return sessions;
  }

  protected override restoreAgentSessions({ sessions }: RestoreAgentSessionsInput) {
    // Every session rebuilt, or a throw: the SDK installs them all, or none.
    const restored = new Map<string, RebuiltAgentSession<Conversation>>();
    for (const s of sessions) {
      const saved = ExportedSchema.parse(s.session);
      restored.set(s.sessionKey, { request: saved.request, state: { turns: saved.turns } });
    }
    return restored;
  }

  /** Nothing outside this process to free (a sandbox would be stopped here); the SDK drops it. */
  protected override async retireAgentSession() {}

  // ---- The policy model --------------------------------------------------------------------

  async #model(
    turns: readonly Turn[],
    prompt: string,
    captureKey: string | undefined,
    signal: AbortSignal,
  ): Promise<string> {
    const server = this.config.model_server;
    if (server === null) return echoModel(turns, prompt);
    const input = [
      ...turns.flatMap((t) => [
        { role: "user", content: t.input },
        { role: "assistant", content: t.output },
      ]),
      { role: "user", content: prompt },
    ];
    // Under the rollout's prefix, so the policy model ties the call to its rollout.
    const reply = await this.client.post(
      server,
      "/v1/responses",
      { input },
      {
        rollout: captureKey ?? null,
        signal,
      },
    );
    return outputText(reply);
  }
}

/** The stand-in model: the prompt on one line, numbered by turn. */
export function echoModel(turns: readonly Turn[], prompt: string): string {
  return `#${turns.length + 1} ${prompt.split("\n").join(" | ")}`;
}

/** A Responses-style reply holding one assistant message. */
function reply(text: string): Record<string, unknown> {
  return {
    object: "response",
    status: "completed",
    output: [{ type: "message", role: "assistant", content: [{ type: "output_text", text }] }],
  };
}

if (isMainModule(import.meta.url)) await serveMain(PlannerAgent);
