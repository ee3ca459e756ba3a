import type { Request, Response } from "express";
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

const cancellations = new WeakMap<Request, AbortSignal[]>();

/**
 * Links a cancellation to the data route handler that will serve `req`: when `signal` aborts,
 * the handler's `signal` aborts with its reason. Middleware that must be able to stop a request
 * (e.g. a retire stopping a tracked `/run`) calls it before `next()`.
 */
export function linkCancellation(req: Request, signal: AbortSignal): void {
  const list = cancellations.get(req);
  if (list === undefined) cancellations.set(req, [signal]);
  else list.push(signal);
}

/** The cancellations linked to `req` (see {@link linkCancellation}). */
export function linkedCancellations(req: Request): readonly AbortSignal[] {
  return cancellations.get(req) ?? [];
}
