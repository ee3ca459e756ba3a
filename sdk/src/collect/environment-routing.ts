/**
 * Which environment server each row goes to: the deployment's only one, `--environment`, or the
 * one a row names in its route field; a name that is not an environment server is refused
 * before anything is sent, saying what the name is and which servers the deployment has.
 *
 * @see docs/collect.md
 */
import { didYouMean } from "../util/did-you-mean.js";
import { CollectError } from "./collect-options.js";
import type { TaskFileSummary } from "./task-rows.js";

/** The deployment's servers, as far as routing cares. */
type Servers = Readonly<Record<string, { readonly kind: string }>>;

/**
 * The environment server of rows that name none: `named` (`--environment`), checked, else the
 * deployment's only environment server, else "" (rows must name theirs).
 */
export function pickEnvironment(servers: Servers, named: string | undefined): string {
  const environments = environmentServers(servers);
  if (named !== undefined) {
    if (!environments.includes(named)) {
      throw unknownEnvironment(
        `--environment names ${JSON.stringify(named)}`,
        named,
        servers,
        environments,
        "pass one of them",
      );
    }
    return named;
  }
  if (environments.length === 1) return environments[0] as string;
  return "";
}

/** Where the input's rows are routed, for {@link checkEnvironments}. */
export interface RowRouting {
  readonly servers: Servers;
  /** The environment of rows that name none ("": there is none). */
  readonly defaultEnvironment: string;
  /** The row field naming a row's environment server. */
  readonly routeField: string;
  /** The input file, to say where a bad row is. */
  readonly input: string;
}

/** Refuses an input whose rows name a server that is not an environment, or name none with no default. */
export function checkEnvironments(scanned: TaskFileSummary, routing: RowRouting): void {
  const { servers, routeField } = routing;
  const environments = environmentServers(servers);
  const unrouted = scanned.unrouted;
  for (const name of scanned.environments) {
    if (servers[name]?.kind !== "environment") {
      const line = scanned.firstLines.get(name);
      throw unknownEnvironment(
        `rows name ${JSON.stringify(name)} in "${routeField}"${line === undefined ? "" : ` (first at ${routing.input}:${line})`}`,
        name,
        servers,
        environments,
        `fix the rows' "${routeField}" (or drop it and pass --environment NAME)`,
      );
    }
  }
  if (routing.defaultEnvironment === "" && unrouted > 0) {
    throw new CollectError(
      `${unrouted} rows name no environment server, and the deployment has several`,
      `pass --environment NAME, or name one in each row's "${routeField}"`,
    );
  }
}

/** The names of the deployment's environment servers, sorted. */
function environmentServers(servers: Servers): string[] {
  return Object.keys(servers)
    .filter((name) => servers[name]?.kind === "environment")
    .sort();
}

/** A server name that is not an environment server: what it is, and what the deployment has. */
function unknownEnvironment(
  what: string,
  name: string,
  servers: Servers,
  environments: readonly string[],
  todo: string,
): CollectError {
  const kind = servers[name]?.kind;
  const problem =
    kind === undefined
      ? `the deployment has no server ${JSON.stringify(name)}${didYouMean(name, environments)}`
      : `${JSON.stringify(name)} is a ${kind} server, not an environment server`;
  return new CollectError(
    `${what}: ${problem}`,
    environments.length === 0
      ? "the deployment has no environment server: add one to the deployment file"
      : `its environment servers: ${environments.join(", ")}; ${todo}`,
  );
}
