/**
 * How loading a deployment file fails: every problem found, each with its place in the file.
 * The wording is the library's; a caller (the `gym` command) adds its own advice.
 *
 * @see docs/deployment.md
 */

/** One thing wrong with a deployment file. */
export interface DeploymentProblem {
  /** 1-based line in the file, or null when the problem has no place (an unreadable file). */
  readonly line: number | null;
  /** Where in the document, e.g. `servers.counter.kind`; `""` for the whole file. */
  readonly path: string;
  /** What is wrong and what to do about it. */
  readonly message: string;
}

/** A deployment file that cannot be used; `problems` lists each with its line. */
export class DeploymentFileError extends Error {
  override readonly name = "DeploymentFileError";
  constructor(
    readonly file: string,
    readonly problems: readonly DeploymentProblem[],
  ) {
    // In file order; a stable sort keeps problems on one line in the order they were found.
    const sorted = [...problems].sort((a, b) => (a.line ?? 0) - (b.line ?? 0));
    const lines = sorted.map(
      (problem) =>
        `  ${file}${problem.line === null ? "" : `:${problem.line}`}: ${problem.message}`,
    );
    super(
      `${file}: ${problems.length} problem${problems.length === 1 ? "" : "s"}; nothing was started\n${lines.join("\n")}`,
    );
  }
}
