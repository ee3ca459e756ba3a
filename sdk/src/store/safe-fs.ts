/**
 * File system access of the store that cannot hang: directories are created one level at a
 * time (never on a pseudo file system), and a file is read only once it is known to be a regular
 * file, so a FIFO, socket, directory or device where a manifest or records file belongs is a
 * prompt `invalid_checkpoint_state` naming it rather than a read that never ends.
 */
import {
  constants,
  closeSync,
  fstatSync,
  openSync,
  readFileSync,
  statSync,
  type Stats,
} from "node:fs";
import { mkdir, open, realpath, stat, statfs, type FileHandle } from "node:fs/promises";
import path from "node:path";
import { CheckpointStateError } from "../errors.js";

/**
 * Opens for reading without blocking: a FIFO that slipped in between the check and the open
 * would otherwise wait for a writer, and a terminal would become the controlling one.
 */
const READ_FLAGS = constants.O_RDONLY | constants.O_NONBLOCK | constants.O_NOCTTY;

/** Trees that hold no checkpoint: the kernel's views, where `mkdir` fails in odd ways. */
const PSEUDO_ROOTS = ["/proc", "/sys", "/dev"] as const;
/** Under `/dev`, shared memory is an ordinary tmpfs that can hold a checkpoint. */
const PSEUDO_ROOT_EXCEPTIONS = ["/dev/shm"] as const;

/** `statfs` magic numbers of file systems that cannot hold files (linux/magic.h). */
const PSEUDO_FS_TYPES = new Map<number, string>([
  [0x9fa0, "proc"],
  [0x62656572, "sysfs"],
  [0x1cd1, "devpts"],
  [0x27e0eb, "cgroup"],
  [0x63677270, "cgroup2"],
  [0x64626720, "debugfs"],
  [0x74726163, "tracefs"],
  [0x73636673, "securityfs"],
  [0xcafe4a11, "bpf"],
  [0x6165676c, "pstore"],
  [0x62656570, "configfs"],
  [0x65735543, "fusectl"],
  [0xf97cff8c, "selinuxfs"],
  [0x6e736673, "nsfs"],
]);

/** What a file that is not a regular file is, for a refusal. */
function typeOf(stats: Stats): string {
  if (stats.isFile()) return "a regular file";
  if (stats.isDirectory()) return "a directory";
  if (stats.isFIFO()) return "a FIFO";
  if (stats.isSocket()) return "a socket";
  if (stats.isCharacterDevice()) return "a character device";
  if (stats.isBlockDevice()) return "a block device";
  return "an unknown kind of file";
}

/** The refusal of a checkpoint file that is not a regular file. */
export function notRegularFile(file: string, stats: Stats): CheckpointStateError {
  return new CheckpointStateError(
    `cannot read checkpoint state ${file}: it is ${typeOf(stats)}, not a regular file ` +
      "(a checkpoint holds only regular files); remove it, or use another checkpoint directory",
  );
}

/** Whether `error` is a system error with one of `codes` (`ENOENT`, `EEXIST`...). */
export function isCode(error: unknown, ...codes: string[]): boolean {
  return codes.includes((error as NodeJS.ErrnoException | null)?.code ?? "");
}

/**
 * Opens `file` for reading once `stat` says it is a regular file, and checks the open file
 * again (it may have been replaced meanwhile). Throws `invalid_checkpoint_state` naming the file
 * when it is anything else; `stat`/`open` errors (ENOENT, EACCES, ...) are thrown as they are.
 */
export async function openRegularFile(file: string): Promise<FileHandle> {
  const before = await stat(file);
  if (!before.isFile()) throw notRegularFile(file, before);
  const handle = await open(file, READ_FLAGS);
  try {
    const opened = await handle.stat();
    if (!opened.isFile()) throw notRegularFile(file, opened);
  } catch (error) {
    await handle.close().catch(() => undefined);
    throw error;
  }
  return handle;
}

/** The text of regular file `file` (see {@link openRegularFile}). */
export async function readRegularFile(file: string): Promise<string> {
  const handle = await openRegularFile(file);
  try {
    return await handle.readFile("utf8");
  } finally {
    await handle.close().catch(() => undefined);
  }
}

/**
 * The text of regular file `file`, synchronously; null when it does not exist. Anything but a
 * regular file is refused before it is opened (a synchronous read of a FIFO would stop the
 * whole event loop until some writer came).
 */
