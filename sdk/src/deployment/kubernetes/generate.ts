/**
 * Kubernetes manifests generated from a deployment file, so the file stays the one source of
 * truth: each server runs alone on its own node, which is a one-pod StatefulSet behind a
 * headless Service of the server's name; the file names each node's host as
 * `${GYM_NODE_<NODE>_HOST}`, which the manifests set to that Service's DNS name; the control
 * token (and any other `${VAR}` without a default) comes from a Secret; checkpoints and run
 * state live on one ReadWriteMany volume every pod mounts; the collector is a Job.
 *
 * Pure generation: it reads the deployment file and returns objects and text; writing them is
 * the `gym kubernetes` command's.
 *
 * @see docs/kubernetes.md
 */
import path from "node:path";
import { LineCounter, parseDocument, stringify, visit, type Scalar } from "yaml";
import { EXIT_FAILING, EXIT_PREEMPTED } from "../../collect/collect-report.js";
import { TelemetrySettingsSchema } from "../../wire/settings.js";
import { loadDeploymentFile, type LoadedDeployment } from "../load.js";
import { locate } from "../positions.js";
import { readDeploymentText } from "../read-text.js";
import {
  COLLECT_DIR,
  RUN_DIR,
  SECRET_NAME,
  SERVE_STATE_FILE,
  collectorJob,
  configMap,
  headlessService,
  kustomization,
  serverStatefulSet,
  stateClaim,
  type KubernetesObject,
  type PodSettings,
  type ServerPod,
} from "./objects.js";

export type { KubernetesObject } from "./objects.js";
export { CLAIM_NAME, CONFIG_MAP_NAME, JOB_NAME, SECRET_NAME } from "./objects.js";

/** What {@link kubernetesManifests} is asked for. */
export interface KubernetesOptions {
  /** The deployment file (absolute, or relative to `cwd`). */
  readonly deploymentFile: string;
  /**
   * The directory the image holds at {@link KubernetesOptions.appDir}: the deployment file and
   * the task file must be inside it. @default process.cwd()
   */
  readonly cwd?: string;
  /** @default "gym" */
  readonly namespace?: string;
  /** @default "gym:latest" */
  readonly image?: string;
  /** Where the image holds `cwd`. @default "/app" */
  readonly appDir?: string;
  /** The collector's JSON Lines task file (in `cwd`); without it, no collector Job. */
  readonly tasksFile?: string | null;
  /** Size of the shared volume. @default "10Gi" */
  readonly storage?: string;
  /** Storage class of the shared volume (one that offers ReadWriteMany). @default the cluster's default */
  readonly storageClass?: string | null;
  /** The collector's `--step-timeout`, which sizes every grace period. @default 60 */
  readonly stepTimeoutSeconds?: number;
  /** The command that regenerates the files, for their header. @default `gym kubernetes FILE` */
  readonly command?: string;
}

/** One manifest file: its name in the output directory and its text. */
export interface ManifestFile {
  readonly file: string;
  readonly text: string;
  readonly objects: readonly KubernetesObject[];
}

/** What {@link kubernetesManifests} returns. */
export interface KubernetesManifests {
  /** `kustomization.yaml` last. */
  readonly files: readonly ManifestFile[];
  /** The Secret keys the pods read (create the Secret before applying). */
  readonly secretKeys: readonly string[];
}

/** One reason a deployment file cannot run on Kubernetes as generated. */
export interface KubernetesProblem {
  readonly line: number | null;
  readonly message: string;
}

/** A deployment file the generator refuses; `problems` says what to change, each with its line. */
export class KubernetesDeploymentError extends Error {
  override readonly name = "KubernetesDeploymentError";
  constructor(
    readonly file: string,
    readonly problems: readonly KubernetesProblem[],
  ) {
    const sorted = [...problems].sort((a, b) => (a.line ?? 0) - (b.line ?? 0));
    super(
      `${file}: ${problems.length} problem${problems.length === 1 ? "" : "s"} for Kubernetes; nothing was written\n` +
        sorted
          .map(
            (problem) =>
              `  ${file}${problem.line === null ? "" : `:${problem.line}`}: ${problem.message}`,
          )
          .join("\n"),
    );
  }
}

