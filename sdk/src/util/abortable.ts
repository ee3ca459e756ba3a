/**
 * Resolves when `promise` settles, or rejects with the reason of the first of `signals` to
 * abort; listeners are removed either way.
 */
export function untilSettledOrAborted<T>(
  promise: Promise<T>,
  signals: readonly (AbortSignal | undefined)[],
): Promise<T> {
  for (const s of signals) if (s?.aborted) return Promise.reject(s.reason as unknown);
  return new Promise<T>((resolve, reject) => {
    const listeners: [AbortSignal, () => void][] = [];
    const detach = (): void => {
      for (const [s, listener] of listeners) s.removeEventListener("abort", listener);
    };
    for (const s of signals) {
      if (s === undefined) continue;
      const listener = (): void => {
        detach();
        reject(s.reason as unknown);
      };
      listeners.push([s, listener]);
      s.addEventListener("abort", listener, { once: true });
    }
    promise.then(
      (value) => {
        detach();
        resolve(value);
      },
      (error: unknown) => {
        detach();
        reject(error);
      },
    );
  });
}
