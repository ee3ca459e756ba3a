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
  type VerifyInput,
} from "gym-participant-sdk";
import { ResponsesReplySchema, outputText } from "gym-participant-sdk/protocol";

/** `/multiply`'s body. A missing or non-numeric factor is refused with 422 naming it. */
const MultiplyRequestSchema = z.strictObject({ a: z.number(), b: z.number() });

/** `/multiply`'s reply. */
const ProductReplySchema = z.strictObject({ product: z.number() });

/**
 * `/verify`'s body: the fields the verifier reads (the environment sends more, kept as they
 * are): the model's final Responses-style reply and the answer it should hold.
 */
const VerifyRequestSchema = z
  .looseObject({
    response: ResponsesReplySchema,
    expected_answer: z.union([z.string(), z.number()]),
  })
  .meta({
    example: {
      response: {
        output: [
          {
            type: "message",
            role: "assistant",
            content: [{ type: "output_text", text: "6 times 7 is 42" }],
          },
        ],
      },
      expected_answer: 42,
    },
  });

export default class MultiplierServer extends ResourcesServer {
  static override checkpointMode = "stateless";
  static override checkpointVerify = "wait";

  protected override tools() {
    return [
      dataRoute({
        method: "post",
        path: "/multiply",
        summary: "Multiply two numbers",
        request: MultiplyRequestSchema,
        reply: ProductReplySchema,
        examples: { request: { a: 6, b: 7 }, reply: { product: 42 } },
        handler: ({ body }) => ({ product: body.a * body.b }),
      }),
    ];
  }

  override readonly verifyRequest = VerifyRequestSchema;

  /** Rewards a final answer that contains the task's `expected_answer`. */
  protected override verify({ body }: VerifyInput<this>) {
    const expected = String(body.expected_answer);
    return { reward: outputText(body.response).includes(expected) ? 1 : 0 };
  }
}

if (isMainModule(import.meta.url)) await serveMain(MultiplierServer);
