import { closeSync, fsyncSync, openSync } from "node:fs";
import { open } from "node:fs/promises";

/** fsyncs a directory so the entries created in it survive a crash. */
export async function fsyncDir(dir: string): Promise<void> {
  const handle = await open(dir, "r");
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}

/** {@link fsyncDir}, synchronously (for work that runs inside one turn of the event loop). */
export function fsyncDirSync(dir: string): void {
  const fd = openSync(dir, "r");
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}
