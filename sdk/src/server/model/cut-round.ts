/**
 * The generation-cut round (see docs/policy-model.md): while a prepare closes the gate, each
 * inference worker is asked once to stage the tokens its undelivered calls generated so far.
 * A cut that fails in any way only costs regenerating the call: it never fails the prepare.
 *
 * @module
 */
import { ATTR } from "../../telemetry/names.js";
import { inSpan } from "../../telemetry/spans.js";
import type { Logger } from "pino";
import { Agent } from "undici";
import type { ClientTlsOptions } from "../../client/tls.js";
import {
  GENERATION_CUT_ROUTE,
  parseGenerationCutReceipt,
  buildGenerationCutInventory,
  generationCutFailureAck,
  validateReceiptFor,
  type GenerationCutPrefix,
  type GenerationCutPrefixAck,
} from "../../capture/generation-cut.js";
import type { CutCandidate, CutService } from "../../participants/model/cut-service.js";

/** Options of a {@link CutRequester}. */
export interface CutRequesterOptions {
  /** The model server's name (`server_name` of every inventory). */
  readonly serverName: string;
  /** The bearer token of the worker's cut route (the checkpoint control token). */
  readonly token: string;
  /** The checkpoint the round belongs to, read when the round starts. */
  readonly checkpointId: () => string;
  /** Explicit control root per backend base URL (else derived from the base URL). */
  readonly controlUrls?: Readonly<Record<string, string>> | null;
  readonly logger?: Logger;
  /** What the cut calls trust and present over HTTPS (the deployment's `tls:`). @default none */
  readonly tls?: ClientTlsOptions | null;
}

/** The worker control root of a backend: its base URL without a trailing `/` or `/v1`. */
export function controlRootOf(backend: string): string {
  let root = backend.replace(/\/+$/, "");
  if (root.endsWith("/v1")) root = root.slice(0, -3);
  return root;
}

/**
 * Runs cut rounds over a pool of its own (the data connections are busy with the very
 * generations being cut).
 */
export class CutRequester implements CutService {
  readonly #options: CutRequesterOptions;
  readonly #pool: Agent;

  constructor(options: CutRequesterOptions) {
    this.#options = options;
    this.#pool = new Agent({ connections: 16, ...(options.tls ? { connect: options.tls } : {}) });
  }

  /**
   * One round: one inventory per backend, all concurrently, bounded by half the prepare time
   * left. Every candidate gets an ack; every call of a backend whose request failed in any way
   * gets a `durable_failure` one.
   */
  async cut(
    candidates: readonly CutCandidate[],
    deadlineTs: number | null,
  ): Promise<Map<string, GenerationCutPrefixAck>> {
    return await inSpan(
      "gym.checkpoint.generation_cut",
      { [ATTR.calls]: candidates.length },
      async () => await this.#cutAll(candidates, deadlineTs),
    );
  }

  async #cutAll(
    candidates: readonly CutCandidate[],
    deadlineTs: number | null,
  ): Promise<Map<string, GenerationCutPrefixAck>> {
    const byBackend = new Map<string, CutCandidate[]>();
    for (const c of candidates) {
      const list = byBackend.get(c.backend) ?? [];
      list.push(c);
      byBackend.set(c.backend, list);
    }
    const budgetMs =
      deadlineTs === null ? 30_000 : (Math.max(0, deadlineTs * 1000 - Date.now()) / 2) | 0;
    const parts = await Promise.all(
      [...byBackend].map(([backend, calls]) => this.#cutBackend(backend, calls, budgetMs)),
    );
    return new Map(parts.flat().map((ack) => [ack.ticket_id, ack]));
  }

  /** Closes the pool. */
  async close(): Promise<void> {
    await this.#pool.close();
  }

  async #cutBackend(
    backend: string,
    calls: readonly CutCandidate[],
    budgetMs: number,
  ): Promise<GenerationCutPrefixAck[]> {
    const prefixes: GenerationCutPrefix[] = calls.map((c) => ({
      ticket_id: c.ticket_id,
      rollout_id: c.rollout_id,
      attempt: c.attempt,
      model_call_id: c.model_call_id,
      admitted_at: c.admitted_at,
    }));
    let acks: GenerationCutPrefixAck[];
    try {
      const inventory = buildGenerationCutInventory({
        checkpoint_id: this.#options.checkpointId(),
        server_name: this.#options.serverName,
        active_prefixes: prefixes,
      });
      const root = this.#options.controlUrls?.[backend] ?? controlRootOf(backend);
      const url = new URL(`${root}${GENERATION_CUT_ROUTE}`);
      const response = await this.#pool.request({
        origin: url.origin,
        path: url.pathname,
        method: "POST",
        headers: {
          "content-type": "application/json",
          authorization: `Bearer ${this.#options.token}`,
        },
        body: JSON.stringify(inventory),
        signal: AbortSignal.timeout(Math.max(1, budgetMs)),
        headersTimeout: 0,
        bodyTimeout: 0,
      });
      const text = await response.body.text();
      if (response.statusCode < 200 || response.statusCode >= 300) {
        throw new Error(`HTTP ${response.statusCode}: ${text.slice(0, 300)}`);
      }
      const receipt = parseGenerationCutReceipt(JSON.parse(text));
      validateReceiptFor(receipt, inventory);
      acks = receipt.prefixes;
    } catch (error) {
      this.#options.logger?.warn(
        { backend, calls: calls.length, err: error },
        "generation cut failed; the calls regenerate after a restore",
      );
      acks = prefixes.map((p) => generationCutFailureAck(p));
    }
    const failed = acks.filter((ack) => ack.disposition !== "durable_prefix").length;
    if (failed > 0) {
      this.#options.logger?.warn(
        { backend, failed, total: calls.length },
        "some generation cuts were not durable",
      );
    }
    return acks;
  }
}
