/**
 * Python's `json.loads` for text whose numbers must keep their Python type: `1.0` stays a float
 * ({@link PyFloat}), `1` stays an int, `10**30` stays exact (a `bigint`). `JSON.parse` loses that
 * distinction, and the fingerprints re-serialize parsed tool arguments, where
 * `{"x": 1.0}` and `{"x": 1}` hash differently.
 *
 * @module
 */
import { CaptureError } from "./capture-error.js";
import { PyFloat } from "./python-json.js";

const NUMBER = /-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?/y;
const ESCAPES: Readonly<Record<string, string>> = {
  '"': '"',
  "\\": "\\",
  "/": "/",
  b: "\b",
  f: "\f",
  n: "\n",
  r: "\r",
  t: "\t",
};

class Parser {
  #pos = 0;
  constructor(readonly text: string) {}

  document(): unknown {
    this.#ws();
    const value = this.#value();
    this.#ws();
    if (this.#pos !== this.text.length) this.#fail("extra data");
    return value;
  }

  #fail(what: string): never {
    throw new CaptureError("invalid_wire_value", `not JSON at offset ${this.#pos}: ${what}`);
  }

  #ws(): void {
    // Python's json accepts exactly these four whitespace characters.
    while (/[ \t\n\r]/.test(this.text.charAt(this.#pos))) this.#pos++;
  }

  #word(word: string, value: unknown): unknown {
    if (!this.text.startsWith(word, this.#pos)) this.#fail("expecting value");
    this.#pos += word.length;
    return value;
  }

  #value(): unknown {
    const c = this.text.charAt(this.#pos);
    switch (c) {
      case '"':
        return this.#string();
      case "{":
        return this.#object();
      case "[":
        return this.#array();
      case "t":
        return this.#word("true", true);
      case "f":
        return this.#word("false", false);
      case "n":
        return this.#word("null", null);
      case "N":
        return this.#word("NaN", new PyFloat(NaN));
      case "I":
        return this.#word("Infinity", new PyFloat(Infinity));
    }
    if (this.text.startsWith("-Infinity", this.#pos)) {
      return this.#word("-Infinity", new PyFloat(-Infinity));
    }
    NUMBER.lastIndex = this.#pos;
    const match = NUMBER.exec(this.text);
    if (match === null) this.#fail("expecting value");
    this.#pos += match[0].length;
    if (match[1] !== undefined || match[2] !== undefined) return new PyFloat(Number(match[0]));
    const int = BigInt(match[0]);
    const asNumber = Number(int);
    return Number.isSafeInteger(asNumber) ? asNumber : int;
  }

  #string(): string {
    this.#pos++;
    let out = "";
    for (;;) {
      const c = this.text.charAt(this.#pos);
      if (c === "") this.#fail("unterminated string");
      if (c === '"') {
        this.#pos++;
        return out;
      }
      if (c < " ") this.#fail("invalid control character in string");
      if (c !== "\\") {
        out += c;
        this.#pos++;
        continue;
      }
      const e = this.text.charAt(this.#pos + 1);
      if (e === "u") {
        const hex = this.text.slice(this.#pos + 2, this.#pos + 6);
        if (!/^[0-9a-fA-F]{4}$/.test(hex)) this.#fail("invalid \\uXXXX escape");
        // Lone surrogates are kept, as Python keeps them.
        out += String.fromCharCode(parseInt(hex, 16));
        this.#pos += 6;
        continue;
      }
      const escaped = ESCAPES[e];
      if (escaped === undefined) this.#fail("invalid escape");
      out += escaped;
      this.#pos += 2;
    }
  }

  #array(): unknown[] {
    this.#pos++;
    const out: unknown[] = [];
    this.#ws();
    if (this.text.charAt(this.#pos) === "]") {
      this.#pos++;
      return out;
    }
    for (;;) {
      this.#ws();
      out.push(this.#value());
      this.#ws();
      const c = this.text.charAt(this.#pos++);
      if (c === "]") return out;
      if (c !== ",") this.#fail("expecting ',' delimiter");
    }
  }

  #object(): Record<string, unknown> {
    this.#pos++;
    const out: Record<string, unknown> = {};
    this.#ws();
    if (this.text.charAt(this.#pos) === "}") {
      this.#pos++;
      return out;
    }
    for (;;) {
      this.#ws();
      if (this.text.charAt(this.#pos) !== '"') this.#fail("expecting property name");
      const key = this.#string();
      this.#ws();
      if (this.text.charAt(this.#pos++) !== ":") this.#fail("expecting ':' delimiter");
      this.#ws();
      // An own data property even for "__proto__"; a repeated key keeps its last value.
      Object.defineProperty(out, key, {
        value: this.#value(),
        enumerable: true,
        writable: true,
        configurable: true,
      });
      this.#ws();
      const c = this.text.charAt(this.#pos++);
      if (c === "}") return out;
      if (c !== ",") this.#fail("expecting ',' delimiter");
    }
  }
}

/**
 * Parses JSON text as Python's `json.loads` does: ints are numbers (bigints beyond the safe range),
 * floats are {@link PyFloat} (so `1.0` stays a float), `NaN`, `Infinity` and `-Infinity` are
 * accepted, lone `\uDXXX` escapes are kept. Throws {@link CaptureError} `invalid_wire_value` where
 * `json.loads` raises `JSONDecodeError`.
 *
 * @example
 * parsePythonJson('{"x": 1.0}'); // { x: PyFloat { value: 1 } }
 */
export function parsePythonJson(text: string): unknown {
  return new Parser(text).document();
}
