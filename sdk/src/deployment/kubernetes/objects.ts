/**
 * The Kubernetes objects of a deployment, one builder each. The object literals are checked
 * against the Kubernetes API types at compile time (a misspelt field does not build); the types
 * stay inside this module, so nothing that imports it needs them.
 */
import type { IStatefulSet } from "kubernetes-models/apps/v1/StatefulSet";
import type { IJob } from "kubernetes-models/batch/v1/Job";
import type { IConfigMap } from "kubernetes-models/v1/ConfigMap";
import type { IContainer } from "kubernetes-models/v1/Container";
import type { IEnvVar } from "kubernetes-models/v1/EnvVar";
import type { IPersistentVolumeClaim } from "kubernetes-models/v1/PersistentVolumeClaim";
import type { IPodSpec } from "kubernetes-models/v1/PodSpec";
import type { IProbe } from "kubernetes-models/v1/Probe";
import type { IService } from "kubernetes-models/v1/Service";

/** Any Kubernetes object, as written to a manifest. */
export interface KubernetesObject {
  readonly apiVersion: string;
  readonly kind: string;
  readonly metadata: {
    readonly name: string;
    readonly namespace?: string;
    readonly [field: string]: unknown;
  };
  readonly [field: string]: unknown;
}

/** Where every pod mounts the shared volume (checkpoints, collection runs, run state). */
export const STATE_MOUNT = "/var/lib/gym";
/** `GYM_RUN_DIR` in every pod: on the shared volume, so it outlives a pod. */
export const RUN_DIR = `${STATE_MOUNT}/run`;
/** The collector's `--checkpoint-dir`: its dispatch log, its checkpoints and its output. */
export const COLLECT_DIR = `${STATE_MOUNT}/collect`;
/**
 * `gym serve --state` in a server pod: in the container's own file system, so a restarted
 * container starts from no state, as a new machine would.
 */
export const SERVE_STATE_FILE = "/tmp/gym/run.json";
/** The ConfigMap of the variables the deployment file references (node hosts, GYM_RUN_DIR). */
export const CONFIG_MAP_NAME = "gym-env";
/** The Secret every `${VAR}` the manifests do not set comes from (the control token). */
export const SECRET_NAME = "gym-secrets";
/** The ReadWriteMany claim every pod mounts at {@link STATE_MOUNT}. */
export const CLAIM_NAME = "gym-state";
/** The collector Job. */
export const JOB_NAME = "gym-collect";
/** The `app.kubernetes.io/part-of` label of every object. */
export const PART_OF = "gym";
/** The UID and GID of the `node` user of the node images. */
const NODE_UID = 1000;

/** What every pod of the deployment shares. */
export interface PodSettings {
  readonly namespace: string;
  readonly image: string;
  /** `node <gym>`: the command of every container. */
  readonly gym: readonly string[];
  /** Variables from the Secret: `${VAR}`s of the file that nothing else sets. */
  readonly secretVariables: readonly string[];
}

function labels(name: string, component: string): Record<string, string> {
  return {
    "app.kubernetes.io/name": name,
    "app.kubernetes.io/component": component,
    "app.kubernetes.io/part-of": PART_OF,
  };
}

/** The labels a selector matches: the pod's name and the deployment it belongs to. */
function selectorLabels(name: string): Record<string, string> {
  return { "app.kubernetes.io/name": name, "app.kubernetes.io/part-of": PART_OF };
}

function secretEnv(variables: readonly string[]): IEnvVar[] {
  return variables.map((name) => ({
    name,
    valueFrom: { secretKeyRef: { name: SECRET_NAME, key: name } },
  }));
}

/** The container settings every pod shares: image, command, environment, volume, user. */
function baseContainer(settings: PodSettings, name: string, args: string[]): IContainer {
  return {
    name,
    image: settings.image,
    imagePullPolicy: "IfNotPresent",
    command: [...settings.gym],
    args,
    envFrom: [{ configMapRef: { name: CONFIG_MAP_NAME } }],
    env: secretEnv(settings.secretVariables),
    volumeMounts: [{ name: "state", mountPath: STATE_MOUNT }],
    securityContext: {
      allowPrivilegeEscalation: false,
      capabilities: { drop: ["ALL"] },
    },
  };
}

/** The pod settings every pod shares: the volume, no service links, a non-root user. */
function basePod(): Pick<IPodSpec, "enableServiceLinks" | "securityContext" | "volumes"> {
  return {
    // Service links add <SERVICE>_PORT-style variables that could shadow the file's `${VAR}`s.
    enableServiceLinks: false,
    securityContext: {
      runAsNonRoot: true,
      runAsUser: NODE_UID,
      runAsGroup: NODE_UID,
      fsGroup: NODE_UID,
      seccompProfile: { type: "RuntimeDefault" },
    },
    volumes: [{ name: "state", persistentVolumeClaim: { claimName: CLAIM_NAME } }],
  };
}

/** The ConfigMap of the variables the manifests set for the deployment file. */
export function configMap(namespace: string, data: Record<string, string>): KubernetesObject {
  return {
    apiVersion: "v1",
    kind: "ConfigMap",
    metadata: { name: CONFIG_MAP_NAME, namespace, labels: labels(CONFIG_MAP_NAME, "config") },
    data,
  } satisfies IConfigMap;
}

/** The ReadWriteMany claim every pod shares: checkpoints must be visible to every server. */
export function stateClaim(
  namespace: string,
  storage: string,
  storageClass: string | null,
): KubernetesObject {
  return {
    apiVersion: "v1",
    kind: "PersistentVolumeClaim",
    metadata: { name: CLAIM_NAME, namespace, labels: labels(CLAIM_NAME, "storage") },
    spec: {
      accessModes: ["ReadWriteMany"],
      ...(storageClass === null ? {} : { storageClassName: storageClass }),
      resources: { requests: { storage } },
    },
  } satisfies IPersistentVolumeClaim;
}

