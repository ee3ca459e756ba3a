/**
 * Conversation fingerprints, version 3: pure functions over request/response
 * items that identify a call's parent across the Chat, Responses and Anthropic dialects. Byte-exact
 * with the Python reference, which reads items with dict semantics (`.get`, truthiness, `str()`);
 * those reads are spelled out here with the same fallbacks.
 *
 * Every field is hashed as 1 tag byte, its UTF-8 length as 8 bytes big-endian, and its UTF-8
 * bytes, so no concatenation of fields collides with another field boundary.
 *
 * @module
 */
import { canonicalJson } from "./canonical-json.js";
import { CaptureError } from "./capture-error.js";
import { Sha256Writer } from "./digests.js";
import { parsePythonJson } from "./python-json-parse.js";
import { PyFloat, pythonFloatJson } from "./python-json.js";

/** The fingerprint canonicalization version; ledger rows stamped with another are ignored. */
export const FINGERPRINT_VERSION = 3;

const FINGERPRINT_DOMAIN = "nemo-gym-lineage";
const CONTEXT_DOMAIN = "nemo-gym-lineage-context";
const INSTRUCTION_ROLES: ReadonlySet<unknown> = new Set(["system", "developer"]);
const TEXT_BLOCK_TYPES: ReadonlySet<string> = new Set(["", "text", "input_text", "output_text"]);
// Python's str.strip() whitespace: JavaScript's trim() also strips U+FEFF and misses U+001C-U+001F
// and U+0085.
const PY_SPACE =
  "[\\t\\n\\v\\f\\r\\x1c-\\x20\\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000]";
const PY_STRIP = new RegExp(`^${PY_SPACE}+|${PY_SPACE}+$`, "g");

type Item = Record<string, unknown>;

function fail(message: string): never {
  throw new CaptureError("invalid_fingerprint_input", message);
}

function isDict(value: unknown): value is Item {
  return (
    typeof value === "object" &&
    value !== null &&
    !Array.isArray(value) &&
    !(value instanceof PyFloat)
  );
}

/** `item.get(key)`: own properties only; a missing key reads as null (Python's None). */
function get(item: Item, key: string): unknown {
  return Object.hasOwn(item, key) ? item[key] : null;
}

/** Python truthiness of a JSON value. */
function truthy(value: unknown): boolean {
  if (value === null || value === undefined || value === false || value === "" || value === 0) {
    return false;
  }
  if (typeof value === "bigint") return value !== 0n;
  if (value instanceof PyFloat) return value.value !== 0;
  if (Array.isArray(value)) return value.length > 0;
  if (typeof value === "object") return Object.keys(value).length > 0;
  return true;
}

/** `a or b or …`: the first truthy value, else the last. */
function or(...values: unknown[]): unknown {
  return values.find(truthy) ?? values[values.length - 1];
}

/** Python's `str()` of a JSON scalar. */
function pyStr(value: unknown): string {
  if (typeof value === "string") return value;
  if (value === null || value === undefined) return "None";
  if (typeof value === "boolean") return value ? "True" : "False";
  if (typeof value === "bigint") return value.toString();
  if (typeof value === "number") {
    return Number.isSafeInteger(value) && !Object.is(value, -0) ? String(value) : pyFloatStr(value);
  }
  if (value instanceof PyFloat) return pyFloatStr(value.value);
  return fail(`cannot use ${Array.isArray(value) ? "a list" : "an object"} as an identifier`);
}

function pyFloatStr(value: number): string {
  if (Number.isNaN(value)) return "nan";
  if (!Number.isFinite(value)) return value > 0 ? "inf" : "-inf";
  return pythonFloatJson(value);
}

/** `item.get(key, "")` then `str()`: a key present with null reads "None". */
function strOrEmpty(item: Item, key: string): string {
  return Object.hasOwn(item, key) ? pyStr(item[key]) : "";
}

