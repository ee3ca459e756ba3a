/**
 * Reading a JSON request body, for data and control routes alike: bounded in size before and
 * after decompression, bounded in depth while it arrives, and every refusal a typed 4xx.
 *
 * @module
 */
import type { IncomingMessage } from "node:http";
import type { Transform } from "node:stream";
import { createBrotliDecompress, createGunzip, createInflate } from "node:zlib";
import type { Request, RequestHandler } from "express";
import { InvalidRequestError } from "../errors.js";
import { JsonDepthScanner, MAX_BODY_DEPTH } from "./json-depth.js";
import { mayHoldProtoKey, protoKeyPath } from "./proto-key.js";

/** A JSON path as `$.a[0].b`, for messages. */
function formatPath(path: readonly (string | number)[]): string {
  return path.reduce<string>(
    (out, part) => (typeof part === "number" ? `${out}[${part}]` : `${out}.${part}`),
    "$",
  );
}

/** Data bodies (conversations, token arrays) and control bodies (episode lists) stay below this. */
export const BODY_LIMIT_BYTES = 64 * 1024 * 1024;

/** The statuses a body refusal answers with. */
export type BodyRefusalStatus = 400 | 413 | 415 | 422;

/**
 * A request body refused while it was read: `invalid_request` with the status that says why:
 * 400 (not valid compressed data), 413 (too large), 415 (an encoding or charset not spoken),
 * 422 (not JSON, or nested too deep).
 */
export class BodyRefusedError extends InvalidRequestError {
  override name = "BodyRefusedError";
  override readonly status: BodyRefusalStatus;

  constructor(
    status: BodyRefusalStatus,
    detail: string,
    issue: string,
    options?: ErrorOptions & { readonly path?: readonly (string | number)[] },
  ) {
    super(detail, [{ path: [...(options?.path ?? [])], message: issue }]);
    this.status = status;
    if (options?.cause !== undefined) this.cause = options.cause;
  }

  /** The body is, or declares itself, larger than the limit (413). */
  static tooLarge(limitBytes: number, how: "declared" | "received" | "inflated"): BodyRefusedError {
    const what = {
      declared: `the body's Content-Length is above the limit of ${limitBytes} bytes`,
      received: `the body is larger than the limit of ${limitBytes} bytes`,
      inflated: `the body inflates beyond the limit of ${limitBytes} bytes`,
    }[how];
    return new BodyRefusedError(413, `${what}; send a smaller body`, "too large");
  }

  /** A `Content-Encoding` the server does not decode (415). */
  static unsupportedEncoding(encoding: string): BodyRefusedError {
    return new BodyRefusedError(
      415,
      `unsupported Content-Encoding ${JSON.stringify(encoding)}: send the body as identity, gzip, deflate or br`,
      "unsupported content encoding",
    );
  }

  /** A charset other than UTF-8 (415). */
  static unsupportedCharset(charset: string): BodyRefusedError {
    return new BodyRefusedError(
      415,
      `unsupported charset ${JSON.stringify(charset)}: send the JSON body as UTF-8`,
      "unsupported charset",
    );
  }

  /** The body is not valid data of its `Content-Encoding` (400). */
  static badEncoding(encoding: string, cause: unknown): BodyRefusedError {
    const why = cause instanceof Error ? `: ${cause.message}` : "";
    return new BodyRefusedError(
      400,
      `the body is not valid ${encoding} data (Content-Encoding: ${encoding})${why}`,
      `not valid ${encoding} data`,
      { cause },
    );
  }

  /** The body nests arrays and objects deeper than {@link MAX_BODY_DEPTH} (422). */
  static tooDeep(maxDepth: number): BodyRefusedError {
    return new BodyRefusedError(
      422,
      `the body nests arrays and objects deeper than ${maxDepth} levels; send a flatter body`,
      `nested deeper than ${maxDepth} levels`,
    );
  }

