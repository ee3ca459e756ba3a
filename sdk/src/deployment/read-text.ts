/**
 * Reading a deployment file's text, with a missing or unreadable file reported the way every
 * other problem of the file is: a {@link DeploymentFileError} naming the file and what to do.
 *
 * @module
 */
import { readFileSync } from "node:fs";
import { DeploymentFileError } from "./errors.js";

/** The text of `absolute` (shown as `file`); a missing file says to check the path. */
export function readDeploymentText(file: string, absolute: string): string {
  try {
    return readFileSync(absolute, "utf8");
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    throw new DeploymentFileError(file, [
      {
        line: null,
        path: "",
        message:
          code === "ENOENT"
            ? "no such file: check the path"
            : `cannot read it: ${(error as Error).message}`,
      },
    ]);
  }
}
