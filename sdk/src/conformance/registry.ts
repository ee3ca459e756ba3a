/**
 * Every requirement of the kit, in the order a run checks them, and the selection `--only` and
 * `--skip` make (by ID, or by group: every ID under a dotted prefix).
 *
 * @see docs/conformance.md
 */
import { CORE_REQUIREMENTS } from "./core-requirements.js";
import { CRASH_REQUIREMENTS } from "./crash-requirements.js";
import { HOSTILE_REQUIREMENT } from "./hostile-input.js";
import { KIND_REQUIREMENTS } from "./kind-requirements.js";
import type { Requirement } from "./requirement.js";
import { RESOURCES_REQUIREMENTS } from "./resources-requirements.js";

/** Every requirement, core first; the hostile slice last, once the profiles ran clean. */
export const REQUIREMENTS: readonly Requirement[] = [
  ...CORE_REQUIREMENTS,
  ...RESOURCES_REQUIREMENTS,
  ...KIND_REQUIREMENTS,
  ...CRASH_REQUIREMENTS,
  HOSTILE_REQUIREMENT,
];

/** Whether `selector` (an ID or a group such as `core.auth` or `core`) names `id`. */
export function selects(selector: string, id: string): boolean {
  return id === selector || id.startsWith(`${selector}.`);
}

/** A selector that names no requirement of `requirements`, or null when every one names some. */
export function unknownSelector(
  selectors: readonly string[],
  requirements: readonly Requirement[] = REQUIREMENTS,
): string | null {
  return selectors.find((s) => !requirements.some((r) => selects(s, r.id))) ?? null;
}

/** The requirements `only` (all when empty) keeps and `skip` does not drop, in run order. */
export function selectRequirements(
  only: readonly string[],
  skipped: readonly string[],
  requirements: readonly Requirement[] = REQUIREMENTS,
): Requirement[] {
  return requirements.filter(
    (r) =>
      (only.length === 0 || only.some((s) => selects(s, r.id))) &&
      !skipped.some((s) => selects(s, r.id)),
  );
}
