/**
 * `${VAR}` and `${VAR:-default}` expansion in a deployment file's values (never in its keys).
 */
import { parse as parseYaml, visit, type Document, type LineCounter, type Scalar } from "yaml";
import type { DeploymentProblem } from "./errors.js";
import { startOf } from "./positions.js";

const REFERENCE = /\$\$|\$\{([^}]*)\}/g;
const VARIABLE = /^([A-Za-z_][A-Za-z0-9_]*)(?::-(.*))?$/s;

/** The outcome of {@link expandVariables}. */
export interface Expansion {
  readonly value: string;
  /** Whether any `${...}` was replaced. */
  readonly expanded: boolean;
  /** What could not be expanded, with what to do. */
  readonly problems: readonly string[];
}

/**
 * Expands `${VAR}` (must be set) and `${VAR:-default}` (the default when VAR is unset or
 * empty); `$$` is a literal `$`.
 */
export function expandVariables(text: string, env: NodeJS.ProcessEnv): Expansion {
  const problems: string[] = [];
  let expanded = false;
  const value = text.replace(REFERENCE, (whole, inner: string | undefined) => {
    if (whole === "$$") return "$";
    expanded = true;
    const match = VARIABLE.exec(inner ?? "");
    if (match === null) {
      problems.push(
        `${whole} is not a variable reference: write \${NAME} or \${NAME:-default} (NAME: letters, digits, _), or $$ for a literal $`,
      );
      return "";
    }
    const [, name = "", fallback] = match;
    const set = env[name];
    if (fallback !== undefined) return set === undefined || set === "" ? fallback : set;
    if (set === undefined) {
      problems.push(
        `\${${name}} is not set: export ${name}, or give a default: \${${name}:-value}`,
      );
      return "";
    }
    return set;
  });
  return { value, expanded, problems };
}

/** What {@link expandDocument} did, for the checks that follow it. */
export interface DocumentExpansion {
  /** References that could not be expanded, in document order. */
  readonly problems: readonly DeploymentProblem[];
  /** Scalars whose value came from a reference: a type error there gets a quoting hint. */
  readonly expandedNodes: ReadonlySet<unknown>;
  /** Scalars whose expansion failed: already reported, so their schema issues are not. */
  readonly failedNodes: ReadonlySet<unknown>;
}

/**
 * Expands every value of `doc` in place. A plain scalar is re-read as YAML, so
 * `port: ${PORT:-0}` is a number and a quoted one stays a string.
 */
export function expandDocument(
  doc: Document,
  lines: LineCounter,
  env: NodeJS.ProcessEnv,
): DocumentExpansion {
  const problems: DeploymentProblem[] = [];
  const expandedNodes = new Set<unknown>();
  const failedNodes = new Set<unknown>();
  visit(doc, {
    Scalar(key, node: Scalar) {
      if (key === "key" || typeof node.value !== "string" || !node.value.includes("$")) return;
      const expansion = expandVariables(node.value, env);
      const line = lines.linePos(startOf(node) ?? 0).line;
      for (const message of expansion.problems) problems.push({ line, path: "", message });
      if (expansion.problems.length > 0) {
        // Keep the reference as written: it is reported once, not again by the schema.
        failedNodes.add(node);
        return;
      }
      if (!expansion.expanded && expansion.value === node.value) return;
      expandedNodes.add(node);
      if (node.type === "PLAIN" || node.type === undefined) {
        let reread: unknown;
        try {
          reread = parseYaml(expansion.value);
        } catch {
          reread = expansion.value;
        }
        node.value =
          reread === null || ["string", "number", "boolean"].includes(typeof reread)
            ? reread
            : expansion.value;
      } else {
        node.value = expansion.value;
      }
    },
  });
  return { problems, expandedNodes, failedNodes };
}
