import type { z } from "zod";
import { InvalidRequestError, type RequestIssue } from "../errors.js";

/** zod issues as the envelope's `issues`: each with its JSON path and message. */
export function requestIssues(error: z.ZodError): RequestIssue[] {
  return error.issues.map((issue) => ({
    path: issue.path.map((part) => (typeof part === "symbol" ? String(part) : part)),
    message: issue.message,
  }));
}

/**
 * Parses a request body with its schema, or throws 422 `invalid_request` naming every problem
 * in words and listing them by path.
 */
export function parseBody<S extends z.ZodType>(schema: S, body: unknown, what: string): z.infer<S> {
  const result = schema.safeParse(body);
  if (result.success) return result.data;
  const issues = requestIssues(result.error);
  const words = issues
    .map((issue) => `${issue.path.length > 0 ? issue.path.join(".") : "body"}: ${issue.message}`)
    .join("; ");
  throw new InvalidRequestError(`invalid ${what} request: ${words}`, issues);
}
