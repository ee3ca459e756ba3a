/**
 * The SDK's metrics through the OpenTelemetry API. The API has no proxy meter: instruments made
 * before a meter provider is installed stay no-ops forever, so they are made on first use and made
 * again when the global provider changes (telemetry started, or a test installs its own).
 */
import {
  metrics,
  type Attributes,
  type Counter,
  type Histogram,
  type MeterProvider,
  type ObservableResult,
} from "@opentelemetry/api";
import { METRIC, SCOPE } from "./names.js";

/** Seconds buckets from 1 ms to 5 min: control operations and data requests both fit. */
const SECONDS_BUCKETS = [
  0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300,
];

interface Instruments {
  readonly provider: MeterProvider;
  readonly operationDuration: Histogram;
  readonly records: Counter;
  readonly bytes: Counter;
  readonly events: Counter;
  readonly httpDuration: Histogram;
}

let current: Instruments | null = null;

function instruments(): Instruments {
  const provider = metrics.getMeterProvider();
  if (current?.provider === provider) return current;
  const meter = provider.getMeter(SCOPE);
  const seconds = { unit: "s", advice: { explicitBucketBoundaries: SECONDS_BUCKETS } };
  current = {
    provider,
    operationDuration: meter.createHistogram(METRIC.operationDuration, {
      description: "Duration of a checkpoint control operation on a participant",
      ...seconds,
    }),
    records: meter.createCounter(METRIC.records, {
      description: "Records a participant committed or restored",
    }),
    bytes: meter.createCounter(METRIC.bytes, {
      description: "Bytes of records a participant committed or restored",
      unit: "By",
    }),
    events: meter.createCounter(METRIC.events, {
      description: "Checkpoint events: refused requests (by code) and lease expiries",
    }),
    httpDuration: meter.createHistogram(METRIC.httpDuration, {
      description: "Duration of HTTP requests, by route (operational and control routes too)",
      ...seconds,
    }),
  };
  return current;
}

/** Records one control operation's duration and outcome. */
export function recordOperation(
  operation: string,
  kind: string,
  outcome: "ok" | "error",
  seconds: number,
): void {
  instruments().operationDuration.record(seconds, { operation, kind, outcome });
}

/** Adds the records and bytes a commit wrote or a restore read. */
export function recordVolume(
  operation: string,
  kind: string,
  records: number,
  bytes: number,
): void {
  const attributes = { operation, kind };
  const all = instruments();
  all.records.add(records, attributes);
  all.bytes.add(bytes, attributes);
}

/** Counts a refused request (its error code) or another checkpoint event. */
export function recordEvent(event: "refused" | "lease_expired", attributes: Attributes = {}): void {
  instruments().events.add(1, { event, ...attributes });
}

/** Records one data-route request. */
export function recordRequest(
  method: string,
  route: string,
  status: number,
  seconds: number,
): void {
  instruments().httpDuration.record(seconds, {
    "http.request.method": method,
    "http.route": route,
    "http.response.status_code": status,
  });
}

/** What a participant's live gauges read. */
export interface ParticipantGauges {
  readonly server: string;
  readonly kind: string;
  phase(): string;
  admissionOpen(): boolean;
  blockers(): number;
  counts(): Readonly<Record<string, number>>;
}

const PHASES = ["idle", "preparing", "prepared", "committed", "restored"] as const;
/** Server name → its gauges: one set per server in a process, the newest watch winning. */
const watched = new Map<string, ParticipantGauges>();
let gaugeProvider: MeterProvider | null = null;

/**
 * Reports a participant's phase, admission, blockers and counts as gauges read at each
 * collection, in place of any participant watched before under the same server name (a
 * multi-worker server's coordinator builds the server once for its hooks, then reports the
 * participant that answers the control calls). Returns the function that stops reporting it.
 */
export function watchParticipant(source: ParticipantGauges): () => void {
  watched.set(source.server, source);
  ensureGauges();
  return () => {
    if (watched.get(source.server) === source) watched.delete(source.server);
  };
}

/** Server name → its clock minus the last controller's that called it, in seconds. */
const clockOffsets = new Map<string, number>();

/**
 * Records how far this server's clock is from the controller's, as one control call showed it
 * (`gym_clock_offset_seconds`, replacing the value before).
 */
export function recordClockOffset(server: string, seconds: number): void {
  clockOffsets.set(server, seconds);
  ensureGauges();
}

/** Registers the observable gauges once per meter provider. */
export function ensureGauges(): void {
  const provider = metrics.getMeterProvider();
  if (gaugeProvider === provider) return;
  gaugeProvider = provider;
  const meter = provider.getMeter(SCOPE);
  const each = (read: (source: ParticipantGauges, result: ObservableResult) => void) => {
    return (result: ObservableResult): void => {
      for (const source of watched.values()) read(source, result);
    };
  };
  meter
    .createObservableGauge(METRIC.phase, { description: "1 for the participant's current phase" })
    .addCallback(
      each((source, result) => {
        const phase = source.phase();
        for (const name of PHASES) {
          result.observe(name === phase ? 1 : 0, {
            server: source.server,
            kind: source.kind,
            phase: name,
          });
        }
      }),
    );
  meter
    .createObservableGauge(METRIC.admissionOpen, { description: "1 while new work is admitted" })
    .addCallback(
      each((source, result) =>
        result.observe(source.admissionOpen() ? 1 : 0, {
          server: source.server,
          kind: source.kind,
        }),
      ),
    );
  meter
    .createObservableGauge(METRIC.blockers, { description: "Work blocking a checkpoint" })
    .addCallback(
      each((source, result) =>
        result.observe(source.blockers(), { server: source.server, kind: source.kind }),
      ),
    );
  meter
    .createObservableGauge(METRIC.clockOffset, {
      description: "This server's clock minus the controller's, as the last control call showed it",
      unit: "s",
    })
    .addCallback((result) => {
      for (const [server, seconds] of clockOffsets) result.observe(seconds, { server });
    });
  meter
    .createObservableGauge(METRIC.counts, {
      description: "The participant's live counts (in flight, sessions, held responses, cuts)",
    })
    .addCallback(
      each((source, result) => {
        for (const [count, value] of Object.entries(source.counts())) {
          result.observe(value, { server: source.server, kind: source.kind, count });
        }
      }),
    );
}
