import type { z } from "zod";
import { InvalidRequestError, type RequestIssue } from "../errors.js";
import { episodeIdsFromWire, type EpisodeId } from "../identity/episode-id.js";

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

/**
 * {@link parseBody} for a control body whose `episode_ids` may list thousands of episodes: the
 * same result and the same errors, faster.
 *
 * When every entry of a non-empty `episode_ids` array is a valid EpisodeId, the entries are
 * checked by hand (`episodeIdsFromWire`, the rules of `EpisodeIdSchema`) and the schema parses the
 * body with the first entry standing in for the array, so the array's own rules (`min(1)`) and
 * every other field are still the schema's. Anything else is parsed whole by the schema, which
 * then names every problem as before.
 *
 * Why: zod walks each entry through an object schema, a regex, a refinement and a transform, and
 * the first thousands of calls in a fresh process run cold; a commit or restore of 8,000
 * episodes spent ~100 ms per participant there.
 */
export function parseEpisodeListBody<S extends z.ZodType>(
  schema: S,
  body: unknown,
  what: string,
): z.infer<S> {
  if (body !== null && typeof body === "object" && !Array.isArray(body)) {
    const listed = (body as { episode_ids?: unknown }).episode_ids;
    if (Array.isArray(listed) && listed.length > 0) {
      const episodes = episodeIdsFromWire(listed);
      if (episodes !== null) {
        const parsed = parseBody(schema, { ...body, episode_ids: [listed[0]] }, what) as {
          episode_ids: EpisodeId[];
        };
        return { ...parsed, episode_ids: episodes } as z.infer<S>;
      }
    }
  }
  return parseBody(schema, body, what);
}
