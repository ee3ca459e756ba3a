/**
 * The error catalogue: every refusal the contract names, with its exact code and HTTP status.
 * Errors become the wire envelope `{"error": {"code", "detail"}}` in one place
 * (`server/error-handler.ts`); everything else is a 500 with a generic body.
 *
 * @see docs/errors.md
 */

/** Every error code on the wire, with its HTTP status and what it means. */
export const ERROR_CATALOGUE = {
  checkpoint_error: {
    status: 409,
    summary:
      "A participant refused the commit or restore (e.g. a model commit without episode_ids, a restore into a process that already serves).",
  },
  stale_checkpoint: {
    status: 409,
    summary: "The checkpoint ID was already resumed; start a new checkpoint with a new ID.",
  },
  checkpoint_conflict: {
    status: 409,
    summary:
      "Another checkpoint is active, or a retried commit/restore names another directory or scope.",
  },
  invalid_phase: { status: 409, summary: "The operation is not allowed in the current phase." },
  deadline_exceeded: {
    status: 409,
    summary: "The deadline passed before or during bounded work; retry with a later deadline.",
  },
  stale_attempt: {
    status: 409,
    summary: "The request comes from an attempt at or below its rollout's retired mark.",
  },
  admission_closed: {
    status: 409,
    summary: "A checkpoint is open and this participant refuses new work until resume.",
  },
  restart_in_scope: {
    status: 409,
    summary: "The commit scope names an episode this participant reported as a restart.",
  },
  export_failed: {
    status: 409,
    summary: "The checkpoint's export failed; resume and prepare again under a new ID.",
  },
  retire_incomplete: {
    status: 409,
    summary: "Forget refused: retired state of the rollout is still held.",
  },
  worker_lost: {
    status: 409,
    summary:
      "A worker process of this multi-worker server died: checkpointing the rest would lose its state; restart the server and restore the last checkpoint.",
  },
  activation_out_of_order: {
    status: 409,
    summary: "An agent activation arrived before the previous one completed.",
  },
  rollout_id_required: {
    status: 400,
    summary: "This data-plane work needs the /ng-rollout/<capture key>/ prefix.",
  },
  invalid_rollout_id: { status: 400, summary: "The rollout prefix or rollout ID is malformed." },
  unauthorized: { status: 401, summary: "The bearer token is missing or wrong." },
  not_found: { status: 404, summary: "No such route." },
  invalid_request: {
    status: 422,
    summary: "The request body is not valid JSON or does not match the route's schema.",
  },
  invalid_checkpoint_state: {
    status: 422,
    summary:
      "Checkpoint directory, manifest or records missing, corrupt, unreadable, unwritable or foreign.",
  },
  upstream_unreachable: {
    status: 502,
    summary:
      "Another server of the deployment that this request needed could not be reached or did not answer in time.",
  },
  upstream_error: {
    status: 502,
    summary:
      "Another server of the deployment refused a call this request needed; the detail names it and its answer.",
  },
  session_owner_gone: {
    status: 410,
    summary:
      "The session belongs to a worker process of this server that is gone; its state went with it.",
  },
  checkpoint_coordinator_unavailable: {
    status: 503,
    summary:
      "This worker cannot reach its server's checkpoint coordinator (the server is shutting down or its coordinator failed).",
  },
  internal_error: { status: 500, summary: "A bug: the server failed in a way it did not expect." },
} as const satisfies Record<string, { status: number; summary: string }>;

/** Every error code on the wire. */
export type ErrorCode = keyof typeof ERROR_CATALOGUE;

/** One problem with a request body, located by its JSON path. */
export interface RequestIssue {
  readonly path: (string | number)[];
  readonly message: string;
}

/** The error envelope every refusal is answered with. */
export interface ErrorEnvelope {
  error: { code: string; detail: string; issues?: RequestIssue[] };
}

const GYM_ERROR_BRAND = Symbol.for("gym-participant-sdk.GymError");
const DETAIL_ERROR_BRAND = Symbol.for("gym-participant-sdk.DetailError");

/**
 * A refusal with a code and status from {@link ERROR_CATALOGUE}. Participants throw these; the
 * server maps them to the envelope. Subclasses group the areas; tests match on `code`.
 *
 * @example
 * // In a route or hook: answered as 422 {"error": {"code": "invalid_request", "detail": ...}}.
 * if (body.count < 0) throw new InvalidRequestError("count must be 0 or more");
 * // A caller matches on the code, never on the detail:
 * if (error instanceof GymError && error.code === "stale_attempt") return;
 */
export class GymError extends Error {
  override name = "GymError";
  /** The HTTP status of the code, from the catalogue. */
  readonly status: number;
  /** Marks typed errors across copies of this package (e.g. `dist/` and source side by side). */
  readonly [GYM_ERROR_BRAND] = true;

