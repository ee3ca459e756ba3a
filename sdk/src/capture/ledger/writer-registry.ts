/**
 * The writer registry of a ledger directory: one empty file per ledger instance that ever
 * changed the directory (`<ledger dir>/writers/w~<boot id>~<host>~<pid namespace>~<pid>~<random>`),
 * so a ledger can tell whether anything but itself may have changed a ledger file it has cached.
 *
 * Why: a commit exports thousands of ledgers, and a row cache that must notice other processes'
 * appends stats every file first (~50 ms at 8,000 rollouts). A ledger that finds no other
 * writer registered exports its cached rows as they are.
 *
 * The rules that make "no other writer" safe:
 * - An instance registers before its first change to the directory and changes nothing until
 *   it has; it never removes its own entry (not even on close): an entry that vanished unseen
 *   could hide that writer's changes.
 * - Only an instance registering removes entries, and only those of processes that are dead:
 *   same boot of the same machine (Linux boot ID) and PID namespace, and `kill(pid, 0)` fails
 *   with ESRCH. It registers itself first, so the set never goes back to "no one else" for a
 *   live instance that saw another writer, and it drops its own cached rows (which that writer
 *   may have changed) before it counts as registered.
 * - An entry it cannot judge (another machine, boot or namespace, no boot ID to compare, a name
 *   it does not know, a live PID, even its own PID: another instance in the same process)
 *   counts as another writer, for good. Such entries are never pruned: a capture directory
 *   shared across machines or container restarts keeps statting, as before the registry.
 * - When no instance can register (`writers` is not a directory), none ever trusts its cache.
 *
 * Entries need no fsync: after a machine crash every process that made them is gone. On a
 * network file system the registry's listing, like a stat, is as fresh as the client's cache.
 *
 * @module
 */
import { randomBytes } from "node:crypto";
import { readdirSync, readFileSync, readlinkSync } from "node:fs";
import { mkdir, readdir, unlink, writeFile } from "node:fs/promises";
import { hostname } from "node:os";
import path from "node:path";
import { isCode } from "../../store/safe-fs.js";

/** The subdirectory of a ledger directory that holds the writer registry. */
export const WRITER_REGISTRY_DIR = "writers";

const SEPARATOR = "~";
/** Every entry name starts with it: nothing an entry's parts hold can hide or mimic one. */
const PREFIX = "w";

/**
 * This process's PID namespace (Linux), so a PID is only judged inside its own namespace.
 *
 * @internal
 */
export function pidNamespace(): string {
  try {
    return readlinkSync("/proc/self/ns/pid").replace(/\D/g, "") || "none";
  } catch {
    return "none";
  }
}

/**
 * This boot of this machine (Linux), "none" elsewhere: entries of other machines are never judged.
 *
 * @internal
 */
export function bootId(): string {
  try {
    return (
      readFileSync("/proc/sys/kernel/random/boot_id", "utf8").replace(/[^0-9a-f]/gi, "") || "none"
    );
  } catch {
    return "none";
  }
}

/** Whether the process with `pid` on this machine is gone. */
function processGone(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return false;
  } catch (error) {
    // EPERM: it exists, owned by someone else.
    return isCode(error, "ESRCH");
  }
}

/**
 * Thrown by {@link WriterRegistry.register} when the registry cannot exist (`writers` is not a
 * directory): no instance can register, so none trusts its cache, and changes may go ahead.
 */
export class RegistryUnavailableError extends Error {
  override readonly name = "RegistryUnavailableError";
}

/** What {@link WriterRegistry.register} found. */
export type Registration = "registered" | "no-ledger-dir";

/** One ledger instance's place in the registry of its directory. */
export class WriterRegistry {
  readonly #dir: string;
  readonly #boot = bootId();
  readonly #host = encodeURIComponent(hostname());
  readonly #namespace = pidNamespace();
  readonly #ownName: string;
  #registering: Promise<Registration> | null = null;
  #done = false;

  /** The registry of ledger directory `ledgerDir` (nothing is written until {@link register}). */
  constructor(ledgerDir: string) {
    this.#dir = path.join(ledgerDir, WRITER_REGISTRY_DIR);
    this.#ownName = [
      PREFIX,
      this.#boot,
      this.#host,
      this.#namespace,
      String(process.pid),
      randomBytes(6).toString("hex"),
    ].join(SEPARATOR);
  }

  /**
   * Registers this instance, once, before its first change to the directory, removing the
   * entries of dead processes; when it removed any, `dropCached` runs before this instance
   * counts as registered (those writers may have changed what it cached). Resolves
   * `"no-ledger-dir"` when the ledger directory does not exist (nothing to change yet; call
   * again before the next change).
   *
   * @throws {@link RegistryUnavailableError} when `writers` is not a directory; any other
   * failure as it is (the caller must not change the directory).
   */
  async register(dropCached: () => void): Promise<Registration> {
    if (this.#done) return "registered";
    const mine = (this.#registering ??= this.#register(dropCached));
    try {
      return await mine;
    } finally {
      // A later call tries again after a failure or a missing directory; a newer attempt
      // already under way is left alone.
      if (this.#registering === mine && !this.#done) this.#registering = null;
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
   * removed from under it, maybe with the ledger files), and so does a registry it cannot list.
   * Synchronous: one directory listing, for a commit about to read thousands of ledgers.
   */
  othersMayWrite(): boolean {
    if (!this.#done) return true;
    try {
      const names = readdirSync(this.#dir);
      return names.length !== 1 || names[0] !== this.#ownName;
    } catch {
      return true;
    }
  }

  async #register(dropCached: () => void): Promise<Registration> {
    for (let attempt = 1; ; attempt++) {
      try {
        await mkdir(this.#dir);
      } catch (error) {
        if (isCode(error, "ENOENT")) return "no-ledger-dir";
        if (!isCode(error, "EEXIST")) throw error;
      }
      try {
        // Own entry first: from now on nobody else sees the registry without this instance.
        await writeFile(path.join(this.#dir, this.#ownName), "", { flag: "wx" });
        break;
      } catch (error) {
        // A retry after a failure further on: the entry is there already.
        if (isCode(error, "EEXIST")) break;
        if (isCode(error, "ENOTDIR")) {
          throw new RegistryUnavailableError(`${this.#dir} is not a directory`, { cause: error });
        }
        // The registry was removed between the two calls: make it again.
        if (!isCode(error, "ENOENT") || attempt >= 3) throw error;
      }
    }
    let removed = false;
    for (const name of await readdir(this.#dir)) {
      if (name === this.#ownName || !this.#isDead(name)) continue;
      try {
        await unlink(path.join(this.#dir, name));
      } catch (error) {
        // Another registering instance removed it first: it was dead all the same.
        if (!isCode(error, "ENOENT")) throw error;
      }
      removed = true;
    }
    // Synchronously, with the cache dropped first: no export in between trusts rows cached
    // while the removed writers were alive.
    if (removed) dropCached();
    this.#done = true;
    return "registered";
  }

  /** Whether entry `name` is of a process of this boot, machine and PID namespace that is gone. */
  #isDead(name: string): boolean {
    const [prefix, boot, host, namespace, pid, random, ...rest] = name.split(SEPARATOR);
    if (prefix !== PREFIX || rest.length > 0 || random === undefined) return false;
    if (this.#boot === "none" || boot !== this.#boot || host !== this.#host) return false;
    if (namespace !== this.#namespace || !/^[1-9]\d{0,9}$/.test(pid ?? "")) return false;
    return processGone(Number(pid));
  }
}
