/**
 * Whether a bind address keeps traffic on this machine: plain HTTP is safe there, and only
 * there.
 */
import { BlockList, isIP } from "node:net";

const LOOPBACK = new BlockList();
LOOPBACK.addSubnet("127.0.0.0", 8, "ipv4");
LOOPBACK.addAddress("::1", "ipv6");

/**
 * Whether `host` is a loopback address: `127.0.0.0/8`, `::1` (also written out in full, or
 * bracketed) or an IPv4-mapped `::ffff:127.x.y.z`, or the name `localhost` (and names under
 * `.localhost`, which resolvers keep on loopback). Wildcards (`0.0.0.0`, `::`) and every other
 * name are not.
 */
export function isLoopbackHost(host: string): boolean {
  const bare = host
    .trim()
    .toLowerCase()
    .replace(/^\[(.*)\]$/, "$1");
  if (bare === "localhost" || bare.endsWith(".localhost")) return true;
  const family = isIP(bare);
  if (family === 4) return LOOPBACK.check(bare, "ipv4");
  if (family === 6) return LOOPBACK.check(bare, "ipv6");
  return false;
}
