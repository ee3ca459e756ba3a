/**
 * The writer registry of a ledger directory: one empty file per ledger instance that ever
 * changed the directory (`<ledger dir>/writers/<host>~<pid namespace>~<pid>~<random>`), so a
 * ledger can tell whether anything but itself may have changed a ledger file it has cached.
 *
 * Why: a commit exports thousands of ledgers, and a row cache that must notice other processes'
 * appends stats every file first (~50 ms at 8,000 rollouts). A ledger that finds no other
 * writer registered exports its cached rows as they are.
 *
 * The rules that make "no other writer" safe:
 * - An instance registers before its first change to the directory, and never removes its own
 *   entry (not even on close): an entry that vanished unseen could hide that writer's changes.
 * - Only an instance registering removes entries, and only those of processes that are dead
 *   (same host and PID namespace, `kill(pid, 0)` fails with ESRCH); it registers itself first,
 *   so the set never goes back to "no one else" for a live instance that saw another writer.
 *   When it removes any, it drops its own cached rows, which that writer may have changed.
 * - An entry it cannot judge (another host or namespace, a name it does not know, a live PID,
 *   even its own PID: another instance in the same process) counts as another writer.
 *
 * Entries need no fsync: after a machine crash every process that made them is gone.
 *
 * @module
 */
import { randomBytes } from "node:crypto";
import { readdirSync, readlinkSync } from "node:fs";
import { mkdir, readdir, unlink, writeFile } from "node:fs/promises";
import { hostname } from "node:os";
import path from "node:path";

/** The subdirectory of a ledger directory that holds the writer registry. */
export const WRITER_REGISTRY_DIR = "writers";

const SEPARATOR = "~";

function isCode(error: unknown, code: string): boolean {
  return (error as NodeJS.ErrnoException).code === code;
}

/** This process's PID namespace (Linux), so a PID is only judged inside its own namespace. */
function pidNamespace(): string {
  try {
    return readlinkSync("/proc/self/ns/pid").replace(/\D/g, "") || "none";
  } catch {
    return "none";
  }
}

/** Whether the process with `pid` on this host is gone. */
function processGone(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return false;
  } catch (error) {
    // EPERM: it exists, owned by someone else.
    return isCode(error, "ESRCH");
  }
}

/** One ledger instance's place in the registry of its directory. */
export class WriterRegistry {
  readonly #dir: string;
  readonly #host = encodeURIComponent(hostname());
  readonly #namespace = pidNamespace();
  readonly #ownName: string;
  #registered: Promise<boolean> | null = null;
  #done = false;

  /** The registry of ledger directory `ledgerDir` (nothing is written until {@link register}). */
  constructor(ledgerDir: string) {
    this.#dir = path.join(ledgerDir, WRITER_REGISTRY_DIR);
    this.#ownName = [
      this.#host,
      this.#namespace,
      String(process.pid),
      randomBytes(6).toString("hex"),
    ].join(SEPARATOR);
  }

  /**
   * Registers this instance once, before its first change to the directory (the ledger
   * directory must exist), removing the entries of dead processes. Resolves to whether any
   * entry was removed: the caller then drops what it cached, which those writers may have changed.
   */
  async register(): Promise<boolean> {
    this.#registered ??= this.#register();
    try {
      const removed = await this.#registered;
      this.#done = true;
      return removed;
    } catch (error) {
      this.#registered = null;
      throw error;
    }
  }

  /** Whether this instance has registered: changes need no {@link register} call any more. */
  get registered(): boolean {
    return this.#done;
  }

  /**
   * Whether this instance's cached view of the directory may be stale: true unless the registry
   * lists exactly this instance, registered. Any other entry, alive or not, counts (only a
   * registering instance removes dead ones); so does a missing own entry (the registry was
   * removed from under it, maybe with the ledger files). Synchronous: one directory listing,
   * for a commit about to read thousands of ledgers.
   */
  othersMayWrite(): boolean {
    if (!this.#done) return true;
    let names: string[];
    try {
      names = readdirSync(this.#dir);
    } catch (error) {
      if (isCode(error, "ENOENT")) return true;
      throw error;
    }
    const visible = names.filter((name) => !name.startsWith("."));
    return visible.length !== 1 || visible[0] !== this.#ownName;
  }

  async #register(): Promise<boolean> {
    try {
      await mkdir(this.#dir);
    } catch (error) {
      if (!isCode(error, "EEXIST")) throw error;
    }
    // Own entry first: from now on nobody else sees the registry without this instance in it.
    await writeFile(path.join(this.#dir, this.#ownName), "", { flag: "wx" });
    let removed = false;
    for (const name of await readdir(this.#dir)) {
      if (name === this.#ownName || !this.#isDead(name)) continue;
      try {
        await unlink(path.join(this.#dir, name));
        removed = true;
      } catch (error) {
        // Another registering instance removed it first: it was dead all the same.
        if (!isCode(error, "ENOENT")) throw error;
        removed = true;
      }
    }
    return removed;
  }

  /** Whether entry `name` is of a process of this host and PID namespace that is gone. */
  #isDead(name: string): boolean {
    const [host, namespace, pid, random, ...rest] = name.split(SEPARATOR);
    if (rest.length > 0 || random === undefined || host !== this.#host) return false;
    if (namespace !== this.#namespace || !/^[1-9]\d{0,9}$/.test(pid ?? "")) return false;
    return processGone(Number(pid));
  }
}
