import type { ServerResponse } from "node:http";

/**
 * Runs `listener` once, synchronously, just before the response head is written (explicitly or
 * by the first body write), with the status about to be sent. Headers may still be set there.
 */
export function onResponseStart(res: ServerResponse, listener: (status: number) => void): void {
  const writeHead = res.writeHead;
  let fired = false;
  res.writeHead = function (this: ServerResponse, ...args: unknown[]) {
    if (!fired) {
      fired = true;
      if (typeof args[0] === "number") res.statusCode = args[0];
      listener(res.statusCode);
    }
    return (writeHead as (...a: unknown[]) => ServerResponse).apply(this, args);
  } as ServerResponse["writeHead"];
}
