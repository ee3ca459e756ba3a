/**
 * Merges the Prometheus text of several processes of one server (its coordinator and its
 * workers) into one exposition: every sample gets a `worker` label naming its process, and each
 * metric family appears once, its `# HELP` and `# TYPE` lines followed by every process's samples
 * (the text format wants a family's samples together).
 *
 * Samples are labelled rather than summed: a counter or histogram sums correctly in a query
 * (`sum without (worker) (...)`), while a gauge such as the participant's phase does not, and
 * a scrape must not hide which worker holds what.
 */

/** One process's exposition, and the `worker` label value its samples get. */
export interface ProcessExposition {
  /** `"coordinator"`, or the worker's index. */
  readonly worker: string;
  readonly text: string;
}

interface Family {
  help: string | null;
  type: string | null;
  readonly samples: string[];
}

/** The label that names a sample's process. */
export const WORKER_LABEL = "worker";

/** A label block that already has the label (a raw `"` follows only a label name: values escape theirs). */
const HAS_WORKER_LABEL = new RegExp(`[{,]${WORKER_LABEL}="`);

/**
 * `name{a="b"} 1` → `name{worker="0",a="b"} 1`; `name 1` → `name{worker="0"} 1`. A sample that
 * already has a `worker` label (an author's own metric) keeps it: a label may appear only once.
 */
function labelled(sample: string, label: string): string {
  const brace = sample.indexOf("{");
  const space = sample.indexOf(" ");
  // Metric names hold neither `{` nor a space: the first of them ends the name.
  if (brace >= 0 && (space < 0 || brace < space)) {
    if (HAS_WORKER_LABEL.test(sample.slice(brace))) return sample;
    const empty = sample[brace + 1] === "}";
    return `${sample.slice(0, brace + 1)}${label}${empty ? "" : ","}${sample.slice(brace + 1)}`;
  }
  if (space < 0) return sample;
  return `${sample.slice(0, space)}{${label}}${sample.slice(space)}`;
}

/** The family name of a `# HELP name ...` or `# TYPE name ...` line. */
function familyOf(line: string): string {
  const rest = line.slice("# HELP ".length);
  const end = rest.indexOf(" ");
  return end < 0 ? rest : rest.slice(0, end);
}

/** Escapes a label value as the text format requires. */
function labelValue(value: string): string {
  return value.replaceAll("\\", "\\\\").replaceAll('"', '\\"').replaceAll("\n", "\\n");
}

/** One exposition of every process's samples, each labelled with its process. */
export function mergeExpositions(expositions: readonly ProcessExposition[]): string {
  const families = new Map<string, Family>();
  const familyNamed = (name: string): Family => {
    let family = families.get(name);
    if (family === undefined) {
      family = { help: null, type: null, samples: [] };
      families.set(name, family);
    }
    return family;
  };
  for (const { worker, text } of expositions) {
    const label = `${WORKER_LABEL}="${labelValue(worker)}"`;
    // Samples before any `# TYPE` line (untyped) form a family of their own.
    let current = familyNamed("");
    for (const line of text.split("\n")) {
      if (line === "") continue;
      if (line.startsWith("# HELP ") || line.startsWith("# TYPE ")) {
        current = familyNamed(familyOf(line));
        if (line.startsWith("# HELP ")) current.help ??= line;
        else current.type ??= line;
      } else if (!line.startsWith("#")) {
        current.samples.push(labelled(line, label));
      }
    }
  }
  const out: string[] = [];
  for (const family of families.values()) {
    if (family.samples.length === 0 && family.type === null) continue;
    if (family.help !== null) out.push(family.help);
    if (family.type !== null) out.push(family.type);
    out.push(...family.samples);
    out.push("");
  }
  return out.join("\n");
}
