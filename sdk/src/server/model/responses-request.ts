/**
 * The body of a policy model server's `POST /v1/responses`: the OpenAI Responses create request,
 * as far as the server reads it, checked before anything reaches the backend or the capture
 * digests. Unknown fields are kept (and not sent on).
 *
 * @module
 */
import { z } from "zod";
import { loneSurrogatePaths } from "./lone-surrogates.js";

/**
 * The largest `max_output_tokens` accepted: a signed 32-bit integer, what inference engines
 * take. A larger budget is never meant; it only reaches the backend to be refused there.
 */
export const MAX_OUTPUT_TOKENS_LIMIT = 2_147_483_647;

/** How many refused input items a refusal names; the rest go unnamed. */
const MAX_REFUSED_ITEMS = 8;

/** The roles a Responses message item may have. */
const RoleSchema = z.enum(["system", "developer", "user", "assistant"]);

/** One part of a message's content: text, or a typed part (`input_text`, `input_image`, …). */
const ContentPartSchema = z.union([
  z.string(),
  z
    .looseObject({ type: z.string().optional(), text: z.string().optional() })
    .refine((part) => (part.type !== undefined && part.type !== "") || part.text !== undefined, {
      message: "a content part needs a non-empty type or a text",
    }),
]);

/** A chat-dialect tool call carried on an item (read by the lineage fingerprints). */
const ItemToolCallSchema = z.looseObject({
  id: z.string().nullable().optional(),
  function: z
    .looseObject({ name: z.string().nullable().optional(), arguments: z.unknown().optional() })
    .nullable()
    .optional(),
});

/**
 * One input item: a message (`role` and `content`), a `function_call`, a
 * `function_call_output`, or another typed item (reasoning, …) that a chat backend does not take.
 */
const InputItemSchema = z
  .looseObject({
    type: z.string().min(1).optional(),
    role: RoleSchema.optional(),
    content: z
      .union([z.string(), z.array(ContentPartSchema)], {
        error:
          "content must be a string, null, or a list of parts (strings, or objects with a type or a text)",
      })
      .nullable()
      .optional(),
    id: z.string().nullable().optional(),
    call_id: z.string().nullable().optional(),
    name: z.string().optional(),
    namespace: z.string().nullable().optional(),
    arguments: z.string().optional(),
    output: z.unknown().optional(),
    tool_calls: z.array(ItemToolCallSchema).nullable().optional(),
    tool_call_id: z.string().nullable().optional(),
  })
  .superRefine((item, ctx) => {
    const need = (field: string, message: string): void => {
      ctx.addIssue({ code: "custom", path: [field], message });
    };
    const type = item.type ?? (item.role === undefined ? undefined : "message");
    if (type === undefined) {
      ctx.addIssue({ code: "custom", path: [], message: "an input item needs a type or a role" });
    } else if (type === "message") {
      if (item.role === undefined) need("role", "a message item needs a role");
    } else if (type === "function_call") {
      if (item.name === undefined || item.name === "") {
        need("name", "a function_call item needs the function's name");
      }
      if (item.arguments === undefined) {
        need("arguments", "a function_call item needs its arguments (a JSON string)");
      }
      if (!item.call_id) need("call_id", "a function_call item needs a call_id");
    } else if (type === "function_call_output") {
      if (!item.call_id)
        need("call_id", "a function_call_output item needs the call_id it answers");
      if (item.output === undefined) need("output", "a function_call_output item needs an output");
    }
  });

/** A tool offered to the model; a function tool needs its name. */
const ToolSchema = z
  .looseObject({
    type: z.string().min(1),
    name: z.string().optional(),
    description: z.string().nullable().optional(),
    parameters: z.record(z.string(), z.unknown()).nullable().optional(),
  })
  .superRefine((tool, ctx) => {
    if (tool.type === "function" && (tool.name === undefined || tool.name === "")) {
      ctx.addIssue({ code: "custom", path: ["name"], message: "a function tool needs a name" });
    }
  });

/**
 * `POST /v1/responses` of a policy model server.
 *
 * ## Rules
 * - `input` is a string or a non-empty list of items; an item is an object with a `type` or a
 *   `role` (`system`, `developer`, `user`, `assistant`), and the fields its type needs.
 * - `max_output_tokens` is an integer from 1 to {@link MAX_OUTPUT_TOKENS_LIMIT};
 *   `temperature` is from 0 to 2 and `top_p` from 0 to 1 (OpenAI's ranges); `seed` is an integer.
 * - No string anywhere in the body, keys included, may hold a lone surrogate: it has no UTF-8
 *   form, so neither the capture digests nor a backend's tokenizer can take it.
 *
 * A refusal is 422 `invalid_request` with an issue naming each field at fault.
 */
export const PolicyResponsesRequestSchema = z
  .looseObject({
    // Items are checked one by one below: inside a union, zod would name only `input`.
    input: z.union([
      z.string(),
      z.array(z.unknown()).min(1, "input must hold at least one item").meta({
        description:
          "Message items ({role, content}), function_call, function_call_output and other typed items",
      }),
    ]),
    model: z.string().min(1).optional(),
    instructions: z.string().nullable().optional(),
    tools: z.array(ToolSchema).optional(),
    max_output_tokens: z.int().min(1).max(MAX_OUTPUT_TOKENS_LIMIT).nullable().optional(),
    temperature: z.number().min(0).max(2).nullable().optional(),
    top_p: z.number().min(0).max(1).nullable().optional(),
    seed: z.int().nullable().optional(),
    parallel_tool_calls: z.boolean().nullable().optional(),
    stop: z
      .union([z.string(), z.array(z.string())])
      .nullable()
      .optional(),
    tool_choice: z
      .union([z.string(), z.looseObject({})])
      .nullable()
      .optional(),
    response_format: z.looseObject({}).nullable().optional(),
    stream: z.boolean().nullable().optional(),
  })
  .superRefine((body, ctx) => {
    if (Array.isArray(body.input)) {
      let refused = 0;
      for (const [index, item] of body.input.entries()) {
        const parsed = InputItemSchema.safeParse(item);
        if (parsed.success) continue;
        // A list of a million bad items gets a short answer, not a million issues.
        if (++refused > MAX_REFUSED_ITEMS) break;
        for (const issue of parsed.error.issues) {
          ctx.addIssue({
            code: "custom",
            path: ["input", index, ...issue.path.map((key) => key as string | number)],
            message: issue.message,
          });
        }
      }
    }
    for (const path of loneSurrogatePaths(body)) {
      ctx.addIssue({
        code: "custom",
        path,
        message: "the text holds a lone surrogate (not valid Unicode)",
      });
    }
  })
  .meta({ id: "PolicyResponsesRequest" });
/** A policy model server's Responses create request. */
export type PolicyResponsesRequest = z.infer<typeof PolicyResponsesRequestSchema>;
