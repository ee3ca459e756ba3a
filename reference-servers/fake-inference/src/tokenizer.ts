/**
 * A deterministic word-level tokenizer: no vocabulary file and no state, so every process (and
 * every restart) maps the same text to the same token IDs.
 *
 * A piece is a run of whitespace followed by a word (or trailing whitespace alone), so the pieces
 * of a text concatenate back to it exactly and a stream can send one piece per token. A piece's ID
 * is its 32-bit FNV-1a hash over UTF-8, shifted past the special tokens.
 *
 * @module
 */

/** The special tokens: one marker per chat role, and the marker opening a tool call. */
export const SPECIAL_TOKENS = {
  system: 1,
  developer: 2,
  user: 3,
  assistant: 4,
  tool: 5,
  tool_call: 6,
} as const;

/** IDs below this are reserved for special tokens; word IDs start here. */
const WORD_BASE = 16;
const utf8 = new TextEncoder();

/**
 * Splits `text` into word pieces that concatenate back to it.
 *
 * @example
 * wordPieces("It is sunny.  "); // ["It", " is", " sunny.", "  "]
 */
export function wordPieces(text: string): string[] {
  return text.match(/\s*\S+|\s+/g) ?? [];
}

/** The token ID of one piece (or of any label, such as a tool or role name). */
export function pieceId(piece: string): number {
  let hash = 0x811c9dc5;
  for (const byte of utf8.encode(piece)) {
    hash ^= byte;
    hash = Math.imul(hash, 0x01000193) >>> 0;
  }
  return WORD_BASE + hash;
}

/** The token IDs of `text`, one per {@link wordPieces} piece. */
export function tokenize(text: string): number[] {
  return wordPieces(text).map(pieceId);
}

/** The marker token of a chat role; an unknown role gets a stable word ID of its own. */
export function roleToken(role: string): number {
  return SPECIAL_TOKENS[role as keyof typeof SPECIAL_TOKENS] ?? pieceId(`<|${role}|>`);
}

/**
 * The log probability the fake policy gives a token: a stable multiple of 1/8 in [-1, -1/8],
 * exact in float32, so staged digests never depend on rounding.
 */
export function logprobOf(tokenId: number): number {
  return -((tokenId % 8) + 1) / 8;
}
