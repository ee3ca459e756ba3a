/**
 * The deployment's `tls:` block turned into what Node's TLS takes: the PEM files are read once,
 * when a server or client is built, and a file that cannot be read fails that build naming the
 * `tls.` key and the file.
 *
 * @see docs/deployment.md#tls
 */
import { readFileSync } from "node:fs";
import { rootCertificates } from "node:tls";
import { Agent, fetch as undiciFetch } from "undici";
import { ConfigError } from "../errors.js";
import type { TlsSettings } from "../wire/settings.js";

/** What a client of the deployment passes to `tls.connect` (undici's `connect` options). */
export interface ClientTlsOptions {
  /** The CAs trusted for the servers' certificates (`tls.ca_file`); absent: the system's. */
  readonly ca?: Buffer | (string | Buffer)[];
  /** Mutual TLS: the certificate presented (`tls.cert_file`). */
  readonly cert?: Buffer;
  /** Mutual TLS: its key (`tls.key_file`). */
  readonly key?: Buffer;
}

/** What a server passes to `https.createServer`. */
export interface ServerTlsOptions {
  readonly cert: Buffer;
  readonly key: Buffer;
  /** Mutual TLS: the CAs a client certificate must be signed by (`tls.client_ca_file`). */
  readonly ca?: Buffer;
  /** Mutual TLS: ask every client for a certificate, and refuse one without a valid one. */
  readonly requestCert?: boolean;
  readonly rejectUnauthorized?: boolean;
}

function readPem(key: keyof TlsSettings, file: string): Buffer {
  try {
    return readFileSync(file);
  } catch (error) {
    const why = (error as NodeJS.ErrnoException).code ?? (error as Error).message;
    throw new ConfigError(
      `cannot read tls.${key} ${file} (${why}): fix the path in the deployment file's tls: block, or make the file readable by this process`,
      { cause: error },
    );
  }
}

/**
 * What a client of a deployment with `tls` presents and trusts, or null for plain HTTP. Reads
 * `ca_file`, and `cert_file` and `key_file` only under mutual TLS (`client_ca_file` set): a
 * controller needs the servers' key only when the servers ask for a client certificate.
 */
export function clientTlsOptions(tls: TlsSettings | null | undefined): ClientTlsOptions | null {
  if (tls === null || tls === undefined) return null;
  return {
    ...(tls.ca_file === null ? {} : { ca: readPem("ca_file", tls.ca_file) }),
    ...(tls.client_ca_file === null
      ? {}
      : { cert: readPem("cert_file", tls.cert_file), key: readPem("key_file", tls.key_file) }),
  };
}

/**
 * {@link clientTlsOptions} for a pool that reaches both a deployment's servers and hosts outside
 * it (the policy model's backend: a `backend_server` of the deployment, or any `backend_url`):
 * Node's bundled CAs are trusted beside `ca_file`, which alone would replace them.
 */
export function mixedClientTlsOptions(
  tls: TlsSettings | null | undefined,
): ClientTlsOptions | null {
  const options = clientTlsOptions(tls);
  if (options === null || options.ca === undefined) return options;
  return { ...options, ca: [...rootCertificates, ...[options.ca].flat()] };
}

/** What a server of a deployment with `tls` serves HTTPS with, or null for plain HTTP. */
export function serverTlsOptions(tls: TlsSettings | null | undefined): ServerTlsOptions | null {
  if (tls === null || tls === undefined) return null;
  return {
    cert: readPem("cert_file", tls.cert_file),
    key: readPem("key_file", tls.key_file),
    ...(tls.client_ca_file === null
      ? {}
      : {
          ca: readPem("client_ca_file", tls.client_ca_file),
          requestCert: true,
          rejectUnauthorized: true,
        }),
  };
}

/** A GET as `gym top` and the supervisor's health probe send it. */
export type DeploymentFetch = (
  url: string,
  init?: { readonly signal?: AbortSignal },
) => Promise<{
  readonly status: number;
  readonly ok: boolean;
  readonly body: { cancel(): Promise<void> } | null;
  text(): Promise<string>;
}>;

/**
 * A `fetch` for GETs to a deployment's servers that trusts and presents what
 * {@link clientTlsOptions} says; the global `fetch` without `tls`. `close` drops its
 * connections.
 */
export function deploymentFetch(tls: TlsSettings | null | undefined): {
  readonly fetch: DeploymentFetch;
  close(): Promise<void>;
} {
  const options = clientTlsOptions(tls);
  if (options === null) {
    return {
      fetch: async (url, init) => await fetch(url, init?.signal ? { signal: init.signal } : {}),
      close: async () => undefined,
    };
  }
  const dispatcher = new Agent({ connect: { ...options } });
  return {
    fetch: async (url, init) =>
      await undiciFetch(url, { dispatcher, ...(init?.signal ? { signal: init.signal } : {}) }),
    close: async () => await dispatcher.close(),
  };
}

/**
 * Whether a failed connection's error is TLS refusing: a certificate not trusted, expired or
 * not naming the host, or the handshake failing.
 */
export function isTlsFailure(error: unknown): boolean {
  for (let cause = error, depth = 0; cause instanceof Error && depth < 4; depth++) {
    const code = (cause as { code?: unknown }).code;
    if (
      typeof code === "string" &&
      (code.startsWith("ERR_TLS_") ||
        code.startsWith("ERR_SSL_") ||
        code.includes("CERT") ||
        code === "UNABLE_TO_VERIFY_LEAF_SIGNATURE" ||
        code === "UNABLE_TO_GET_ISSUER_CERT" ||
        code === "UNABLE_TO_GET_ISSUER_CERT_LOCALLY")
    ) {
      return true;
    }
    cause = cause.cause;
  }
  return false;
}
