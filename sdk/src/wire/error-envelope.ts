/**
 * Wire schema of the error envelope every refusal is answered with:
 * `{"error": {"code", "detail", "issues"?}}`. The OpenAPI document uses it for every error
 * response, so the codes it lists are exactly those of {@link ERROR_CATALOGUE}.
 *
 * @see docs/errors.md
 */
import { z } from "zod";
import { ERROR_CATALOGUE, type ErrorCode, type ErrorEnvelope } from "../errors.js";

/** Every error code on the wire, in catalogue order. */
export const ERROR_CODES = Object.keys(ERROR_CATALOGUE) as [ErrorCode, ...ErrorCode[]];

/** One error code of {@link ERROR_CATALOGUE}. */
export const ErrorCodeSchema = z.enum(ERROR_CODES).meta({
  id: "ErrorCode",
  description: "Every error code on the wire; each maps to one HTTP status (docs/errors.md).",
  example: "checkpoint_conflict",
});

/** One problem with a request body, located by its JSON path (422 `invalid_request` only). */
export const RequestIssueSchema = z
  .strictObject({
    path: z
      .array(z.union([z.string(), z.number().int()]))
      .meta({ description: "JSON path of the offending value; empty for the body itself." }),
    message: z.string(),
  })
  .meta({
    id: "RequestIssue",
    example: { path: ["deadline_ts"], message: "Invalid input: expected number, received string" },
  });

/** The envelope of every refusal. `issues` is present on 422 `invalid_request` only. */
export const ErrorEnvelopeSchema = z
  .strictObject({
    error: z.strictObject({
      code: ErrorCodeSchema,
      detail: z.string().meta({ description: "Human-readable; says what to do next." }),
      issues: z.array(RequestIssueSchema).optional(),
    }),
  })
  .meta({
    id: "ErrorEnvelope",
    description: "The body of every refusal: one envelope, whatever the code.",
    example: {
      error: {
        code: "invalid_phase",
        detail: "commit is not allowed in phase 'idle'",
      },
    },
  });

// The schema and the hand-written interface of errors.ts must describe the same wire shape.
type Same<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false;
const _envelopeMatches: Same<
  z.infer<typeof ErrorEnvelopeSchema>["error"]["issues"],
  ErrorEnvelope["error"]["issues"]
> = true;