  /**
   * `value instanceof GymError` holds for a typed error of any copy of the package: a worker's
   * server (loaded from the installed package) renders the refusals its coordinator link (in
   * the CLI's copy) passes on. Subclasses keep the usual prototype check.
   */
  static override [Symbol.hasInstance](value: unknown): boolean {
    if (this !== GymError) return Function.prototype[Symbol.hasInstance].call(this, value);
    return typeof value === "object" && value !== null && GYM_ERROR_BRAND in value;
  }
  constructor(
    readonly code: ErrorCode,
    detail: string,
    options?: ErrorOptions,
  ) {
    super(detail, options);
    this.status = ERROR_CATALOGUE[code].status;
  }

  /** The human-readable detail (the message). */
  get detail(): string {
    return this.message;
  }

  /** The wire envelope of this error. */
  toEnvelope(): ErrorEnvelope {
    return { error: { code: this.code, detail: this.message } };
  }
}

/** A checkpoint-protocol refusal (409 unless stated), raised by the control plane. */
export class CheckpointError extends GymError {
  override name = "CheckpointError";

  /** The ID was resumed already (one of the 64 remembered). */
  static stale(checkpointId: string): CheckpointError {
    return new CheckpointError(
      "stale_checkpoint",
      `checkpoint '${checkpointId}' was already resumed; start a new checkpoint with a new ID`,
    );
  }

  /** Another checkpoint is active, or a retry names other arguments. */
  static conflict(detail: string): CheckpointError {
    return new CheckpointError("checkpoint_conflict", detail);
  }

  /** The operation is not allowed in this phase. */
  static invalidPhase(operation: string, phase: string): CheckpointError {
    return new CheckpointError("invalid_phase", `${operation} is not allowed in phase '${phase}'`);
  }

  /** A bounded wait ran out. */
  static deadline(what: string): CheckpointError {
    return new CheckpointError("deadline_exceeded", `deadline passed before ${what} finished`);
  }

  /** Final refusal of a checkpoint whose export failed or whose readiness regressed. */
  static exportFailed(checkpointId: string, why: string): CheckpointError {
    return new CheckpointError(
      "export_failed",
      `checkpoint '${checkpointId}' cannot be committed: ${why}; resume and prepare again under a new ID`,
    );
  }

  /** Scope names episodes this participant reported as restarts. */
  /** A worker of a multi-worker participant died; `lost` names it (index, pid, exit). */
  static workerLost(operation: string, lost: string): CheckpointError {
    return new CheckpointError(
      "worker_lost",
      `${operation} refused: ${lost}; the participant cannot be checkpointed whole. Restart the server and restore the last checkpoint`,
    );
  }

  static restartInScope(keys: readonly string[]): CheckpointError {
    return new CheckpointError(
      "restart_in_scope",
      `the commit scope names episodes reported as restarts: ${[...keys].sort().join(", ")}`,
    );
  }
}

/** A data-plane refusal tied to an episode (stale attempt, admission closed, missing rollout). */
export class EpisodeError extends GymError {
  override name = "EpisodeError";
  constructor(
    code: ErrorCode,
    detail: string,
    /** The capture key the refused request named, when it named one. */
    readonly captureKey: string | null = null,
    options?: ErrorOptions,
  ) {
    super(code, detail, options);
  }

  /** The attempt is at or below its rollout's retired mark. */
  static staleAttempt(key: string, mark: number): EpisodeError {
    return new EpisodeError(
      "stale_attempt",
      `attempt '${key}' is retired (its rollout is retired up to attempt ${mark}); send the next attempt`,
      key,
    );
  }

  /** A checkpoint is open and this participant refuses new work. */
  static admissionClosed(what: string): EpisodeError {
    return new EpisodeError(
      "admission_closed",
      `${what} refused: a checkpoint is open; retry after resume`,
    );
  }

  /** The work needs a rollout prefix. */
  static rolloutIdRequired(what: string): EpisodeError {
    return new EpisodeError(
      "rollout_id_required",
      `${what} needs a rollout: call it under /ng-rollout/<capture key>/`,
    );
  }

  /** The rollout prefix or ID is malformed. */
  static invalidRolloutId(detail: string): EpisodeError {
    return new EpisodeError("invalid_rollout_id", detail);
  }
}

/** Checkpoint storage could not be read or written, or holds something it should not. */
export class CheckpointStateError extends GymError {
  override name = "CheckpointStateError";
  constructor(
    detail: string,
    /** The episode whose record is at fault, when one is. */
    readonly captureKey: string | null = null,
    options?: ErrorOptions,
  ) {
    super("invalid_checkpoint_state", detail, options);
  }
}

/**
 * One participant's committed state that this machine cannot see whole: what
 * {@link CheckpointNotSharedError} names.
 */
export interface UnsharedState {
  /** The server's name in the deployment. */
  readonly server: string;
  /** Its directory, `<checkpoint_dir>/gym/<kind>/<instance>`, where this machine looked. */
  readonly path: string;
  /** The host name that wrote it (the manifest's `host`), or null when nothing says. */
  readonly host: string | null;
  /** The address the deployment gives the server (its URL's host), or null when unknown. */
  readonly address: string | null;
  /** What this machine finds there instead, e.g. "it is not there". */
  readonly problem: string;
}

