/**
 * Deployment files written for a test, and the problems loading one reports: each file in a
 * fresh directory of `root` beside a server module `srv.ts` it can name as `./srv.ts`.
 */
import { mkdirSync, writeFileSync } from "node:fs";
import path from "node:path";
import { expect } from "vitest";
import {
  DeploymentFileError,
  loadDeploymentFile,
  type DeploymentProblem,
} from "#sdk/deployment/index.js";

let files = 0;

/** Writes `text` as `name` in a fresh directory of `root` holding a server module `srv.ts`. */
export function writeDeploymentFile(root: string, text: string, name = "deployment.yaml"): string {
  const dir = path.join(root, `case-${++files}`);
  mkdirSync(dir, { recursive: true });
  writeFileSync(path.join(dir, "srv.ts"), "export default class {}\n");
  const file = path.join(dir, name);
  writeFileSync(file, text);
  return file;
}

/** Every problem loading `file` reports; fails the test when it loads. */
export function problemsOf(file: string, env: NodeJS.ProcessEnv = {}): DeploymentProblem[] {
  try {
    loadDeploymentFile(file, { env });
  } catch (error) {
    expect(error).toBeInstanceOf(DeploymentFileError);
    return [...(error as DeploymentFileError).problems];
  }
  throw new Error(`${file} loaded without problems`);
}