/**
 * Normalizes a tool call's arguments for comparison: null is `""`; a string is parsed as JSON
 * (Python `json.loads`) and re-serialized canonically, or stripped of surrounding whitespace when
 * it is not JSON; any other value is serialized canonically. Harnesses re-serialize arguments
 * between turns, so comparison must not depend on spacing or key order.
 *
 * @example
 * canonicalizeToolArguments('{ "b": 1, "a": 2 }'); // '{"a":2,"b":1}'
 */
export function canonicalizeToolArguments(value: unknown): string {
  if (value === null || value === undefined) return "";
  if (typeof value !== "string") return canonicalJson(value);
  let parsed: unknown;
  try {
    parsed = parsePythonJson(value);
  } catch (error) {
    if (!(error instanceof CaptureError)) throw error;
    return value.replace(PY_STRIP, "");
  }
  return canonicalJson(parsed);
}

/** Typed content parts; tool calls and tool results are read separately. */
function contentOf(content: unknown): [string, string][] {
  if (content === null || content === undefined) return [];
  if (typeof content === "string") return content ? [["text", content]] : [];
  if (!Array.isArray(content)) fail(`unsupported message content: ${describe(content)}`);
  const parts: [string, string][] = [];
  for (const block of content) {
    if (typeof block === "string") {
      if (block) parts.push(["text", block]);
      continue;
    }
    if (!isDict(block)) fail(`unsupported content block: ${describe(block)}`);
    const type = pyStr(or(get(block, "type"), ""));
    if (type === "tool_use" || type === "tool_result") continue;
    const text = get(block, "text");
    if (typeof text === "string" && TEXT_BLOCK_TYPES.has(type)) {
      if (text) parts.push(["text", text]);
      continue;
    }
    if (!type) fail("content block has no supported type");
    parts.push([type, canonicalJson(block)]);
  }
  return parts;
}

/** Tool calls as (id, name, canonical arguments), across the three dialects. */
function toolsOf(item: Item): [string, string, string][] {
  const tools: [string, string, string][] = [];
  // A Responses function_call item is itself the call.
  if (get(item, "type") === "function_call") {
    let name = strOrEmpty(item, "name");
    const namespace = get(item, "namespace");
    // The namespace keeps same-named tools of different namespaces apart.
    if (truthy(namespace)) name = `${pyStr(namespace)}__${name}`;
    tools.push([
      pyStr(or(get(item, "call_id"), get(item, "id"), "")),
      name,
      canonicalizeToolArguments(get(item, "arguments")),
    ]);
  }
  const content = get(item, "content");
  if (Array.isArray(content)) {
    for (const block of content) {
      if (!isDict(block) || get(block, "type") !== "tool_use") continue;
      tools.push([
        pyStr(or(get(block, "id"), "")),
        strOrEmpty(block, "name"),
        canonicalizeToolArguments(get(block, "input")),
      ]);
    }
  }
  const calls = or(get(item, "tool_calls"), []);
  if (!Array.isArray(calls)) fail(`tool_calls must be a list, got ${describe(calls)}`);
  for (const raw of calls) {
    const call = or(raw, {});
    if (!isDict(call)) fail(`a tool call must be an object, got ${describe(call)}`);
    const fn = or(get(call, "function"), {});
    if (!isDict(fn)) fail(`a tool call's function must be an object, got ${describe(fn)}`);
    tools.push([
      pyStr(or(get(call, "id"), "")),
      strOrEmpty(fn, "name"),
      canonicalizeToolArguments(get(fn, "arguments")),
    ]);
  }
  return tools;
}

/** Tool results as (call id, payload), across the three dialects. */
function toolResultsOf(item: Item): [string, string][] {
  const payload = (value: unknown) => (typeof value === "string" ? value : canonicalJson(value));
  const parts: [string, string][] = [];
  if (get(item, "type") === "function_call_output") {
    parts.push([
      pyStr(or(get(item, "call_id"), get(item, "id"), "")),
      payload(get(item, "output")),
    ]);
  } else if (get(item, "role") === "tool") {
    parts.push([pyStr(or(get(item, "tool_call_id"), "")), payload(get(item, "content"))]);
  }
  const content = get(item, "content");
  if (Array.isArray(content)) {
    for (const block of content) {
      if (!isDict(block) || get(block, "type") !== "tool_result") continue;
      parts.push([
        pyStr(or(get(block, "tool_use_id"), get(block, "id"), "")),
        payload(get(block, "content")),
      ]);
    }
  }
  return parts;
}

