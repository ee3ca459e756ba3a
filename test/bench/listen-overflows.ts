/**
 * The machine's count of connections dropped because a listening socket's accept queue was full
 * (`TcpExt: ListenOverflows` in `/proc/net/netstat`; Linux only). A burst of thousands of
 * connections to one server can overflow its queue (the kernel caps it at
 * `net.core.somaxconn`); each dropped connection waits for the client's retransmission, which
 * backs off to seconds. The scale bench prints the difference over a run.
 */
import { readFileSync } from "node:fs";

/** The counter now, or null where it cannot be read. */
export function listenOverflows(): number | null {
  let text: string;
  try {
    text = readFileSync("/proc/net/netstat", "utf8");
  } catch {
    return null;
  }
  const lines = text.split("\n").filter((line) => line.startsWith("TcpExt:"));
  const names = lines[0]?.split(/\s+/) ?? [];
  const values = lines[1]?.split(/\s+/) ?? [];
  const at = names.indexOf("ListenOverflows");
  const value = at === -1 ? NaN : Number(values[at]);
  return Number.isFinite(value) ? value : null;
}
