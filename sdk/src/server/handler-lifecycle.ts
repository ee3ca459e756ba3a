import type { Response } from "express";
import { deferred, type Deferred } from "../util/deferred.js";

const running = new WeakMap<Response, Deferred<void>>();

/**
 * Marks a data route's handler as running for this response; returns the function that marks it
 * settled. The base `Server` calls it around every data route handler.
 */
export function handlerStarted(res: Response): () => void {
  const settled = deferred<void>();
  running.set(res, settled);
  return () => {
    running.delete(res);
    settled.resolve();
  };
}

/**
 * Resolves when the handler of this response has settled, or null when no data route handler is
 * running for it. Middleware that counts work in flight waits for this, not for the connection
 * to close: a client that goes away does not stop a handler that ignores its signal.
 */
export function handlerSettled(res: Response): Promise<void> | null {
  return running.get(res)?.promise ?? null;
}
