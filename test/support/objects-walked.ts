import { vi } from "vitest";

/** How many objects the validation walk visits while `fn` runs (it reads each object's values once). */
export function objectsWalked(fn: () => unknown): number {
  const values = vi.spyOn(Object, "values");
  try {
    fn();
    return values.mock.calls.length;
  } finally {
    values.mockRestore();
  }
}
