import { randomBytes } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";

/**
 * What every handle started from one {@link startTestServer} call shares: the control token,
 * the checkpoint-ID sequence and the temporary checkpoint directories, removed when the last
 * open handle closes.
 */
export class TestEnvironment {
  /** The bearer token of every control call of this environment (random per environment). */
  readonly token = `test-kit-${randomBytes(16).toString("hex")}`;
  #nextId = 0;
  #open = 0;
  readonly #dirs: string[] = [];

  /** A checkpoint ID never used before in this environment. */
  nextCheckpointId(): string {
    this.#nextId += 1;
    return `test-ckpt-${this.#nextId}`;
  }

  /** A fresh, empty checkpoint directory, removed with the environment. */
  async tempDir(): Promise<string> {
    const dir = await mkdtemp(path.join(tmpdir(), "gym-test-kit-"));
    this.#dirs.push(dir);
    return dir;
  }

  /** Counts a handle as open. */
  opened(): void {
    this.#open += 1;
  }

  /** Counts a handle as closed; the last one removes the directories. */
  async closed(): Promise<void> {
    this.#open -= 1;
    if (this.#open > 0) return;
    for (const dir of this.#dirs.splice(0)) await rm(dir, { recursive: true, force: true });
  }
}
