/**
 * What waits unread at a local TCP port, and which process sent it (Linux `/proc` only): the
 * crash suites stop a server (SIGSTOP) and need to know that the request they are waiting for,
 * not some other traffic, has reached it.
 */
import { readFileSync, readdirSync, readlinkSync } from "node:fs";

/** Data queued in one connection of a listening port. */
export interface WaitingConnection {
  /** Bytes received and not yet read by the server. */
  readonly bytes: number;
  /** The sender's port (the client end of the connection). */
  readonly peerPort: number;
  /** The process holding the client end, or null when none was found (it may have gone). */
  readonly senderPid: number | null;
}

/** The `st` of a listening socket in /proc/net/tcp. */
const LISTEN_STATE = "0A";

interface SocketLine {
  readonly localPort: number;
  readonly remotePort: number;
  readonly state: string;
  readonly receiveQueue: number;
  readonly inode: string;
}

function portOf(address: string): number {
  return Number.parseInt(address.split(":").at(-1) ?? "", 16);
}

function socketLines(): SocketLine[] {
  const lines: SocketLine[] = [];
  for (const table of ["/proc/net/tcp", "/proc/net/tcp6"]) {
    let text: string;
    try {
      text = readFileSync(table, "utf8");
    } catch {
      continue;
    }
    for (const line of text.split("\n").slice(1)) {
      const fields = line.trim().split(/\s+/);
      const [, local, remote, state, queues, , , , , inode] = fields;
      if (local === undefined || remote === undefined || queues === undefined) continue;
      lines.push({
        localPort: portOf(local),
        remotePort: portOf(remote),
        state: state ?? "",
        receiveQueue: Number.parseInt(queues.split(":")[1] ?? "0", 16),
        inode: inode ?? "",
      });
    }
  }
  return lines;
}

/** Socket inode → the process holding it, over every process this user may read. */
function socketOwners(inodes: ReadonlySet<string>): Map<string, number> {
  const owners = new Map<string, number>();
  if (inodes.size === 0) return owners;
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    let fds: string[];
    try {
      fds = readdirSync(`/proc/${entry}/fd`);
    } catch {
      continue;
    }
    for (const fd of fds) {
      let target: string;
      try {
        target = readlinkSync(`/proc/${entry}/fd/${fd}`);
      } catch {
        continue;
      }
      const inode = /^socket:\[(\d+)\]$/.exec(target)?.[1];
      if (inode !== undefined && inodes.has(inode)) owners.set(inode, Number(entry));
    }
  }
  return owners;
}

/**
 * The connections of `port` with data waiting (not its listening socket: a connection waiting to
 * be accepted has its own line once data arrives on it), each with the process that sent it.
 */
export function waitingConnections(port: number): WaitingConnection[] {
  const lines = socketLines();
  const waiting = lines.filter(
    (line) => line.localPort === port && line.state !== LISTEN_STATE && line.receiveQueue > 0,
  );
  if (waiting.length === 0) return [];
  const clientEnds = new Map<number, string>();
  for (const line of lines) {
    if (waiting.some((w) => w.remotePort === line.localPort && line.remotePort === port)) {
      clientEnds.set(line.localPort, line.inode);
    }
  }
  const owners = socketOwners(new Set(clientEnds.values()));
  return waiting.map((line) => {
    const inode = clientEnds.get(line.remotePort);
    return {
      bytes: line.receiveQueue,
      peerPort: line.remotePort,
      senderPid: inode === undefined ? null : (owners.get(inode) ?? null),
    };
  });
}

/** A process's group (field 5 of /proc/<pid>/stat), or null when it has gone. */
export function processGroupOf(pid: number): number | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    // The command name (field 2) may hold spaces: read after its closing parenthesis.
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return Number(fields[2]);
  } catch {
    return null;
  }
}

/** A process's command line, for messages. */
export function commandOf(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0").join(" ").trim().slice(0, 160);
  } catch {
    return "(gone)";
  }
}
