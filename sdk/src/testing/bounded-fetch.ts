import { TestKitError } from "./test-kit-error.js";

/** A reply read in full: status, parsed body (JSON when it parses, else text) and headers. */
export interface TestReply {
  readonly status: number;
  readonly body: unknown;
  readonly headers: Headers;
}

/**
 * One HTTP call that cannot hang a test: aborted after `timeoutMs` (or when `cancel` fires),
 * failing with a {@link TestKitError} naming `operation`.
 */
export async function boundedFetch(
  operation: string,
  url: string,
  init: RequestInit,
  timeoutMs: number,
  cancel?: AbortSignal,
): Promise<TestReply> {
  const timeout = AbortSignal.timeout(timeoutMs);
  const signal = cancel === undefined ? timeout : AbortSignal.any([timeout, cancel]);
  try {
    const res = await fetch(url, { ...init, signal });
    const text = await res.text();
    return { status: res.status, body: parseBody(text), headers: res.headers };
  } catch (error) {
    const problem = timeout.aborted
      ? `got no reply within ${timeoutMs} ms`
      : cancel?.aborted === true
        ? "was cancelled"
        : `failed: ${error instanceof Error ? error.message : String(error)}`;
    throw new TestKitError(operation, problem, undefined, { cause: error });
  }
}

function parseBody(text: string): unknown {
  if (text === "") return null;
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return text;
  }
}
