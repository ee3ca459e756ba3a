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
