/**
 * Orders strings by UTF-16 code units, as `Array.prototype.sort` does by default and as Python's
 * `sorted` does for ASCII keys: the order scopes and blockers are compared and reported in.
 */
export function compareStrings(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}
