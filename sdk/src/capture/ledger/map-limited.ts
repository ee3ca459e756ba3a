/**
 * Runs `fn` over `items` with at most `limit` calls in flight and returns the results in item
 * order. The first failure is thrown once the calls in flight have settled.
 *
 * Why: a batch may name thousands of keys; one file operation at a time leaves the thread pool
 * idle, and all at once floods it and the descriptor table.
 */
export async function mapLimited<T, R>(
  items: readonly T[],
  limit: number,
  fn: (item: T) => Promise<R>,
): Promise<R[]> {
  const results = new Array<R>(items.length);
  let next = 0;
  let failed = false;
  const worker = async (): Promise<void> => {
    while (!failed && next < items.length) {
      const index = next++;
      try {
        results[index] = await fn(items[index] as T);
      } catch (error) {
        failed = true;
        throw error;
      }
    }
  };
  const settled = await Promise.allSettled(
    Array.from({ length: Math.min(limit, items.length) }, worker),
  );
  const failure = settled.find((outcome) => outcome.status === "rejected");
  if (failure !== undefined) throw (failure as PromiseRejectedResult).reason;
  return results;
}
