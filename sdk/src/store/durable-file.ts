import { randomBytes } from "node:crypto";
import { open, rename, unlink } from "node:fs/promises";
import path from "node:path";
import { fsyncDir } from "./fs-sync.js";

/**
 * Writes `file` so that after a crash it holds either its previous content or all of `data`,
 * never a part: a temporary file beside it is written and fsynced, renamed over `file`, and the
 * directory fsynced so the rename itself survives a host crash.
 */
export async function writeFileDurably(file: string, data: string | Uint8Array): Promise<void> {
  const dir = path.dirname(file);
  const temporary = path.join(
    dir,
    `.${path.basename(file)}.${process.pid}.${randomBytes(4).toString("hex")}.tmp`,
  );
  const handle = await open(temporary, "wx", 0o644);
  try {
    await handle.writeFile(data);
    await handle.sync();
  } catch (error) {
    await handle.close();
    await unlink(temporary).catch(() => undefined);
    throw error;
  }
  await handle.close();
  try {
    await rename(temporary, file);
  } catch (error) {
    await unlink(temporary).catch(() => undefined);
    throw error;
  }
  await fsyncDir(dir);
}