  /**
   * The body holds an object key `__proto__`, which validation would silently drop (422).
   * Refused rather than changed: a client's data is never lost without a word.
   */
  static protoKey(path: readonly (string | number)[]): BodyRefusedError {
    return new BodyRefusedError(
      422,
      `the body holds an object key "__proto__" at ${formatPath(path)}; rename the key`,
      'object key "__proto__" is not accepted',
      { path },
    );
  }

  /** The body is not JSON (422). */
  static notJson(cause: unknown): BodyRefusedError {
    const why = cause instanceof Error ? cause.message : String(cause);
    return new BodyRefusedError(422, `the body is not valid JSON: ${why}`, "not valid JSON", {
      cause,
    });
  }
}

/** How {@link jsonBody} reads. */
export interface JsonBodyOptions {
  /** The largest body accepted, in bytes, both as sent and once decompressed. @default 64 MiB */
  readonly limitBytes?: number;
  /**
   * Parse the body as JSON whatever its `Content-Type` (control routes). Otherwise only an
   * `application/json` body is parsed; any other body is read to its end (within the limit) and
   * dropped, leaving `req.body` undefined. @default false
   */
  readonly anyContentType?: boolean;
}

/** The requests whose body a {@link jsonBody} reader took (or is taking). */
const taken = new WeakSet<IncomingMessage>();

/**
 * Middleware reading the whole body into `req.body` before calling `next()`; a second reader on
 * the same request passes it through, so the body can be read before admission and the route
 * still find it. Without a body `req.body` is undefined; an empty JSON body is `{}`.
 *
 * ## Refusals (`invalid_request`, before anything counts the request)
 * - 413 at once when `Content-Length` declares more than the limit, or when the body, as sent or
 *   once inflated, grows past it (inflation stops there);
 * - 415 for a `Content-Encoding` other than identity, gzip, deflate or br, or a charset other
 *   than UTF-8;
 * - 400 when the body is not valid data of its encoding;
 * - 422 when it is not JSON, or nests deeper than {@link MAX_BODY_DEPTH} levels (seen while it
 *   arrives, before it is parsed).
 *
 * A 413 sent before the body ended closes the connection after the reply, so the rest of the
 * body is never waited for; any other refusal discards the rest of the body (within the limit)
 * so the client reads the refusal. A client that goes away mid-body gets no reply.
 */
export function jsonBody(options: JsonBodyOptions = {}): RequestHandler {
  const limitBytes = options.limitBytes ?? BODY_LIMIT_BYTES;
  const anyContentType = options.anyContentType ?? false;
  return (req, res, next) => {
    if (taken.has(req) || req.readableEnded) {
      next();
      return;
    }
    taken.add(req);
    readBody(req, limitBytes, anyContentType).then(
      (read) => {
        if (read === null) return; // the client went away: nobody to answer
        req.body = read.body;
        next();
      },
      (error: unknown) => {
        if (!req.complete) {
          if (error instanceof BodyRefusedError && error.status === 413) {
            // Too large to read to its end: answer, then close instead of waiting for the rest.
            if (!res.headersSent) res.setHeader("Connection", "close");
          } else {
            // The rest is within the limit: discard it, so the client, still sending, reads the
            // refusal instead of a reset connection (a bounded slow sender meets the request
            // timeout).
            req.resume();
          }
        }
        next(error);
      },
    );
  };
}

/** A content type parameter, lower-cased; null when absent. */
function charsetOf(contentType: string | undefined): string | null {
  if (contentType === undefined) return null;
  const match = /;\s*charset\s*=\s*"?([^";\s]*)"?/i.exec(contentType);
  return match === null ? null : (match[1] ?? "").toLowerCase();
}

/** The decoder of a `Content-Encoding`; null for identity, undefined when not spoken. */
function decoderFor(encoding: string): Transform | null | undefined {
  switch (encoding) {
    case "identity":
      return null;
    case "gzip":
      return createGunzip();
    case "deflate":
      return createInflate();
    case "br":
      return createBrotliDecompress();
    default:
      return undefined;
  }
}

/**
 * Reads the body of `req`: `{ body }` once complete, null when the client went away first;
 * rejects with a {@link BodyRefusedError}.
 */
