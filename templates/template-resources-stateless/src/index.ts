/**
 * %PACKAGE_NAME%: a `stateless` resources server. Its tool answers from the request alone and
 * `/verify` reads only its body, so a checkpoint has nothing to export: requests wait while one
 * is open, and after a crash the rollout simply goes on against a fresh process. Run it:
 * `npm run serve` (it builds first); see README.md.
 */
import { z } from "zod";
import {
  ResourcesServer,
  dataRoute,
  isMainModule,
  serveMain,
  type SessionRouteInput,
} from "gym-participant-sdk";

/** The text of a Responses-style reply: the `output_text` parts of its messages, joined. */
export function outputText(response: unknown): string {
  const output = (response as { output?: unknown } | null)?.output;
  if (!Array.isArray(output)) return "";
  return output
    .flatMap((item: { content?: unknown }) => (Array.isArray(item?.content) ? item.content : []))
    .map((part: { type?: unknown; text?: unknown }) =>
      part?.type === "output_text" && typeof part.text === "string" ? part.text : "",
    )
    .join("");
}

export default class MultiplierServer extends ResourcesServer {
  static override checkpointMode = "stateless" as const;
  static override checkpointVerify = "wait" as const;

  protected override tools() {
    return [
      dataRoute({
        method: "post",
        path: "/multiply",
        summary: "Multiply two numbers",
        request: z.strictObject({ a: z.number(), b: z.number() }),
        handler: ({ body }) => ({ product: body.a * body.b }),
      }),
    ];
  }

  /** Rewards a final answer that contains the task's `expected_answer`. */
  protected override verify({ body }: SessionRouteInput<Record<string, unknown>>) {
    const expected = String(body.expected_answer);
    return { reward: outputText(body.response).includes(expected) ? 1 : 0 };
  }
}

if (isMainModule(import.meta.url)) await serveMain(MultiplierServer);
