/**
 * The processes of the servers of a run: the pid `gym serve` started each as, and every process
 * below it (a multi-worker server's workers), read from Linux's `/proc`.
 */
import { readdirSync, readFileSync } from "node:fs";

/** Every process's parent. */
function parents(): Map<number, number> {
  const parentOf = new Map<number, number>();
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, "utf8");
      // The command name (field 2) may hold spaces: the fields after its `)` are fixed.
      const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      parentOf.set(Number(entry), Number(fields[1]));
    } catch {
      // gone meanwhile
    }
  }
  return parentOf;
}

/** `root` and every process below it. */
function processTree(root: number, parentOf: ReadonlyMap<number, number>): number[] {
  const tree = [root];
  for (let i = 0; i < tree.length; i++) {
    for (const [pid, parent] of parentOf) if (parent === tree[i]) tree.push(pid);
  }
  return tree;
}

/** Each server's processes: the pid `gym serve` started it as, and every process below it. */
export function serverProcesses(servers: ReadonlyMap<string, number>): Map<string, number[]> {
  const parentOf = parents();
  return new Map([...servers].map(([name, root]) => [name, processTree(root, parentOf)]));
}
