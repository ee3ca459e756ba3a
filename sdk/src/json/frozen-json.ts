/**
 * Frozen copies of JSON values (trusted trees): {@link frozenJson} validates a value as it
 * copies it, deep-freezes the copy and registers it as trusted, so a checkpoint commit writes it
 * without walking it again.
 *
 * @module
 */
import { setOwnKey } from "../util/own-key.js";
import {
  MAX_JSON_DEPTH,
  MEMBER_CHARS,
  Refusal,
  checkBigint,
  describe,
  isExtendedNumber,
  toNotJsonError,
  validate,
  type JsonValue,
} from "./json-value.js";
import { trustTree, trustedTree } from "./trusted-trees.js";

const objectProto = Object.prototype;
const arrayProto = Array.prototype;
const getProto = Object.getPrototypeOf;
const isArray = Array.isArray;

/** Per-call state of the copying walk. */
interface CopyState {
  /** The validation walk's rough size of the text (`WalkState.chars` in json-value.ts). */
  chars: number;
  /** Deepest nesting level reached so far in the current container's subtree. */
  deepest: number;
  /** Whether the current container's subtree holds an extended number or a bigint. */
  extended: boolean;
}

function copyValue(value: unknown, depth: number, st: CopyState): JsonValue {
  switch (typeof value) {
    case "string":
      st.chars += value.length;
      return value;
    case "boolean":
      return value;
    case "number":
      if (isExtendedNumber(value)) st.extended = true;
      return value;
    case "bigint":
      st.extended = checkBigint(value);
      return value;
    case "object":
      return value === null ? null : copyContainer(value, depth + 1, st);
    default:
      throw new Refusal(describe(value));
  }
}

/**
 * Copies an array or object at nesting level `depth` into a fresh frozen one, validating it on
 * the way, and registers the copy as trusted unless it holds an extended number. A trusted
 * container met on the way is frozen and owned already: it is reused, not copied.
 */
function copyContainer(obj: object, depth: number, st: CopyState): JsonValue {
  if (depth > MAX_JSON_DEPTH) {
    throw new Refusal(`a value nested deeper than ${MAX_JSON_DEPTH} levels`, true);
  }
  const known = trustedTree(obj);
  if (known !== undefined && depth + known.height - 1 <= MAX_JSON_DEPTH) {
    st.chars += known.chars;
    st.deepest = Math.max(st.deepest, depth + known.height - 1);
    return obj as JsonValue;
  }
  // Measured per container, so every container of the copy is registered with its own size.
  const outerChars = st.chars;
  const outerDeepest = st.deepest;
  const outerExtended = st.extended;
  st.deepest = depth;
  st.extended = false;
  let copy: JsonValue[] | { [key: string]: JsonValue };
  let i = 0;
  if (isArray(obj)) {
    if (getProto(obj) !== arrayProto) throw new Refusal(describe(obj));
    const arr = obj as unknown[];
    const out: JsonValue[] = [];
    st.chars += arr.length * MEMBER_CHARS;
    try {
      for (const n = arr.length; i < n; i++) {
        const item = arr[i];
        if (item === undefined && !(i in arr)) throw new Refusal("an array hole (undefined)");
        out.push(copyValue(item, depth, st));
      }
    } catch (e) {
      if (e instanceof Refusal) e.trail.push(i);
      throw e;
    }
    copy = out;
  } else {
    const proto: unknown = getProto(obj);
    if (proto !== objectProto && proto !== null) throw new Refusal(describe(obj));
    // Read once each, into data properties: a getter or proxy cannot answer differently later.
    const keys = Object.keys(obj);
    const out: { [key: string]: JsonValue } = {};
    st.chars += keys.length * MEMBER_CHARS;
    try {
      for (const n = keys.length; i < n; i++) {
        const key = keys[i] as string;
        setOwnKey(out, key, copyValue((obj as Record<string, unknown>)[key], depth, st));
      }
    } catch (e) {
      if (e instanceof Refusal) e.trail.push(keys[i] as string);
      throw e;
    }
    copy = out;
  }
  Object.freeze(copy);
  const extended = st.extended;
  if (!extended) trustTree(copy, { chars: st.chars - outerChars, height: st.deepest - depth + 1 });
  st.deepest = Math.max(outerDeepest, st.deepest);
  st.extended = outerExtended || extended;
  return copy;
}

/**
 * A deep-frozen copy of a JSON value, validated as it is copied: checkpoint commits write it
 * without walking it again, however often they export it. Parts of it that are frozen copies
 * already are reused, not copied, so a state that grows by appending to frozen parts is copied
 * (and checked) once per part. Scalars are returned as they are.
 *
 * ## Rules
 * - The copy is frozen all the way down: nothing, the caller included, can change it, which is
 *   what lets a commit trust it. Keep the copy and drop the original.
 * - Only the copy is trusted, never the value passed in; a copy holding NaN, ±Infinity, -0, an
 *   unsafe integer or a bigint is frozen but checked again at each commit.
 * - Accepts what {@link assertJsonValue} accepts, typed as it came (the copy has the same
 *   shape); a getter is read once, into a data property.
 *
 * @throws {@link NotJsonError} naming the path of the first offending value.
 * @experimental
 * @example
 * import { frozenJson } from "gym-participant-sdk";
 *
 * const turn = frozenJson({ turn: 1, answer: [{ type: "message", content: "hi" }] });
 * // Object.isFrozen(turn) === true; exporting it again costs no validation walk.
 * @see docs/storage.md
 */
export function frozenJson<T>(value: T): T {
  const st: CopyState = { chars: 0, deepest: 0, extended: false };
  try {
    return copyValue(value, 0, st) as T;
  } catch (e) {
    if (!(e instanceof Refusal)) throw e;
    // Too deep or round a cycle: the validation walk names which, and where (it finds this
    // problem or an earlier one, as in json-value.ts's validateSized).
    if (e.tooDeep) validate(value);
    throw toNotJsonError(e);
  }
}
