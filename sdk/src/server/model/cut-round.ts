/**
 * The generation-cut round (see docs/policy-model.md): while a prepare closes the gate, each
 * inference worker is asked once to stage the tokens its undelivered calls generated so far.
 * A cut that fails in any way only costs regenerating the call: it never fails the prepare.
 *
 * @module
 */
import type { Logger } from "pino";
import { Agent } from "undici";
import { generationCutRecordFromAck } from "../../capture/continuation.js";
import { conversationDigest } from "../../capture/fingerprints.js";
import {
  GENERATION_CUT_ROUTE,
  parseGenerationCutReceipt,
  buildGenerationCutInventory,
  generationCutFailureAck,
  validateReceiptFor,
  type GenerationCutPrefix,
  type GenerationCutPrefixAck,
} from "../../capture/generation-cut.js";
import type { Ticket } from "../../participants/model/policy-gate.js";

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
}

/** Calls digested per turn of the event loop while a cut request is out. */
const DIGESTS_PER_TURN = 256;

/**
 * `conversationDigest` of each call's request items, by ticket, a slice per event-loop turn so
 * the cut request already sent keeps flowing.
 */
async function requestDigestsOf(calls: readonly Ticket[]): Promise<Map<string, string>> {
  const digests = new Map<string, string>();
  for (let i = 0; i < calls.length; i += DIGESTS_PER_TURN) {
    await new Promise<void>((resolve) => setImmediate(resolve));
    for (const t of calls.slice(i, i + DIGESTS_PER_TURN)) {
      digests.set(t.ticketId, conversationDigest(t.capture?.requestItems ?? []));
    }
  }
  return digests;
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
export class CutRequester {
  readonly #options: CutRequesterOptions;
  readonly #pool = new Agent({ connections: 16 });

  constructor(options: CutRequesterOptions) {
    this.#options = options;
  }

  /**
   * One round for `tickets` (calls on a worker, undelivered, cuttable): one inventory per
   * backend, all concurrently, bounded by half the prepare time left. Sets each ticket's `cut`
   * (its ack) and `cutRecord` (built once, for a durable prefix).
   */
  async run(tickets: readonly Ticket[], deadlineTs: number | null): Promise<void> {
    const byBackend = new Map<string, Ticket[]>();
    for (const t of tickets) {
      if (t.backend === null || t.capture === null || t.episode === null) continue;
      const list = byBackend.get(t.backend) ?? [];
      list.push(t);
      byBackend.set(t.backend, list);
    }
    const budgetMs =
      deadlineTs === null ? 30_000 : (Math.max(0, deadlineTs * 1000 - Date.now()) / 2) | 0;
    await Promise.all(
      [...byBackend].map(([backend, calls]) => this.#cutBackend(backend, calls, budgetMs)),
    );
  }

  /** Closes the pool. */
  async close(): Promise<void> {
    await this.#pool.close();
  }

  async #cutBackend(backend: string, calls: readonly Ticket[], budgetMs: number): Promise<void> {
    const prefixes: GenerationCutPrefix[] = calls.map((t) => ({
      ticket_id: t.ticketId,
      rollout_id: (t.episode as NonNullable<Ticket["episode"]>).rollout_id,
      attempt: (t.episode as NonNullable<Ticket["episode"]>).attempt,
      model_call_id: (t.capture as NonNullable<Ticket["capture"]>).modelCallId,
      admitted_at: t.admittedAt,
    }));
    let acks: Map<string, GenerationCutPrefixAck>;
    let digests: ReadonlyMap<string, string> = new Map();
    try {
      const inventory = buildGenerationCutInventory({
        checkpoint_id: this.#options.checkpointId(),
        server_name: this.#options.serverName,
        active_prefixes: prefixes,
      });
      const root = this.#options.controlUrls?.[backend] ?? controlRootOf(backend);
      const url = new URL(`${root}${GENERATION_CUT_ROUTE}`);
      const responding = this.#pool.request({
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
      // Handled here, awaited below: a failure while the digests run is not unhandled.
      responding.catch(() => undefined);
      // The worker stages the round on its own core meanwhile: the request digests the cut
      // records need are computed now, between sends, instead of after the receipt.
      digests = await requestDigestsOf(calls);
      const response = await responding;
      const text = await response.body.text();
      if (response.statusCode < 200 || response.statusCode >= 300) {
        throw new Error(`HTTP ${response.statusCode}: ${text.slice(0, 300)}`);
      }
      const receipt = parseGenerationCutReceipt(JSON.parse(text));
      validateReceiptFor(receipt, inventory);
      acks = new Map(receipt.prefixes.map((ack) => [ack.ticket_id, ack]));
    } catch (error) {
      this.#options.logger?.warn(
        { backend, calls: calls.length, err: error },
        "generation cut failed; the calls regenerate after a restore",
      );
      acks = new Map(prefixes.map((p) => [p.ticket_id, generationCutFailureAck(p)]));
    }
    let failed = 0;
    for (const t of calls) {
      const ack = acks.get(t.ticketId);
      if (ack === undefined) continue;
      t.cut = ack;
      if (ack.disposition === "durable_prefix") {
        const requestDigest = digests.get(t.ticketId);
        t.cutRecord = generationCutRecordFromAck(ack, {
          captureKey: t.captureKey,
          requestItems: t.capture?.requestItems ?? [],
          ...(requestDigest === undefined ? {} : { requestDigest }),
        });
      } else {
        failed += 1;
      }
    }
    if (failed > 0) {
      this.#options.logger?.warn(
        { backend, failed, total: calls.length },
        "some generation cuts were not durable",
      );
    }
  }
}
