/**
 * The names of everything the SDK emits: span names and attribute keys kept compatible with the
 * reference stack's checkpoint telemetry, so dashboards and trace queries carry over; metric
 * names in OpenTelemetry form (a Prometheus scrape shows them with `_` for `.` and a unit
 * suffix: `gym_checkpoint_operation_duration_seconds`, see `setup.ts`). See
 * docs/observability.md.
 */

/** The instrumentation scope of every tracer and meter of the SDK. */
export const SCOPE = "gym-participant-sdk";

/** Span attribute keys. Never a token, a cookie or a key value. */
export const ATTR = {
  checkpointId: "nemo.gym.checkpoint.id",
  kind: "nemo.gym.checkpoint.participant_kind",
  instance: "nemo.gym.checkpoint.instance",
  records: "nemo.gym.checkpoint.records",
  bytes: "nemo.gym.checkpoint.bytes",
  phase: "nemo.gym.checkpoint.phase",
  episodes: "nemo.gym.checkpoint.episodes",
  rollouts: "nemo.gym.checkpoint.rollouts",
  calls: "nemo.gym.checkpoint.calls",
  stage: "nemo.gym.checkpoint.stage",
  rows: "nemo.gym.collect.rows",
  runId: "nemo.gym.collect.run_id",
} as const;

/** Metric names. */
export const METRIC = {
  /** Histogram (s) of each checkpoint operation: `operation`, `kind`, `outcome`. */
  operationDuration: "gym.checkpoint.operation.duration",
  /** Counter of records committed or restored: `operation`, `kind`. */
  records: "gym.checkpoint.records",
  /** Counter of record bytes committed or restored: `operation`, `kind`. */
  bytes: "gym.checkpoint.bytes",
  /** Counter of events: `event` (`refused`, `lease_expired`), and `code` for refusals. */
  events: "gym.checkpoint.events",
  /** Gauge: 1 for the participant's current phase (`phase`), 0 for the others. */
  phase: "gym.participant.phase",
  /** Gauge: 1 while the participant admits new work. */
  admissionOpen: "gym.participant.admission_open",
  /** Gauge: episodes or calls blocking a checkpoint. */
  blockers: "gym.participant.blockers",
  /** Gauge: the participant's readiness counts (`count`: inflight, sessions, held, cut...). */
  counts: "gym.participant.count",
  /**
   * Gauge (s): this server's clock minus the controller's, as the last control call showed it
   * (`server`).
   */
  clockOffset: "gym.clock.offset",
  /** Histogram (s) of every request: `http.request.method`, `http.route`, `http.response.status_code`. */
  httpDuration: "http.server.request.duration",
} as const;
