/**
 * Certificates made for a test, never checked in: a CA, a server certificate signed by it for
 * `127.0.0.1` and `localhost`, a client certificate signed by it, and a second CA nothing is
 * signed by (for "trusts the wrong CA"). Made with the `openssl` CLI in a temporary directory,
 * on EC P-256 keys so the whole set takes a few tens of milliseconds.
 */
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";

/** Paths of the PEM files of a {@link makeTestCertificates} set. */
export interface TestCertificates {
  readonly dir: string;
  readonly caCert: string;
  /** Signed by the CA; names `127.0.0.1` and `localhost`; good for server and client auth. */
  readonly serverCert: string;
  readonly serverKey: string;
  /** Signed by the CA, for client auth only. */
  readonly clientCert: string;
  readonly clientKey: string;
  /** A CA that signed nothing here. */
  readonly otherCaCert: string;
  /** Removes the directory. */
  remove(): void;
}

const EC = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"];

function openssl(args: readonly string[], cwd: string): void {
  execFileSync("openssl", args, { cwd, stdio: ["ignore", "ignore", "pipe"] });
}

function makeCa(dir: string, name: string): void {
  openssl(
    [
      "req",
      "-x509",
      ...EC,
      "-keyout",
      `${name}.key`,
      "-out",
      `${name}.crt`,
      "-subj",
      `/CN=gym test ${name}`,
      "-days",
      "2",
      "-addext",
      "basicConstraints=critical,CA:TRUE",
      "-addext",
      "keyUsage=critical,keyCertSign,cRLSign",
    ],
    dir,
  );
}

function makeLeaf(dir: string, name: string, extensions: string): void {
  openssl(
    ["req", "-new", ...EC, "-keyout", `${name}.key`, "-out", `${name}.csr`, "-subj", `/CN=${name}`],
    dir,
  );
  writeFileSync(path.join(dir, `${name}.ext`), extensions);
  openssl(
    [
      "x509",
      "-req",
      "-in",
      `${name}.csr`,
      "-CA",
      "ca.crt",
      "-CAkey",
      "ca.key",
      "-set_serial",
      String(Date.now()),
      "-days",
      "2",
      "-out",
      `${name}.crt`,
      "-extfile",
      `${name}.ext`,
    ],
    dir,
  );
}

/** Makes a fresh set of certificates in a new temporary directory. */
export function makeTestCertificates(): TestCertificates {
  const dir = mkdtempSync(path.join(tmpdir(), "gym-tls-"));
  makeCa(dir, "ca");
  makeCa(dir, "other-ca");
  makeLeaf(
    dir,
    "server",
    [
      "subjectAltName=IP:127.0.0.1,DNS:localhost",
      "basicConstraints=CA:FALSE",
      "keyUsage=critical,digitalSignature",
      // Servers present it as their client certificate too (mutual TLS between servers).
      "extendedKeyUsage=serverAuth,clientAuth",
      "",
    ].join("\n"),
  );
  makeLeaf(
    dir,
    "client",
    [
      "basicConstraints=CA:FALSE",
      "keyUsage=critical,digitalSignature",
      "extendedKeyUsage=clientAuth",
      "",
    ].join("\n"),
  );
  const file = (name: string): string => path.join(dir, name);
  return {
    dir,
    caCert: file("ca.crt"),
    serverCert: file("server.crt"),
    serverKey: file("server.key"),
    clientCert: file("client.crt"),
    clientKey: file("client.key"),
    otherCaCert: file("other-ca.crt"),
    remove: () => rmSync(dir, { recursive: true, force: true }),
  };
}