function describe(value: unknown): string {
  if (value === null) return "null";
  if (Array.isArray(value)) return "a list";
  return typeof value === "object" ? "an object" : `a ${typeof value}`;
}

/**
 * Hashes one tagged, length-delimited UTF-8 field: the tag byte, the UTF-8 length as u64
 * big-endian, the bytes. Gathered in the writer's buffer and hashed once per digest: a native
 * `update` per field cost more than the fields (a cut round digests thousands of conversations).
 */
function updateField(hash: Sha256Writer, tag: number, value: string): void {
  hash.u8(tag);
  hash.text(value, "fingerprint field");
}

function itemsOf(items: readonly unknown[] | null): Item[] {
  return (items ?? []).map((item) => {
    if (!isDict(item)) fail(`request item is not an object: ${describe(item)}`);
    return item;
  });
}

/**
 * Fingerprints the model-authored items (role `assistant`, or Responses `function_call`), in
 * order: content parts as tags 0x00 type / 0x01 payload, tool calls as 0x02 id / 0x03 name /
 * 0x04 canonical arguments, under the domain `nemo-gym-lineage`. It identifies the call that
 * produced the last model-authored turn; user and tool content is left out. Returns `""` when no
 * item is model-authored.
 *
 * Throws {@link CaptureError} `invalid_fingerprint_input` for items the reference cannot read (a
 * non-object item, untyped non-text content blocks, content that has no canonical JSON).
 */
export function assistantFingerprint(items: readonly unknown[] | null): string {
  const hash = new Sha256Writer(FINGERPRINT_DOMAIN);
  let count = 0;
  for (const item of itemsOf(items)) {
    // Reasoning items are left out on purpose: harnesses need not echo them.
    if (get(item, "role") !== "assistant" && get(item, "type") !== "function_call") continue;
    count += 1;
    for (const [type, payload] of contentOf(get(item, "content"))) {
      updateField(hash, 0x00, type);
      updateField(hash, 0x01, payload);
    }
    for (const [id, name, args] of toolsOf(item)) {
      updateField(hash, 0x02, id);
      updateField(hash, 0x03, name);
      updateField(hash, 0x04, args);
    }
  }
  return count === 0 ? "" : hash.finish(null);
}

/**
 * Digests every item of a conversation under the domain `nemo-gym-lineage-context`: per item its
 * role (`role`, else `type`, else `""`; tag 0x00); then, unless the role is `system` or
 * `developer` (harness instructions count by position only, since harnesses rewrite volatile
 * fields such as today's date), its content parts (0x01 type, 0x02 payload), tool calls (0x03 id,
 * 0x04 name, 0x05 arguments) and tool results (0x06 call id, 0x07 output). A parent's tokens are
 * reused only when this digest of its context matches.
 *
 * Throws {@link CaptureError} `invalid_fingerprint_input` like {@link assistantFingerprint}.
 *
 * @example
 * conversationDigest([{ role: "user", content: "hi" }]);
 */
export function conversationDigest(items: readonly unknown[] | null): string {
  const hash = new Sha256Writer(CONTEXT_DOMAIN);
  for (const item of itemsOf(items)) {
    updateField(hash, 0x00, pyStr(or(get(item, "role"), get(item, "type"), "")));
    if (INSTRUCTION_ROLES.has(get(item, "role"))) continue;
    for (const [type, payload] of contentOf(get(item, "content"))) {
      updateField(hash, 0x01, type);
      updateField(hash, 0x02, payload);
    }
    for (const [id, name, args] of toolsOf(item)) {
      updateField(hash, 0x03, id);
      updateField(hash, 0x04, name);
      updateField(hash, 0x05, args);
    }
    // Tool results count: summarizing or truncating one changes the context.
    for (const [id, output] of toolResultsOf(item)) {
      updateField(hash, 0x06, id);
      updateField(hash, 0x07, output);
    }
  }
  return hash.finish(null);
}
