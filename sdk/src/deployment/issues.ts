/**
 * Schema issues as deployment problems: each zod issue of {@link DeploymentFileSchema} turned
 * into a line of the file and what to do there.
 */
import type { Document, LineCounter } from "yaml";
import type { z } from "zod";
import { DeploymentFileSchema, DeploymentServerSchema, SERVER_KINDS } from "../wire/deployment.js";
import { CheckpointSettingsSchema } from "../wire/settings.js";
import { didYouMean } from "../util/did-you-mean.js";
import type { DeploymentProblem } from "./errors.js";
import { locate, pathText, valueAt } from "./positions.js";

const ROOT_KEYS = Object.keys(DeploymentFileSchema.shape);
const SERVER_KEYS = Object.keys(DeploymentServerSchema.shape);
const CHECKPOINT_KEYS = Object.keys(CheckpointSettingsSchema.shape);

function allowedKeys(segments: readonly PropertyKey[]): readonly string[] | null {
  if (segments.length === 0) return ROOT_KEYS;
  if (segments.length === 1 && segments[0] === "checkpoint") return CHECKPOINT_KEYS;
  if (segments.length === 2 && segments[0] === "servers") return SERVER_KEYS;
  return null;
}

function describeWhere(segments: readonly PropertyKey[]): string {
  if (segments.length === 0) return "at the top level";
  if (segments.length === 2 && segments[0] === "servers") return `in server ${String(segments[1])}`;
  return `in ${pathText(segments)}`;
}

/** The document an issue is placed in, and what expansion did to it. */
export interface IssueContext {
  readonly doc: Document;
  readonly lines: LineCounter;
  readonly data: unknown;
  readonly expandedNodes: ReadonlySet<unknown>;
  /** Nodes whose expansion failed: already reported, so their schema issues are not. */
  readonly failedNodes: ReadonlySet<unknown>;
}

/** The problems one schema issue stands for (none when its node was reported already). */
export function issueProblems(issue: z.core.$ZodIssue, context: IssueContext): DeploymentProblem[] {
  const segments = issue.path;
  if (context.failedNodes.has(locate(context.doc, context.lines, segments).node)) return [];
  const at = (where: readonly PropertyKey[]): number =>
    locate(context.doc, context.lines, where).line;

  if (issue.code === "unrecognized_keys") {
    const allowed = allowedKeys(segments);
    return issue.keys.map((key) => ({
      line: at([...segments, key]),
      path: pathText([...segments, key]),
      message:
        `unknown key '${key}' ${describeWhere(segments)}` +
        (allowed === null ? "" : didYouMean(key, allowed)) +
        ": remove it or fix its spelling" +
        (allowed === null ? "" : ` (allowed: ${allowed.join(", ")})`),
    }));
  }

  if (issue.code === "invalid_key" && segments[0] === "servers") {
    const name = String(segments[1]);
    return [
      {
        line: at(segments),
        path: pathText(segments),
        message: `bad server name '${name}': a name holds only letters, digits, _ and -; rename it`,
      },
    ];
  }

  const { present, value } = valueAt(context.data, segments);
  const line = at(segments);
  const where = pathText(segments);
  const last = segments[segments.length - 1];

  if (where === "checkpoint.control_auth_token" && issue.code === "custom") {
    return [
      {
        line,
        path: where,
        message:
          "checkpoint.control_auth_token is required and not blank (empty or whitespace only) " +
          "when checkpoint.enabled is true: set it (e.g. control_auth_token: ${GYM_CONTROL_TOKEN}) " +
          "or set enabled: false",
      },
    ];
  }

  if (!present && segments.length > 0) {
    const parent = pathText(segments.slice(0, -1)) || "the file";
    const choices =
      last === "kind" && segments[0] === "servers" ? ` (one of ${SERVER_KINDS.join(", ")})` : "";
    return [{ line, path: where, message: `${parent} has no ${String(last)}: add it${choices}` }];
  }

  if (segments[0] === "servers" && segments.length === 3 && last === "kind") {
    return [
      {
        line,
        path: where,
        message:
          `bad kind ${JSON.stringify(value)} for server ${String(segments[1])}` +
          (typeof value === "string" ? didYouMean(value, SERVER_KINDS) : "") +
          `: use one of ${SERVER_KINDS.join(", ")}`,
      },
    ];
  }

  const node = locate(context.doc, context.lines, segments).node;
  const quoteHint =
    context.expandedNodes.has(node) && issue.code === "invalid_type" && issue.expected === "string"
      ? ` (the value comes from a \${...} reference: quote it to keep it a string, e.g. "\${VAR}")`
      : "";
  return [
    {
      line,
      path: where,
      message: `${where === "" ? "the file" : where}: ${issue.message}${quoteHint}`,
    },
  ];
}