/** Longest name a StatefulSet can take: its pods' revision label appends 11 characters to it. */
const MAX_NAME = 52;
const DNS_LABEL = /^[a-z]([-a-z0-9]*[a-z0-9])?$/;
/** `gym serve --grace`: SIGTERM → SIGKILL of a pod's server processes. */
const SERVE_GRACE_SECONDS = 15;
/** How long the collector waits for every server to be up (pulling images, a first start). */
const COLLECTOR_WAIT_READY = "10m";
/** `gym collect` exit status for bad usage. */
const EXIT_USAGE = 2;

/** The Kubernetes name of a server: lower case, `_` as `-` (`simple_agent` → `simple-agent`). */
export function kubernetesName(server: string): string {
  return server.toLowerCase().replaceAll("_", "-");
}

/** The variable a node's host is written as: `GYM_NODE_<NODE>_HOST`, upper case, `-` as `_`. */
export function nodeHostVariable(node: string): string {
  return `GYM_NODE_${node.toUpperCase().replaceAll("-", "_")}_HOST`;
}

/** The DNS name other pods reach a server's Service at. */
export function serviceHost(name: string, namespace: string): string {
  return `${name}.${namespace}.svc`;
}

const REFERENCE = /\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(:-[^}]*)?\}/g;

/** The `${VAR}`s of a file's values that have no default, in file order. */
function requiredVariables(text: string): string[] {
  const doc = parseDocument(text);
  const names = new Set<string>();
  visit(doc, {
    Scalar(key, node: Scalar) {
      if (key === "key" || typeof node.value !== "string") return;
      for (const match of node.value.matchAll(REFERENCE)) {
        if (match[1] !== undefined && match[2] === undefined) names.add(match[1]);
      }
    },
  });
  return [...names];
}

/** A path inside `cwd` as the image holds it under `appDir`, or null when outside `cwd`. */
function inImage(cwd: string, appDir: string, file: string): string | null {
  const relative = path.relative(cwd, path.resolve(cwd, file));
  if (relative === "" || relative.startsWith("..") || path.isAbsolute(relative)) return null;
  return path.posix.join(appDir, ...relative.split(path.sep));
}

/** `text` as a manifest file: a header saying where it comes from, then each object. */
function renderFile(header: string, objects: readonly unknown[]): string {
  const body = objects.map((object) => stringify(object, { lineWidth: 0 })).join("---\n");
  return `${header}${body}`;
}

/**
 * The manifests of the deployment in `options.deploymentFile`. Throws
 * {@link KubernetesDeploymentError} when the file cannot run as generated (a node with several
 * servers, a server bound to one address, a node host the manifests do not set, a literal
 * control token…), and `DeploymentFileError` when the file is not a valid deployment.
 *
 * @example
 * const { files } = kubernetesManifests({ deploymentFile: "deploy/kubernetes/deployment.yaml" });
 */
