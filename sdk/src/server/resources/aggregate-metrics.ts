/**
 * The default `POST /aggregate_metrics` of a resources server: statistics of the verify responses
 * of many rollouts, in the shape training loops log (`group_level_metrics` per task,
 * `agent_metrics` over all, `key_metrics` the headline ones). Every numeric or boolean field of a
 * response is described, so a server whose `/verify` adds fields gets their statistics too.
 *
 * @module
 */
import { z } from "zod";

/** The body: the verify responses to aggregate (each as `/verify` answered it). */
export const AggregateMetricsRequestSchema = z
  .looseObject({ verify_responses: z.array(z.record(z.string(), z.unknown())) })
  .meta({ id: "AggregateMetricsRequest" });
/** An aggregate metrics request. */
export type AggregateMetricsRequest = z.infer<typeof AggregateMetricsRequestSchema>;

/**
 * The reply of the default {@link aggregateMetrics}: flat `<statistic>/<field>` keys. Each field
 * is optional, so the schema also holds for a server whose override answers with fewer.
 */
export const AggregateMetricsReplySchema = z
  .looseObject({
    group_level_metrics: z.array(z.record(z.string(), z.number())).optional(),
    agent_metrics: z.record(z.string(), z.number()).optional(),
    key_metrics: z.record(z.string(), z.number()).optional(),
  })
  .meta({ id: "AggregateMetricsReply" });

/** The reply: flat `<statistic>/<field>` keys, ready to log. */
export interface AggregateMetrics {
  /** One entry per task (`_ng_task_index`), in task order; responses without one are left out. */
  readonly group_level_metrics: Record<string, number>[];
  /** The statistics over every response. */
  readonly agent_metrics: Record<string, number>;
  /** The headline: `mean/reward`, when any response has a reward. */
  readonly key_metrics: Record<string, number>;
}

/** The field that groups responses by task; it and the rollout index are not statistics. */
const TASK_INDEX = "_ng_task_index";
const NOT_MEASURED = new Set([TASK_INDEX, "_ng_rollout_index"]);

/** The numeric fields of a response (booleans count as 0 or 1), by name. */
function numericFields(response: Record<string, unknown>): Map<string, number> {
  const fields = new Map<string, number>();
  for (const [key, value] of Object.entries(response)) {
    if (NOT_MEASURED.has(key)) continue;
    if (typeof value === "boolean") fields.set(key, value ? 1 : 0);
    else if (typeof value === "number" && Number.isFinite(value)) fields.set(key, value);
  }
  return fields;
}

/** mean, max, min, median and sample standard deviation (0 for one value) of each field. */
function describe(responses: readonly Record<string, unknown>[]): Record<string, number> {
  const columns = new Map<string, number[]>();
  for (const response of responses) {
    for (const [key, value] of numericFields(response)) {
      const column = columns.get(key);
      if (column === undefined) columns.set(key, [value]);
      else column.push(value);
    }
  }
  const stats: Record<string, number> = {};
  for (const key of [...columns.keys()].sort()) {
    const values = (columns.get(key) as number[]).slice().sort((a, b) => a - b);
    const n = values.length;
    const mean = values.reduce((sum, value) => sum + value, 0) / n;
    const middle = Math.floor(n / 2);
    const median =
      n % 2 === 1
        ? (values[middle] as number)
        : ((values[middle - 1] as number) + (values[middle] as number)) / 2;
    const variance =
      n > 1 ? values.reduce((sum, value) => sum + (value - mean) ** 2, 0) / (n - 1) : 0;
    stats[`mean/${key}`] = mean;
    stats[`max/${key}`] = values[n - 1] as number;
    stats[`min/${key}`] = values[0] as number;
    stats[`median/${key}`] = median;
    stats[`std/${key}`] = Math.sqrt(variance);
  }
  return stats;
}

/**
 * Aggregates verify responses: per task and over all of them.
 *
 * @example
 * aggregateMetrics({ verify_responses: [{ reward: 1 }, { reward: 0 }] }).key_metrics;
 * // { "mean/reward": 0.5 }
 */
export function aggregateMetrics(request: AggregateMetricsRequest): AggregateMetrics {
  const responses = request.verify_responses;
  const byTask = new Map<number, Record<string, unknown>[]>();
  for (const response of responses) {
    const task = response[TASK_INDEX];
    if (typeof task !== "number" || !Number.isInteger(task)) continue;
    const group = byTask.get(task);
    if (group === undefined) byTask.set(task, [response]);
    else group.push(response);
  }
  const agent = describe(responses);
  return {
    group_level_metrics: [...byTask.keys()]
      .sort((a, b) => a - b)
      .map((task) => ({ [TASK_INDEX]: task, ...describe(byTask.get(task) ?? []) })),
    agent_metrics: agent,
    key_metrics: agent["mean/reward"] === undefined ? {} : { "mean/reward": agent["mean/reward"] },
  };
}
