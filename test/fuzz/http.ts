/**
 * How the fuzz talks to a server: through `fetch` like a client would, over a raw socket when
 * `fetch` saw no reply (to learn whether the server answered before the connection broke), and
 * over raw sockets for what `fetch` cannot send: a half-sent body and a declared
 * `Content-Length` far above the body limit.
 */
import { connect, type Socket } from "node:net";
import type { FuzzCase } from "./cases.js";

/** Every request is answered or refused within this bound (a hang is a finding). */
export const REQUEST_TIMEOUT_MS = 20_000;

/** What came back for one request. */
export interface Outcome {
  /** The HTTP status; 0 when nothing came back. */
  readonly status: number;
  /** The reply body, or what went wrong when there was none. */
  readonly text: string;
  /**
   * Set when `fetch` lost the reply (the connection broke while the body was still being sent)
   * but the same request over a raw socket read a status line before the break: what broke.
   */
  readonly lostReply?: string;
}

/** Sends `fuzzCase` to `base` with `fetch`; on a network error, once more over a raw socket. */
export async function send(base: string, fuzzCase: FuzzCase): Promise<Outcome> {
  try {
    const res = await fetch(`${base}${fuzzCase.path}`, {
      method: fuzzCase.method,
      headers: fuzzCase.headers,
      body: fuzzCase.body ?? null,
      signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
    });
    return { status: res.status, text: await res.text() };
  } catch (error) {
    const why = describe(error);
    if (why.includes("aborted due to timeout")) return { status: 0, text: why };
    const raw = await sendRaw(base, fuzzCase);
    return raw.status === 0
      ? { status: 0, text: `${why}; over a raw socket: ${raw.text}` }
      : { ...raw, lostReply: why };
  }
}

function describe(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  const cause = error.cause instanceof Error ? `: ${error.cause.message}` : "";
  return `${error.message}${cause}`;
}

/**
 * Sends `fuzzCase` over a raw socket and reads whatever reply arrives, even when writing the
 * body fails because the server closed the connection first.
 */
export function sendRaw(base: string, fuzzCase: FuzzCase): Promise<Outcome> {
  const url = new URL(base);
  return new Promise((resolve) => {
    let reply = Buffer.alloc(0);
    let writeError = "";
    const socket = connect(Number(url.port), url.hostname);
    const finish = (why: string) => {
      clearTimeout(timer);
      socket.destroy();
      const text = reply.toString("latin1");
      const status = /^HTTP\/1\.[01] (\d{3})/.exec(text);
      const body = text.split("\r\n\r\n").slice(1).join("\r\n\r\n");
      resolve(
        status === null
          ? { status: 0, text: `${why}${writeError ? ` (write: ${writeError})` : ""}` }
          : { status: Number(status[1]), text: body },
      );
    };
    const timer = setTimeout(() => finish("no reply in time"), REQUEST_TIMEOUT_MS);
    socket.on("connect", () => {
      const headers = {
        host: url.host,
        connection: "close",
        ...fuzzCase.headers,
        ...(fuzzCase.body === undefined ? {} : { "content-length": `${fuzzCase.body.length}` }),
      };
      const head = Object.entries(headers)
        .map(([k, v]) => `${k}: ${v}\r\n`)
        .join("");
      socket.write(`${fuzzCase.method} ${fuzzCase.path} HTTP/1.1\r\n${head}\r\n`);
      if (fuzzCase.body !== undefined) socket.write(fuzzCase.body);
    });
    socket.on("data", (chunk: Buffer) => {
      reply = Buffer.concat([reply, chunk]);
    });
    socket.on("error", (error) => {
      writeError = error.message;
    });
    socket.on("close", () => finish("connection closed without a reply"));
  });
}