export function kubernetesManifests(options: KubernetesOptions): KubernetesManifests {
  const cwd = options.cwd ?? process.cwd();
  const namespace = options.namespace ?? "gym";
  const appDir = options.appDir ?? "/app";
  const stepSeconds = options.stepTimeoutSeconds ?? 60;
  const shown = options.deploymentFile;
  const absolute = path.resolve(cwd, options.deploymentFile);
  const problems: KubernetesProblem[] = [];
  const refuse = (line: number | null, message: string): void => {
    problems.push({ line, message });
  };
  if (!DNS_LABEL.test(namespace)) {
    refuse(
      null,
      `namespace ${JSON.stringify(namespace)} is not a DNS label: lower-case letters, digits and '-'`,
    );
  }

  const text = readDeploymentText(shown, absolute);
  const lines = new LineCounter();
  const raw = parseDocument(text, { lineCounter: lines });
  const at = (segments: PropertyKey[]): number | null => locate(raw, lines, segments).line;
  const rawNodes = (raw.toJS() as { nodes?: Record<string, unknown> } | null)?.nodes ?? {};

  // Every node's host is its server's Service; set before loading, so the file resolves as in a pod.
  const servedBy = new Map<string, string[]>();
  const rawServers =
    (raw.toJS() as { servers?: Record<string, { node?: unknown }> } | null)?.servers ?? {};
  for (const [name, server] of Object.entries(rawServers)) {
    if (typeof server?.node !== "string") continue;
    servedBy.set(server.node, [...(servedBy.get(server.node) ?? []), name]);
  }
  const config: Record<string, string> = { GYM_RUN_DIR: RUN_DIR };
  const variableOf = new Map<string, string>();
  for (const node of Object.keys(rawNodes)) {
    const variable = nodeHostVariable(node);
    const clash = [...variableOf].find(([, other]) => other === variable)?.[0];
    if (clash !== undefined) {
      refuse(
        at(["nodes", node]),
        `nodes ${clash} and ${node} both take the variable ${variable}: rename one`,
      );
    }
    variableOf.set(node, variable);
    const [server] = servedBy.get(node) ?? [];
    if (server !== undefined) config[variable] = serviceHost(kubernetesName(server), namespace);
  }
  const secretVariables = requiredVariables(text).filter((name) => !(name in config));
  const placeholders = Object.fromEntries(
    secretVariables.map((name) => [name, `from-secret-${name}`]),
  );
  const loaded: LoadedDeployment = loadDeploymentFile(absolute, {
    env: { ...config, ...placeholders },
    checkEntrypoints: false,
  });

  if (loaded.nodes === null) {
    refuse(
      null,
      "the deployment has no nodes: block: on Kubernetes each server runs on its own node (nodes: { counter: { host: ${GYM_NODE_COUNTER_HOST} } }, and node: counter on the server)",
    );
  }
  for (const [node, host] of Object.entries(loaded.nodes ?? {})) {
    const servers = servedBy.get(node) ?? [];
    if (servers.length !== 1) {
      refuse(
        at(["nodes", node]),
        servers.length === 0
          ? `node ${node} runs no server: drop it`
          : `node ${node} runs ${servers.join(", ")}: on Kubernetes each server is its own node (a pod of its own); give each its own node`,
      );
      continue;
    }
    const expected = config[nodeHostVariable(node)];
    if (host.host !== expected) {
      refuse(
        at(["nodes", node, "host"]),
        `node ${node}'s host is ${host.host}, but other pods reach it at its Service, ${expected}: write host: \${${nodeHostVariable(node)}} (the manifests set it)`,
      );
    }
  }
  const names = new Map<string, string>();
  for (const server of Object.values(loaded.servers)) {
    const name = kubernetesName(server.name);
    if (!DNS_LABEL.test(name) || name.length > MAX_NAME) {
      refuse(
        server.line,
        `server ${server.name} has no Kubernetes name (${name}): start with a letter, use letters, digits, '-' and '_', at most ${MAX_NAME} characters`,
      );
    }
    const other = names.get(name);
    if (other !== undefined) {
      refuse(
        server.line,
        `servers ${other} and ${server.name} are both named ${name} on Kubernetes: rename one`,
      );
    }
    names.set(name, server.name);
    if (server.host !== "0.0.0.0" && server.host !== "::") {
      refuse(
        server.line,
        `server ${server.name} binds ${server.host}: in a pod it binds every interface (host: 0.0.0.0), and others reach it at its node's host`,
      );
    }
  }
  if (loaded.checkpoint?.enabled === true) {
    const token: unknown = raw.getIn(["checkpoint", "control_auth_token"]);
    if (typeof token !== "string" || !/^\$\{[A-Za-z_][A-Za-z0-9_]*\}$/.test(token)) {
      refuse(
        at(["checkpoint", "control_auth_token"]),
        `checkpoint.control_auth_token must come from the Secret ${SECRET_NAME}: write control_auth_token: \${GYM_CONTROL_TOKEN} (no default, no literal token in the image)`,
      );
    }
  }
  if (loaded.tls?.client_ca_file !== null && loaded.tls?.client_ca_file !== undefined) {
    refuse(
      at(["tls", "client_ca_file"]),
      "tls.client_ca_file (mutual TLS) is not supported: the kubelet's probes present no client certificate",
    );
  }
  const tasks =
    options.tasksFile === undefined || options.tasksFile === null
      ? null
      : inImage(cwd, appDir, options.tasksFile);
  if (options.tasksFile !== undefined && options.tasksFile !== null && tasks === null) {
    refuse(
      null,
      `the task file ${options.tasksFile} is outside ${cwd}, which the image holds at ${appDir}`,
    );
  }
  const deploymentInImage = inImage(cwd, appDir, absolute);
  if (deploymentInImage === null) {
    refuse(
      null,
      `the deployment file is outside ${cwd}, which the image holds at ${appDir}: run from a directory that holds it`,
    );
  }
  if (problems.length > 0) throw new KubernetesDeploymentError(shown, problems);

  const inPod = deploymentInImage as string;
  const telemetry = loaded.telemetry ?? TelemetrySettingsSchema.parse({});
  const settings: PodSettings = {
    namespace,
    image: options.image ?? "gym:latest",
    gym: ["node", path.posix.join(appDir, "sdk/bin/gym.js")],
    secretVariables,
  };
  // A checkpoint-and-stop is a prepare and a commit, each bounded by the step timeout; a server
  // evicted with the collector keeps serving that long before it is told to stop.
  const drainSeconds = 2 * stepSeconds;
  const files: ManifestFile[] = [];
  const regenerate = options.command ?? `gym kubernetes ${shown}`;
  const header =
    `# Generated from ${path.basename(absolute)} by \`${regenerate}\`.\n` +
    "# Do not edit: change the deployment file and regenerate.\n";
  const add = (file: string, objects: KubernetesObject[]): void => {
    files.push({ file, objects, text: renderFile(header, objects) });
  };

  add("config.yaml", [configMap(namespace, config)]);
  add("storage.yaml", [
    stateClaim(namespace, options.storage ?? "10Gi", options.storageClass ?? null),
  ]);
  for (const server of Object.values(loaded.servers)) {
    const pod: ServerPod = {
      name: kubernetesName(server.name),
      kind: server.kind,
      node: server.node as string,
      port: server.port,
      scheme: loaded.tls === null ? "HTTP" : "HTTPS",
      metricsPath: telemetry.metrics ? telemetry.metrics_path : null,
      args: [
        "serve",
        inPod,
        "--node",
        server.node as string,
        "--state",
        SERVE_STATE_FILE,
        "--foreground",
        "--grace",
        `${SERVE_GRACE_SECONDS}s`,
      ],
      drainSeconds,
      terminationGraceSeconds: drainSeconds + SERVE_GRACE_SECONDS + 15,
    };
    add(`${pod.name}.yaml`, [headlessService(namespace, pod), serverStatefulSet(settings, pod)]);
  }
  if (tasks !== null) {
    add("collect.yaml", [
      collectorJob(settings, {
        args: [
          "collect",
          tasks,
          "--deployment",
          inPod,
          "--checkpoint-dir",
          COLLECT_DIR,
          "--resume",
          // The servers' pods start beside the Job's: wait for every /health first.
          "--wait-ready",
          COLLECTOR_WAIT_READY,
          "--step-timeout",
          `${stepSeconds}s`,
        ],
        // Prepare, commit, and a resume when the commit failed: each bounded by the step timeout.
        terminationGraceSeconds: 3 * stepSeconds + 30,
        preemptedExit: EXIT_PREEMPTED,
        fatalExits: [EXIT_USAGE, EXIT_FAILING],
        backoffLimit: 3,
      }),
    ]);
  }
  const listed = files.map((file) => file.file);
  files.push({
    file: "kustomization.yaml",
    objects: [],
    text: renderFile(header, [kustomization(namespace, listed)]),
  });
  return { files, secretKeys: secretVariables };
}
