/**
 * Token lineage on the gate side (see docs/policy-model.md): which committed call a new
 * request continues (its parent), the capture admission the worker gets, and the custody row a
 * committed call leaves in the ledger.
 *
 * @module
 */
import type { CaptureAdmissionInput } from "../../capture/admission.js";
import {
  assistantFingerprint,
  conversationDigest,
  FINGERPRINT_VERSION,
} from "../../capture/fingerprints.js";
import type { CommitCoords } from "../../capture/records.js";
import type { LedgerRow } from "../../capture/ledger/row-codec.js";

/** The failure reason of a call whose parent the ledger cannot name uniquely. */
export const UNRESOLVED_PARENT = "unresolved_parent";

/** What parent resolution found for a request. */
export type Lineage =
  | { readonly kind: "admission"; readonly admission: CaptureAdmissionInput }
  | { readonly kind: "unresolved"; readonly reason: string };

function isModelAuthored(item: unknown): boolean {
  if (typeof item !== "object" || item === null) return false;
  const i = item as { role?: unknown; type?: unknown };
  return i.role === "assistant" || i.type === "function_call" || i.type === "reasoning";
}

/** The model-authored items that directly follow position `at`. */
function followingOutput(items: readonly unknown[], at: number): unknown[] {
  const out: unknown[] = [];
  for (let i = at; i < items.length && isModelAuthored(items[i]); i += 1) out.push(items[i]);
  return out;
}

function isCustody(row: LedgerRow): boolean {
  return typeof row.staging_key === "string" && row.staging_key.length > 0;
}

/**
 * Resolves the parent of a request of `captureKey` among the ledger's `rows`: the committed
 * call whose context is a prefix of the request and whose output follows it there, deepest
 * first. No model-authored item, or no match on an empty ledger → a text root; one verified
 * match → `token_in` under it; no unique match on a non-empty ledger → unresolved.
 */
export function resolveLineage(
  captureKey: string,
  modelCallId: string,
  items: readonly unknown[],
  rows: readonly LedgerRow[],
): Lineage {
  const root: Lineage = {
    kind: "admission",
    admission: { rollout_id: captureKey, model_call_id: modelCallId, mode: "text" },
  };
  if (!items.some(isModelAuthored)) return root;
  const custody = rows.filter(isCustody);
  let best: LedgerRow[] = [];
  let bestLen = -1;
  for (const row of custody) {
    if (row.fingerprint_version !== FINGERPRINT_VERSION) continue;
    const contextLen = row.context_len;
    if (typeof contextLen !== "number" || contextLen > items.length || contextLen < bestLen) {
      continue;
    }
    if (conversationDigest(items.slice(0, contextLen)) !== row.context_digest) continue;
    const output = followingOutput(items, contextLen);
    if (output.length === 0 || assistantFingerprint(output) !== row.output_fingerprint) continue;
    if (contextLen > bestLen) {
      best = [row];
      bestLen = contextLen;
    } else {
      best.push(row);
    }
  }
  const distinct = new Map(best.map((row) => [row.cumulative_hash, row]));
  if (distinct.size === 0) {
    return custody.length === 0 ? root : { kind: "unresolved", reason: UNRESOLVED_PARENT };
  }
  if (distinct.size > 1) return { kind: "unresolved", reason: UNRESOLVED_PARENT };
  const parent = [...distinct.values()][0] as LedgerRow;
  return {
    kind: "admission",
    admission: {
      rollout_id: captureKey,
      model_call_id: modelCallId,
      mode: "token_in",
      parent_call_id: parent.model_call_id,
      prev_len: parent.cum_len as number,
      staging_chain: [...((parent.staging_chain as string[] | undefined) ?? [])],
      parent_chain_hash: parent.chain_hash as string,
    },
  };
}

/** Everything a custody row records about one committed call. */
export interface CustodyInput {
  readonly coords: CommitCoords;
  readonly admission: CaptureAdmissionInput;
  readonly requestItems: readonly unknown[];
  /** `conversationDigest(requestItems)` when the caller has it already. */
  readonly contextDigest?: string;
  readonly outputItems: readonly unknown[];
  readonly responseId: string;
  readonly admittedAt: number;
}

/** The custody row of a staged call: no token arrays, only where they are staged. */
export function custodyRow(input: CustodyInput): LedgerRow {
  const { coords } = input;
  const stagingKey = coords.staging_key as string;
  return {
    model_call_id: coords.model_call_id,
    fingerprint: assistantFingerprint([...input.requestItems, ...input.outputItems]),
    context_len: input.requestItems.length,
    context_digest: input.contextDigest ?? conversationDigest(input.requestItems),
    digest: coords.cumulative_hash,
    parent_call_id: coords.parent_call_id,
    staging_key: stagingKey,
    weight_version: coords.weight_version,
    prev_len: coords.prev_len,
    delta_len: coords.delta_len,
    cum_len: coords.cum_len,
    staging_digest: coords.digest,
    extras_digest: coords.extras_digest,
    mode: input.admission.mode,
    admitted_at: input.admittedAt,
    staging_chain: [...(input.admission.staging_chain ?? []), stagingKey],
    chain_hash: coords.chain_hash,
    cumulative_hash: coords.cumulative_hash,
    response_id: input.responseId,
    output_fingerprint: assistantFingerprint(input.outputItems),
    continuation_fingerprint: null,
    fingerprint_version: FINGERPRINT_VERSION,
  };
}