/** Opens a request whose body never finishes; the socket stays open until the caller destroys it. */
export function halfSent(base: string, route: string): Promise<Socket> {
  const url = new URL(base);
  return new Promise((resolve, reject) => {
    const socket = connect(Number(url.port), url.hostname, () => {
      socket.write(
        `POST ${route} HTTP/1.1\r\nHost: ${url.host}\r\nContent-Type: application/json\r\n` +
          'Content-Length: 1000\r\n\r\n{"verify_',
      );
      socket.off("error", reject);
      socket.on("error", () => undefined); // the server may drop it: that is allowed
      resolve(socket);
    });
    socket.on("error", reject);
  });
}

/**
 * Writes `request` (raw HTTP/1.1 bytes) and answers the reply's status line, or "" when none
 * came within 5 s (the socket is closed either way).
 */
export function rawExchange(base: string, request: Buffer | string): Promise<string> {
  const url = new URL(base);
  return new Promise((resolve) => {
    let answer = "";
    const socket = connect(Number(url.port), url.hostname, () => socket.write(request));
    const done = () => {
      clearTimeout(timer);
      socket.destroy();
      resolve(answer.split("\r\n")[0] ?? "");
    };
    const timer = setTimeout(done, 5_000);
    socket.on("data", (chunk: Buffer) => {
      answer += chunk.toString("latin1");
      if (answer.includes("\r\n")) done();
    });
    socket.on("error", done);
    socket.on("close", done);
  });
}

/** A 2-byte body declared as `declared` bytes on `route`: 413 is expected at once. */
export function declaredLength(
  base: string,
  route: string,
  declared: number,
  headers: Record<string, string> = {},
): Promise<string> {
  const host = new URL(base).host;
  const extra = Object.entries(headers)
    .map(([k, v]) => `${k}: ${v}\r\n`)
    .join("");
  return rawExchange(
    base,
    `POST ${route} HTTP/1.1\r\nHost: ${host}\r\nContent-Type: application/json\r\n${extra}` +
      `Content-Length: ${declared}\r\n\r\n{}`,
  );
}

/**
 * Requests that only a raw socket sends, each refused by the HTTP layer or the body reader: a
 * broken chunk size, both a length and a chunked coding, a header block past Node's limit, a
 * chunked body that is not gzip, an absurd HTTP version.
 */
export function malformedRequests(host: string, route: string): Record<string, string> {
  const head = `POST ${route} HTTP/1.1\r\nHost: ${host}\r\nContent-Type: application/json\r\n`;
  return {
    "bad-chunk-size": `${head}Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n`,
    "length-and-chunked": `${head}Content-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n`,
    "huge-header": `${head}X-Fill: ${"a".repeat(20_000)}\r\nContent-Length: 2\r\n\r\n{}`,
    "chunked-garbage-gzip": `${head}Content-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n4\r\n\x1f\x8bxx\r\n0\r\n\r\n`,
    "http-version-9": `POST ${route} HTTP/9.9\r\nHost: ${host}\r\nContent-Length: 2\r\n\r\n{}`,
  };
}

/** A `curl` command that sends `fuzzCase` again (the body inline when it is small). */
export function curlOf(base: string, fuzzCase: FuzzCase): string {
  const quote = (text: string) => `'${text.replaceAll("'", `'\\''`)}'`;
  const headers = Object.entries(fuzzCase.headers)
    .map(([k, v]) => ` -H ${quote(`${k}: ${v}`)}`)
    .join("");
  const command = `curl -sS -X ${fuzzCase.method} ${quote(`${base}${fuzzCase.path}`)}${headers}`;
  const body = fuzzCase.body;
  if (body === undefined) return command;
  if (body.length > 2048) return `${command} --data-binary @<(the ${body.length}-byte body)`;
  const printable = /^[\x20-\x7e]*$/.test(body.toString("latin1"));
  return printable
    ? `${command} --data-binary ${quote(body.toString("latin1"))}`
    : `echo ${body.toString("base64")} | base64 -d | ${command} --data-binary @-`;
}