export function readRegularFileSync(file: string): string | null {
  let before: Stats;
  try {
    before = statSync(file);
  } catch (error) {
    if (isCode(error, "ENOENT", "ENOTDIR")) return null;
    throw error;
  }
  if (!before.isFile()) throw notRegularFile(file, before);
  const fd = openSync(file, READ_FLAGS);
  try {
    const opened = fstatSync(fd);
    if (!opened.isFile()) throw notRegularFile(file, opened);
    return readFileSync(fd, "utf8");
  } finally {
    closeSync(fd);
  }
}

function isUnder(file: string, root: string): boolean {
  return file === root || file.startsWith(root + path.sep);
}

/** The pseudo-file-system tree `file` lies in, or null. */
function pseudoRootOf(file: string): string | null {
  if (PSEUDO_ROOT_EXCEPTIONS.some((root) => isUnder(file, root))) return null;
  return PSEUDO_ROOTS.find((root) => isUnder(file, root)) ?? null;
}

function pseudoFileSystem(dir: string, where: string): CheckpointStateError {
  return new CheckpointStateError(
    `cannot write checkpoint state under ${dir}: it lies on ${where}, a kernel pseudo file ` +
      "system that holds no files; choose a checkpoint_dir on a disk",
  );
}

/**
 * Refuses, synchronously and by its path alone, a `dir` under `/proc`, `/sys` or `/dev` (but
 * `/dev/shm`). {@link makeDirectories} checks where the path really leads as well.
 */
export function refusePseudoPath(dir: string): void {
  const named = pseudoRootOf(path.resolve(dir));
  if (named !== null) throw pseudoFileSystem(dir, named);
}

/**
 * Refuses a directory on a pseudo file system (`/proc`, `/sys`, `/dev` but `/dev/shm`, or any
 * mount of one such as a cgroup tree), by the resolved path of `existing` and its `statfs`.
 */
async function refusePseudoFileSystem(dir: string, existing: string): Promise<void> {
  refusePseudoPath(dir);
  const real = await realpath(existing);
  const resolved = pseudoRootOf(real);
  if (resolved !== null) throw pseudoFileSystem(dir, `${resolved} (through ${existing})`);
  let type: number;
  try {
    type = (await statfs(real)).type;
  } catch {
    return; // No statfs here: the path checks above are all we can do.
  }
  const name = PSEUDO_FS_TYPES.get(type);
  if (name !== undefined) throw pseudoFileSystem(dir, `a ${name} mount (${real})`);
}

function notDirectory(dir: string, file: string, stats: Stats): CheckpointStateError {
  return new CheckpointStateError(
    `cannot write checkpoint state under ${dir}: ${file} is ${typeOf(stats)}, not a directory`,
  );
}

/**
 * Creates `dir` and its missing parents, one level at a time, each tried once.
 *
 * Why not `mkdir(dir, { recursive: true })`: on a pseudo file system (`/proc/self/...`) Node's
 * recursive mkdir meets ENOENT below a parent that exists and retries forever, spinning a core
 * after the commit was answered. Here the deepest existing ancestor is found first (a bounded
 * walk up), refused when it lies on a pseudo file system, and every missing level is created
 * exactly once: the work is bounded by the depth of `dir`.
 *
 * Throws `invalid_checkpoint_state` for a pseudo file system or a component that is not a
 * directory; other `mkdir`/`stat` errors as they are.
 */
export async function makeDirectories(dir: string): Promise<void> {
  const target = path.resolve(dir);
  const missing: string[] = [];
  let existing = target;
  let found: Stats;
  for (;;) {
    try {
      found = await stat(existing);
      break;
    } catch (error) {
      const parent = path.dirname(existing);
      // ENOTDIR: some ancestor is not a directory; walking up finds and names it.
      if (!isCode(error, "ENOENT", "ENOTDIR") || parent === existing) throw error;
      missing.push(existing);
      existing = parent;
    }
  }
  if (!found.isDirectory()) throw notDirectory(dir, existing, found);
  await refusePseudoFileSystem(dir, existing);
  for (const level of missing.reverse()) {
    try {
      await mkdir(level);
    } catch (error) {
      if (!isCode(error, "EEXIST")) throw error;
      // Created meanwhile (a racing commit), or something else is there.
      const there = await stat(level);
      if (!there.isDirectory()) throw notDirectory(dir, level, there);
    }
  }
}
