import { createHash, timingSafeEqual } from "node:crypto";
import type { RequestHandler } from "express";
import { UnauthorizedError } from "../errors.js";

function digest(value: string): Buffer {
  return createHash("sha256").update(value, "utf8").digest();
}

/**
 * Refuses every request whose `Authorization` header is not exactly `Bearer <token>` with 401
 * `unauthorized` (or the error `refuse` makes, for routes whose contract words the refusal
 * otherwise). The comparison is constant-time over digests, so neither content nor length
 * leaks through timing. Runs before any body is parsed.
 */
export function bearerAuth(
  token: string,
  options: { readonly refuse?: () => Error } = {},
): RequestHandler {
  const refuse = options.refuse ?? (() => new UnauthorizedError());
  if (token.trim().length === 0) throw new RangeError("the control auth token must not be blank");
  const expected = digest(`Bearer ${token}`);
  return (req, _res, next) => {
    const header = req.headers.authorization;
    if (typeof header !== "string" || !timingSafeEqual(digest(header), expected)) {
      next(refuse());
      return;
    }
    next();
  };
}
