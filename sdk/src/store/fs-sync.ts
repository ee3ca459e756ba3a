import { constants } from "node:fs";
import { open } from "node:fs/promises";

/**
 * fsyncs a directory so the entries created in it survive a crash. Opened with `O_DIRECTORY`:
 * anything else at that path (a FIFO would block the open until some writer came) fails at
 * once with ENOTDIR.
 */
export async function fsyncDir(dir: string): Promise<void> {
  const handle = await open(dir, constants.O_RDONLY | constants.O_DIRECTORY);
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}
