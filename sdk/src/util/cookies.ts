/**
 * Cookie jars as plain `name → value` maps: what agents and environment servers carry between
 * calls (cookie values are flattened to plain strings).
 *
 * @module
 */

/** A cookie jar: name → value. */
export type CookieJar = Record<string, string>;

/** Parses a request's `Cookie` header into a jar (later duplicates win). */
export function parseCookieHeader(header: string | undefined | null): CookieJar {
  const jar: CookieJar = {};
  if (header === undefined || header === null) return jar;
  for (const part of header.split(";")) {
    const at = part.indexOf("=");
    if (at <= 0) continue;
    const name = part.slice(0, at).trim();
    if (name.length > 0) setOwn(jar, name, part.slice(at + 1).trim());
  }
  return jar;
}

/** The `Cookie` header of a jar, or undefined when it is empty. */
export function cookieHeader(jar: Readonly<CookieJar> | null | undefined): string | undefined {
  if (jar === null || jar === undefined) return undefined;
  const parts = Object.entries(jar).map(([name, value]) => `${name}=${value}`);
  return parts.length === 0 ? undefined : parts.join("; ");
}

/** The name → value pairs a reply's `Set-Cookie` headers set (attributes dropped). */
export function setCookieJar(header: string | readonly string[] | undefined): CookieJar {
  const jar: CookieJar = {};
  if (header === undefined) return jar;
  for (const line of typeof header === "string" ? [header] : header) {
    const first = line.split(";", 1)[0] ?? "";
    const at = first.indexOf("=");
    if (at <= 0) continue;
    setOwn(jar, first.slice(0, at).trim(), first.slice(at + 1).trim());
  }
  return jar;
}

/** `Set-Cookie` lines setting each cookie of a jar on the root path. */
export function setCookieLines(jar: Readonly<CookieJar>): string[] {
  return Object.entries(jar).map(([name, value]) => `${name}=${value}; Path=/`);
}

/** Sets a cookie as an own key: a cookie named `__proto__` is kept, not made the prototype. */
function setOwn(jar: CookieJar, name: string, value: string): void {
  Object.defineProperty(jar, name, { value, enumerable: true, writable: true, configurable: true });
}