/**
 * The controller cannot see, from its own machine, state that participants committed: the
 * checkpoint directory is on a disk of each node rather than on a file system every machine
 * shares. Raised by the controller after every commit reply and before anything is published
 * (the commit then fails as a whole), and before a restore is sent. Its code is
 * `invalid_checkpoint_state`: from this machine the directory or manifest is missing.
 *
 * @see docs/storage.md
 */
export class CheckpointNotSharedError extends CheckpointStateError {
  override name = "CheckpointNotSharedError";
  constructor(
    /** `commit`: written just now; `restore`: the published checkpoint about to be restored. */
    readonly operation: "commit" | "restore",
    /** Every participant whose state is missing or different here, sorted by server. */
    readonly unshared: readonly UnsharedState[],
    /** This machine's host name. */
    readonly localHost: string,
  ) {
    const each = unshared.map((entry) => {
      const writer = writerOf(entry);
      return operation === "commit"
        ? `${entry.server} wrote ${entry.path}${writer}, but ${entry.problem} on this machine (${localHost})`
        : `${entry.server}'s state ${entry.path}${writer === "" ? "" : ` (written${writer})`}: ${entry.problem} on this machine (${localHost})`;
    });
    super(
      `${each.join("; ")}: the checkpoint directory must be on a file system every machine ` +
        "shares (NFS, Lustre, CephFS), not a node-local disk",
    );
  }
}

function writerOf(entry: UnsharedState): string {
  if (entry.host !== null && entry.address !== null && entry.host !== entry.address) {
    return ` on host ${entry.host} (${entry.address})`;
  }
  const either = entry.host ?? entry.address;
  return either === null ? "" : ` on host ${either}`;
}

/** A request that failed authentication. */
export class UnauthorizedError extends GymError {
  override name = "UnauthorizedError";
  constructor() {
    super(
      "unauthorized",
      "missing or wrong bearer token: send 'Authorization: Bearer <control_auth_token>'",
    );
  }
}

/** A request body that is not valid JSON or does not match its schema. */
export class InvalidRequestError extends GymError {
  override name = "InvalidRequestError";
  constructor(
    detail: string,
    readonly issues: readonly RequestIssue[] = [],
  ) {
    super("invalid_request", detail);
  }

  override toEnvelope(): ErrorEnvelope {
    return { error: { code: this.code, detail: this.message, issues: [...this.issues] } };
  }
}

/** Invalid configuration found at startup (settings, class declarations). Not a wire error. */
export class ConfigError extends Error {
  override name = "ConfigError";
}

/**
 * A resources server's tool route that cannot be served over MCP, found at startup when the
 * server exposes its tools over MCP (`expose_tools_over_mcp: true`). Names the route; fix the
 * route, or leave it out of MCP with `mcp: false`.
 */
export class McpToolError extends ConfigError {
  override name = "McpToolError";
  constructor(
    /** The route, as `POST /path`. */
    readonly route: string,
    why: string,
  ) {
    super(`tool route ${route} cannot be an MCP tool: ${why}`);
  }

  /** A tool name (the path without its `/`) outside `^[A-Za-z0-9_-]+$`. */
  static badName(route: string, name: string): McpToolError {
    return new McpToolError(
      route,
      `its name ${JSON.stringify(name)} must match ^[A-Za-z0-9_-]+$ (rename the path, or set mcp: false)`,
    );
  }

  /** A route whose `before` middleware a call over MCP would skip. */
  static skippedMiddleware(route: string): McpToolError {
    return new McpToolError(
      route,
      "it declares `before` middleware, which a call over MCP would not run (set mcp: false to keep it off MCP)",
    );
  }

  /** A request schema whose JSON Schema is not an object (MCP tool arguments are one). */
  static notAnObject(route: string): McpToolError {
    return new McpToolError(
      route,
      "its request schema does not describe a JSON object, and MCP tool arguments are one",
    );
  }
}

/**
 * A plain HTTP refusal answered with `{"detail": <string>}` (no error code), for the few
 * refusals the contract words that way (e.g. an agent session that is already closed).
 */
export class DetailError extends Error {
  override name = "DetailError";
  /** Marks these errors across copies of this package (see {@link GymError}). */
  readonly [DETAIL_ERROR_BRAND] = true;

  /** Holds for a `DetailError` of any copy of the package. */
  static override [Symbol.hasInstance](value: unknown): boolean {
    if (this !== DetailError) return Function.prototype[Symbol.hasInstance].call(this, value);
    return typeof value === "object" && value !== null && DETAIL_ERROR_BRAND in value;
  }
  constructor(
    /** The HTTP status (4xx). */
    readonly status: number,
    /** The body's `detail`. */
    readonly detail: string,
  ) {
    super(detail);
  }
}