/** One server of the deployment as Kubernetes runs it. */
export interface ServerPod {
  /** The Kubernetes name of its Service and StatefulSet. */
  readonly name: string;
  readonly kind: string;
  readonly node: string;
  readonly port: number;
  readonly scheme: "HTTP" | "HTTPS";
  /** `GET` path of Prometheus text, or null with metrics off. */
  readonly metricsPath: string | null;
  /** `gym serve` and its arguments. */
  readonly args: string[];
  /** How long the pod keeps serving after it is told to stop, before SIGTERM (s). */
  readonly drainSeconds: number;
  readonly terminationGraceSeconds: number;
}

/**
 * The headless Service of a server. It publishes the pod's address while the pod is not ready:
 * `/ready` fails during every checkpoint, and the controller must still reach the server then.
 */
export function headlessService(namespace: string, server: ServerPod): KubernetesObject {
  return {
    apiVersion: "v1",
    kind: "Service",
    metadata: { name: server.name, namespace, labels: labels(server.name, server.kind) },
    spec: {
      clusterIP: "None",
      publishNotReadyAddresses: true,
      selector: selectorLabels(server.name),
      ports: [{ name: "http", port: server.port, targetPort: server.port, protocol: "TCP" }],
    },
  } satisfies IService;
}

function probe(server: ServerPod, path: string, periodSeconds: number, failures: number): IProbe {
  return {
    httpGet: { path, port: server.port, scheme: server.scheme },
    periodSeconds,
    timeoutSeconds: 5,
    failureThreshold: failures,
  };
}

/**
 * The StatefulSet of one server: one pod, `gym serve FILE --node NODE` in it. Readiness is
 * `/ready`, liveness `/health` (a server holding a checkpoint is alive but not ready); a startup
 * probe gives a slow start a minute before liveness counts.
 */
export function serverStatefulSet(settings: PodSettings, server: ServerPod): KubernetesObject {
  const annotations: Record<string, string> =
    server.metricsPath === null
      ? {}
      : {
          "prometheus.io/scrape": "true",
          "prometheus.io/port": String(server.port),
          "prometheus.io/path": server.metricsPath,
          ...(server.scheme === "HTTPS" ? { "prometheus.io/scheme": "https" } : {}),
        };
  return {
    apiVersion: "apps/v1",
    kind: "StatefulSet",
    metadata: {
      name: server.name,
      namespace: settings.namespace,
      labels: labels(server.name, server.kind),
    },
    spec: {
      serviceName: server.name,
      replicas: 1,
      podManagementPolicy: "Parallel",
      selector: { matchLabels: selectorLabels(server.name) },
      template: {
        metadata: {
          labels: labels(server.name, server.kind),
          ...(Object.keys(annotations).length === 0 ? {} : { annotations }),
        },
        spec: {
          ...basePod(),
          terminationGracePeriodSeconds: server.terminationGraceSeconds,
          containers: [
            {
              ...baseContainer(settings, "server", server.args),
              ports: [{ name: "http", containerPort: server.port, protocol: "TCP" }],
              startupProbe: probe(server, "/health", 2, 30),
              readinessProbe: probe(server, "/ready", 5, 1),
              livenessProbe: probe(server, "/health", 10, 3),
              lifecycle: {
                // Keeps serving while a collector evicted with it checkpoints (prepare, commit).
                preStop: { exec: { command: ["sleep", String(server.drainSeconds)] } },
              },
            },
          ],
        },
      },
    },
  } satisfies IStatefulSet;
}

/** The collector's Job: what it runs and how its failures count. */
export interface CollectorJob {
  readonly args: string[];
  readonly terminationGraceSeconds: number;
  /** Exit status of a checkpoint-and-stop: the pod is replaced and resumes. */
  readonly preemptedExit: number;
  /** Exit statuses no retry can mend (bad usage, rollouts failing alike). */
  readonly fatalExits: readonly number[];
  readonly backoffLimit: number;
}

/**
 * The collector as a Job. A disruption (eviction, preemption, a node drain) does not count
 * against `backoffLimit`, nor does a checkpoint-and-stop; every pod runs with `--resume`, so the
 * replacement continues the run the shared volume holds.
 */
export function collectorJob(settings: PodSettings, job: CollectorJob): KubernetesObject {
  return {
    apiVersion: "batch/v1",
    kind: "Job",
    metadata: {
      name: JOB_NAME,
      namespace: settings.namespace,
      labels: labels(JOB_NAME, "collector"),
    },
    spec: {
      backoffLimit: job.backoffLimit,
      podFailurePolicy: {
        rules: [
          {
            action: "Ignore",
            onPodConditions: [{ type: "DisruptionTarget", status: "True" }],
          },
          {
            action: "Ignore",
            onExitCodes: { containerName: "collect", operator: "In", values: [job.preemptedExit] },
          },
          {
            action: "FailJob",
            onExitCodes: { containerName: "collect", operator: "In", values: [...job.fatalExits] },
          },
        ],
      },
      template: {
        metadata: { labels: labels(JOB_NAME, "collector") },
        spec: {
          ...basePod(),
          restartPolicy: "Never",
          terminationGracePeriodSeconds: job.terminationGraceSeconds,
          containers: [baseContainer(settings, "collect", job.args)],
        },
      },
    },
  } satisfies IJob;
}

/** The kustomization listing every manifest file, in the namespace. */
export function kustomization(
  namespace: string,
  files: readonly string[],
): Record<string, unknown> {
  return {
    apiVersion: "kustomize.config.k8s.io/v1beta1",
    kind: "Kustomization",
    namespace,
    resources: [...files],
  };
}