function readBody(
  req: Request,
  limitBytes: number,
  anyContentType: boolean,
): Promise<{ body: unknown } | null> {
  const headers = req.headers;
  // type-is's rule: a request has a body when it declares a length or a transfer coding.
  if (headers["transfer-encoding"] === undefined && headers["content-length"] === undefined) {
    return Promise.resolve({ body: undefined });
  }
  const declared = Number(headers["content-length"] ?? 0);
  if (declared > limitBytes)
    return Promise.reject(BodyRefusedError.tooLarge(limitBytes, "declared"));
  const parse = anyContentType || typeof req.is("application/json") === "string";
  let decoder: Transform | null = null;
  let encoding = "identity";
  if (parse) {
    const charset = charsetOf(headers["content-type"]);
    if (charset !== null && charset !== "utf-8" && charset !== "utf8") {
      return Promise.reject(BodyRefusedError.unsupportedCharset(charset));
    }
    encoding = (headers["content-encoding"] ?? "identity").trim().toLowerCase() || "identity";
    const found = decoderFor(encoding);
    if (found === undefined) return Promise.reject(BodyRefusedError.unsupportedEncoding(encoding));
    decoder = found;
  }

  return new Promise((resolve, reject) => {
    const scanner = parse ? new JsonDepthScanner(MAX_BODY_DEPTH) : null;
    const chunks: Buffer[] = [];
    let received = 0;
    let decodedBytes = 0;
    let settled = false;

    const settle = (outcome: () => { body: unknown } | null): void => {
      if (settled) return;
      settled = true;
      req.off("data", onData);
      req.off("end", onEnd);
      req.off("error", onGone);
      req.off("close", onGone);
      if (decoder !== null) {
        decoder.removeAllListeners();
        decoder.on("error", () => undefined); // late zlib errors of a dropped body
        decoder.destroy();
      }
      try {
        resolve(outcome());
      } catch (error) {
        reject(error);
      }
    };
    const refuse = (error: BodyRefusedError): void =>
      settle(() => {
        throw error;
      });

    const onDecoded = (chunk: Buffer): void => {
      if (settled) return;
      decodedBytes += chunk.length;
      if (decodedBytes > limitBytes) {
        refuse(BodyRefusedError.tooLarge(limitBytes, "inflated"));
      } else if (scanner !== null && !scanner.feed(chunk)) {
        refuse(BodyRefusedError.tooDeep(MAX_BODY_DEPTH));
      } else {
        chunks.push(chunk);
      }
    };
    const complete = (): { body: unknown } => {
      if (!parse) return { body: undefined };
      const buffer = chunks.length === 1 ? (chunks[0] as Buffer) : Buffer.concat(chunks);
      let text = buffer.toString("utf8");
      if (text.charCodeAt(0) === 0xfeff) text = text.slice(1);
      // body-parser's rule, kept: an empty JSON body is an empty object.
      if (text.length === 0) return { body: {} };
      let body: unknown;
      try {
        body = JSON.parse(text);
      } catch (error) {
        throw BodyRefusedError.notJson(error);
      }
      const protoPath = mayHoldProtoKey(text) ? protoKeyPath(body) : null;
      if (protoPath !== null) throw BodyRefusedError.protoKey(protoPath);
      return { body };
    };

    function onData(chunk: Buffer): void {
      received += chunk.length;
      if (received > limitBytes) refuse(BodyRefusedError.tooLarge(limitBytes, "received"));
      else if (decoder !== null) decoder.write(chunk);
      else if (parse) onDecoded(chunk);
    }
    function onEnd(): void {
      if (decoder !== null) decoder.end();
      else settle(complete);
    }
    /** An error or a close before the body's end: the client went away. */
    function onGone(): void {
      if (!req.complete) settle(() => null);
    }

    if (decoder !== null) {
      decoder.on("data", onDecoded);
      decoder.on("end", () => settle(complete));
      decoder.on("error", (error) => refuse(BodyRefusedError.badEncoding(encoding, error)));
    }
    req.on("data", onData);
    req.on("end", onEnd);
    req.on("error", onGone);
    req.on("close", onGone);
  });
}
