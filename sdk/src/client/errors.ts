/**
 * What a caller sees when a call to another server fails: the server refused with the error
 * envelope ({@link ServerReplyError}, carrying the remote `code`), or it could not be reached or
 * answered too late ({@link ServerUnreachableError}).
 */

/** The remote server answered with a non-2xx status (and usually the error envelope). */
export class ServerReplyError extends Error {
  override readonly name = "ServerReplyError";
  constructor(
    /** The server's name in the deployment. */
    readonly server: string,
    readonly method: string,
    readonly path: string,
    /** The HTTP status. */
    readonly status: number,
    /** The envelope's code, or `http_<status>` when the reply had no envelope. */
    readonly code: string,
    /** The envelope's detail, or the start of the reply body. */
    readonly detail: string,
  ) {
    super(`${server}: ${method} ${path} → HTTP ${status} ${code}: ${detail}`);
  }
}

/** Why a server could not answer. */
export type UnreachableReason = "connect" | "tls" | "timeout" | "aborted" | "connection_lost";

/** The server could not be reached, or did not answer within the call's bound. */
export class ServerUnreachableError extends Error {
  override readonly name = "ServerUnreachableError";
  constructor(
    readonly server: string,
    readonly method: string,
    readonly path: string,
    readonly reason: UnreachableReason,
    options?: ErrorOptions,
  ) {
    super(`${server}: ${method} ${path} failed: ${describeReason(reason)}`, options);
  }
}

function describeReason(reason: UnreachableReason): string {
  switch (reason) {
    case "connect":
      return "cannot connect (is the server running?)";
    case "tls":
      return "TLS refused the connection (is the server's certificate signed by a CA in tls.ca_file, and does it name the host of the server's URL?)";
    case "timeout":
      return "no reply within the call's time bound";
    case "aborted":
      return "the call was cancelled";
    case "connection_lost":
      return "the connection dropped before the reply (not retried)";
    default: {
      const unreachable: never = reason;
      return unreachable;
    }
  }
}

/** The deployment has no server of that name. */
export class UnknownServerError extends Error {
  override readonly name = "UnknownServerError";
  constructor(
    readonly server: string,
    known: readonly string[],
  ) {
    super(`no server named '${server}' in the deployment (known: ${known.join(", ") || "none"})`);
  }
}

/**
 * A commit without a scope cannot be split: the model is the only participant, so no other
 * participant's export says which episodes continue. Name them.
 */
export class CommitScopeRequiredError extends Error {
  override readonly name = "CommitScopeRequiredError";
}
