/**
 * `gym kubernetes`: the committed manifests of deploy/kubernetes are what the generator writes
 * from deploy/kubernetes/deployment.yaml, every object is valid against the Kubernetes schemas,
 * and the manifests agree with the deployment file read on its own (ports, node names, probes,
 * the Secret key, the Service names the file's node hosts resolve to).
 */
import {
  cpSync,
  existsSync,
  mkdtempSync,
  readFileSync,
  readdirSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { StatefulSet } from "kubernetes-models/apps/v1/StatefulSet";
import { Job } from "kubernetes-models/batch/v1/Job";
import { ConfigMap } from "kubernetes-models/v1/ConfigMap";
import { PersistentVolumeClaim } from "kubernetes-models/v1/PersistentVolumeClaim";
import { Service } from "kubernetes-models/v1/Service";
import { afterAll, describe, expect, it } from "vitest";
import { parse, parseAllDocuments } from "yaml";
import { parseDuration } from "#sdk/cli/duration.js";
import {
  KubernetesDeploymentError,
  kubernetesManifests,
} from "#sdk/deployment/kubernetes/generate.js";
import { loadDeploymentFile } from "#sdk/deployment/load.js";
import { resolveDeployment } from "#sdk/deployment/resolve.js";
import { runGym } from "../../support/gym-in-process.js";

const ROOT = fileURLToPath(new URL("../../../", import.meta.url));
const DEPLOYMENT = "deploy/kubernetes/deployment.yaml";
const MANIFESTS = "deploy/kubernetes/manifests";
/** The flags `npm run kubernetes` passes (package.json), after the deployment file. */
const FLAGS = ["--tasks", "reference-servers/datasets/counter.jsonl", "--out", MANIFESTS];

const temp = mkdtempSync(path.join(tmpdir(), "gym-kubernetes-"));
afterAll(() => rmSync(temp, { recursive: true, force: true }));

type Manifest = {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; labels?: Record<string, string> };
  // The tests read what they check; the schema validation covers the shapes.
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  spec?: any;
  data?: Record<string, string>;
};

/** Every object of the kustomization in `dir`, with the file list it names. */
function readManifests(dir: string): { files: string[]; objects: Manifest[] } {
  const kustomization = parse(readFileSync(path.join(dir, "kustomization.yaml"), "utf8")) as {
    resources: string[];
  };
  const objects = kustomization.resources.flatMap((file) =>
    parseAllDocuments(readFileSync(path.join(dir, file), "utf8")).map(
      (doc) => doc.toJS() as Manifest,
    ),
  );
  return { files: kustomization.resources, objects };
}

const MODELS: Record<string, { new (data: never): { validate(): void } }> = {
  "apps/v1/StatefulSet": StatefulSet,
  "batch/v1/Job": Job,
  "v1/ConfigMap": ConfigMap,
  "v1/PersistentVolumeClaim": PersistentVolumeClaim,
  "v1/Service": Service,
};

/** Validates `object` against the Kubernetes schema of its kind; throws what is wrong. */
function validate(object: Manifest): void {
  const Model = MODELS[`${object.apiVersion}/${object.kind}`];
  if (Model === undefined) throw new Error(`no schema for ${object.apiVersion} ${object.kind}`);
  new Model(object as never).validate();
}

/**
 * What the manifests in `dir` get wrong about the deployment in `deploymentFile`, read
 * independently of the generator: [] when they agree.
 */
function disagreements(
  deploymentFile: string,
  dir: string,
  inPod = `/app/${DEPLOYMENT}`,
): string[] {
  const problems: string[] = [];
  const { objects } = readManifests(dir);
  const find = (kind: string, name: string): Manifest | undefined =>
    objects.find((object) => object.kind === kind && object.metadata.name === name);
  const config = objects.find((object) => object.kind === "ConfigMap");
  const claim = objects.find((object) => object.kind === "PersistentVolumeClaim");
  if (config === undefined || claim === undefined) return ["no ConfigMap or no claim"];
  if (!(claim.spec.accessModes as string[]).includes("ReadWriteMany")) {
    problems.push("the shared claim is not ReadWriteMany");
  }
  const pods = objects.filter((object) => object.kind === "StatefulSet" || object.kind === "Job");
  const containerOf = (object: Manifest) => object.spec.template.spec.containers[0];
  // The Secret keys the pods read; the deployment must load from them and the ConfigMap alone.
  const secretKeys = new Set<string>();
  for (const pod of pods) {
    for (const variable of containerOf(pod).env ?? []) {
      if (variable.valueFrom?.secretKeyRef !== undefined) {
        secretKeys.add(variable.valueFrom.secretKeyRef.key as string);
      }
    }
    const volumes = pod.spec.template.spec.volumes as {
      name: string;
      persistentVolumeClaim?: { claimName: string };
    }[];
    if (
      !volumes.some((volume) => volume.persistentVolumeClaim?.claimName === claim.metadata.name)
    ) {
      problems.push(`${pod.metadata.name} does not mount the shared claim`);
    }
  }
  const raw = parse(readFileSync(deploymentFile, "utf8")) as {
    checkpoint?: { control_auth_token?: string };
  };
  const token = /^\$\{(\w+)\}$/.exec(raw.checkpoint?.control_auth_token ?? "")?.[1];
  if (token === undefined || !secretKeys.has(token)) {
    problems.push(
      `the control token ${raw.checkpoint?.control_auth_token} is not read from the Secret`,
    );
  }
  const env = {
    ...config.data,
    ...Object.fromEntries([...secretKeys].map((key) => [key, "secret"])),
  };
  const loaded = loadDeploymentFile(deploymentFile, { env, checkEntrypoints: false });
  const resolved = resolveDeployment(loaded, {});
  const metricsPath = loaded.telemetry?.metrics_path ?? "/metrics";
  const names = new Set<string>();
  for (const server of Object.values(loaded.servers)) {
    const name = server.name.toLowerCase().replaceAll("_", "-");
    names.add(name);
    const service = find("Service", name);
    const set = find("StatefulSet", name);
    if (service === undefined || set === undefined) {
      problems.push(`${server.name}: no Service or no StatefulSet ${name}`);
      continue;
    }
    const port = server.port;
    if (service.spec.clusterIP !== "None") problems.push(`${name}: the Service is not headless`);
    if (service.spec.publishNotReadyAddresses !== true) {
      problems.push(`${name}: the Service hides the pod while it is not ready (every checkpoint)`);
    }
    if (service.spec.ports[0].port !== port || service.spec.ports[0].targetPort !== port) {
      problems.push(`${name}: Service port ${service.spec.ports[0].port}, the server's is ${port}`);
    }
    const podLabels = set.spec.template.metadata.labels as Record<string, string>;
    for (const [key, value] of Object.entries(service.spec.selector as Record<string, string>)) {
      if (podLabels[key] !== value) problems.push(`${name}: the Service selects no pod of it`);
    }
    if (set.spec.serviceName !== name || set.spec.replicas !== 1) {
      problems.push(`${name}: serviceName ${set.spec.serviceName}, replicas ${set.spec.replicas}`);
    }
    const container = containerOf(set);
    if (container.ports[0].containerPort !== port) {
      problems.push(
        `${name}: container port ${container.ports[0].containerPort}, the server's is ${port}`,
      );
    }
    const args = (container.args as string[]).slice(0, 4);
    if (args.join(" ") !== `serve ${inPod} --node ${server.node}`) {
      problems.push(`${name}: runs ${args.join(" ")}, not serve ${inPod} --node ${server.node}`);
    }
    for (const [probe, route] of [
      ["readinessProbe", "/ready"],
      ["livenessProbe", "/health"],
      ["startupProbe", "/health"],
    ] as const) {
      const get = container[probe]?.httpGet;
      if (get?.path !== route || get?.port !== port) {
        problems.push(
          `${name}: ${probe} GET ${get?.path} on ${get?.port}, not ${route} on ${port}`,
        );
      }
    }
    const annotations = set.spec.template.metadata.annotations as Record<string, string>;
    if (
      annotations["prometheus.io/port"] !== String(port) ||
      annotations["prometheus.io/path"] !== metricsPath
    ) {
      problems.push(
        `${name}: scraped at ${annotations["prometheus.io/port"]}${annotations["prometheus.io/path"]}`,
      );
    }
    // Others reach the server at its node's host: the Service's DNS name.
    const url = new URL(resolved.servers[server.name]?.url ?? "http://none");
    const namespace = service.metadata.namespace;
    if (url.hostname !== `${name}.${namespace}.svc` || url.port !== String(port)) {
      problems.push(
        `${name}: others reach it at ${url.host}, not its Service ${name}.${namespace}.svc:${port}`,
      );
    }
    const sleep = Number(container.lifecycle?.preStop?.exec?.command?.[1] ?? 0);
    if (set.spec.template.spec.terminationGracePeriodSeconds <= sleep + 15) {
      problems.push(`${name}: the grace period does not cover the drain and gym serve's own grace`);
    }
  }
  for (const set of objects.filter((object) => object.kind === "StatefulSet")) {
    if (!names.has(set.metadata.name)) problems.push(`${set.metadata.name}: no such server`);
  }
  const job = objects.find((object) => object.kind === "Job");
  if (job !== undefined) {
    const args = containerOf(job).args as string[];
    const step = parseDuration(args[args.indexOf("--step-timeout") + 1] ?? "60s", "") / 1000;
    if (!args.includes("--resume") || args[args.indexOf("--deployment") + 1] !== inPod) {
      problems.push(`the collector runs ${args.join(" ")}`);
    }
    const rules = job.spec.podFailurePolicy.rules as {
      action: string;
      onPodConditions?: { type: string }[];
    }[];
    if (
      !rules.some(
        (rule) =>
          rule.action === "Ignore" && rule.onPodConditions?.[0]?.type === "DisruptionTarget",
      )
    ) {
      problems.push("a disruption counts against the collector's backoffLimit");
    }
    if (job.spec.template.spec.terminationGracePeriodSeconds <= 2 * step) {
      problems.push("the collector's grace period is shorter than a prepare and a commit");
    }
  }
  return problems;
}

describe("gym kubernetes", () => {
  it("is in gym --help, with its options", async () => {
    const { code, out } = await runGym({ cwd: ROOT }, ["--help"]);
    expect(code).toBe(0);
    expect(out).toMatch(/^ {2}gym kubernetes <deployment> +write Kubernetes manifests/m);
    for (const option of ["--namespace <name>", "--image <image>", "--tasks <file>", "--check"]) {
      expect(out.slice(out.indexOf("gym kubernetes"))).toContain(option);
    }
  });

  it("a deployment file that does not exist is named, with what to do, and exits 1", async () => {
    const { code, err } = await runGym({ cwd: ROOT }, ["kubernetes", "no-such-deployment.yaml"]);
    expect(code).toBe(1);
    expect(err).toContain("no-such-deployment.yaml: no such file: check the path");
    expect(err).not.toMatch(/unexpected error|ENOENT/);
  });

  it("the committed manifests are what the deployment file generates", async () => {
    const { code, out, err } = await runGym({ cwd: ROOT }, [
      "kubernetes",
      DEPLOYMENT,
      ...FLAGS,
      "--check",
    ]);
    expect(err).toBe("");
    expect(code).toBe(0);
    expect(out).toContain("up to date");
    const script = (
      JSON.parse(readFileSync(path.join(ROOT, "package.json"), "utf8")) as {
        scripts: Record<string, string>;
      }
    ).scripts["kubernetes"];
    expect(script).toContain([DEPLOYMENT, ...FLAGS].join(" "));
  });

  it("--check fails on an edited, a missing or a leftover manifest", async () => {
    const out = path.join(temp, "check");
    cpSync(path.join(ROOT, MANIFESTS), out, { recursive: true });
    const flags = ["kubernetes", DEPLOYMENT, "--tasks", FLAGS[1] as string, "--out", out];
    // The header names the command, --out included: write once with this --out.
    expect((await runGym({ cwd: ROOT }, flags)).code).toBe(0);
    expect((await runGym({ cwd: ROOT }, [...flags, "--check"])).code).toBe(0);
    const file = path.join(out, "counter.yaml");
    writeFileSync(
      file,
      readFileSync(file, "utf8").replace("containerPort: 8002", "containerPort: 8003"),
    );
    writeFileSync(path.join(out, "old-server.yaml"), "{}\n");
    rmSync(path.join(out, "collect.yaml"));
    const { code, err } = await runGym({ cwd: ROOT }, [...flags, "--check"]);
    expect(code).toBe(1);
    expect(err).toMatch(/counter\.yaml\n/);
    expect(err).toMatch(/collect\.yaml \(missing\)/);
    expect(err).toMatch(/old-server\.yaml \(no longer generated\)/);
    expect(err).toMatch(/what to do: regenerate them with `gym kubernetes/);
  });

  it("every committed object is valid against the Kubernetes schemas", () => {
    const { files, objects } = readManifests(path.join(ROOT, MANIFESTS));
    expect(files.sort()).toEqual(
      readdirSync(path.join(ROOT, MANIFESTS))
        .filter((file) => file !== "kustomization.yaml")
        .sort(),
    );
    expect(objects.map((object) => object.kind).sort()).toEqual(
      [
        "ConfigMap",
        "Job",
        "PersistentVolumeClaim",
        ...Array<string>(7).fill("Service"),
        ...Array<string>(7).fill("StatefulSet"),
      ].sort(),
    );
    for (const object of objects) {
      expect(() => validate(object), `${object.kind} ${object.metadata.name}`).not.toThrow();
    }
    // The validation has teeth: a port given as text is refused.
    const service = objects.find((object) => object.kind === "Service") as Manifest;
    const broken = structuredClone(service);
    broken.spec.ports[0].port = "8000";
    expect(() => validate(broken)).toThrow(/port must be integer/);
  });

  it("the committed manifests agree with the deployment file", () => {
    expect(disagreements(path.join(ROOT, DEPLOYMENT), path.join(ROOT, MANIFESTS))).toEqual([]);
  });

  it("a port changed in the deployment file but not in the manifests is found", () => {
    const changed = path.join(temp, "deployment.yaml");
    const text = readFileSync(path.join(ROOT, DEPLOYMENT), "utf8");
    writeFileSync(changed, text.replace("port: 8002", "port: 8012"));
    expect(disagreements(changed, path.join(ROOT, MANIFESTS))).toEqual([
      "counter: Service port 8002, the server's is 8012",
      "counter: container port 8002, the server's is 8012",
      "counter: readinessProbe GET /ready on 8002, not /ready on 8012",
      "counter: livenessProbe GET /health on 8002, not /health on 8012",
      "counter: startupProbe GET /health on 8002, not /health on 8012",
      "counter: scraped at 8002/metrics",
    ]);
    // A node renamed in the file: the pod still starts the old one.
    writeFileSync(
      changed,
      text
        .replaceAll("node: counter\n", "node: tally\n")
        .replace("  counter:\n    host:", "  tally:\n    host:"),
    );
    expect(disagreements(changed, path.join(ROOT, MANIFESTS))).toEqual([
      "counter: runs serve /app/deploy/kubernetes/deployment.yaml --node counter, not serve /app/deploy/kubernetes/deployment.yaml --node tally",
    ]);
  });

  describe("refuses a deployment that cannot run as generated", () => {
    /** The problems the generator names for `text`, as a deployment file in the temp folder. */
    function refusal(text: string): string {
      const file = path.join(temp, "refused.yaml");
      writeFileSync(file, text);
      try {
        kubernetesManifests({ deploymentFile: file, cwd: temp });
      } catch (error) {
        if (error instanceof KubernetesDeploymentError) return error.message;
        throw error;
      }
      throw new Error("generated manifests");
    }
    const server = (name: string, node: string, extra = "host: 0.0.0.0") =>
      `  ${name}:\n    kind: resources\n    entrypoint: x.js\n    node: ${node}\n    port: 8000\n    ${extra}\n`;

    it("without nodes, or with two servers on one node", () => {
      expect(refusal("servers:\n  counter:\n    kind: resources\n    entrypoint: x.js\n")).toMatch(
        /no nodes: block: on Kubernetes each server runs on its own node/,
      );
      expect(
        refusal(
          "nodes:\n  a:\n    host: ${GYM_NODE_A_HOST}\nservers:\n" +
            server("one", "a") +
            server("two", "a").replace("8000", "8001"),
        ),
      ).toMatch(/refused\.yaml:2: node a runs one, two: on Kubernetes each server is its own node/);
    });

    it("a node host the manifests do not set, a server bound to one address", () => {
      const message = refusal(
        "nodes:\n  a:\n    host: 10.0.0.5\nservers:\n" + server("one", "a", "host: 127.0.0.1"),
      );
      expect(message).toMatch(
        /:3: node a's host is 10\.0\.0\.5, but other pods reach it at its Service, one\.gym\.svc: write host: \$\{GYM_NODE_A_HOST\}/,
      );
      expect(message).toMatch(
        /:5: server one binds 127\.0\.0\.1: in a pod it binds every interface/,
      );
    });

    it("a literal control token, a server name Kubernetes cannot take, mutual TLS", () => {
      const message = refusal(
        "checkpoint:\n  enabled: true\n  control_auth_token: ${GYM_CONTROL_TOKEN:-reference-token}\n" +
          "tls:\n  cert_file: c.pem\n  key_file: k.pem\n  client_ca_file: ca.pem\n" +
          "nodes:\n  a:\n    host: ${GYM_NODE_A_HOST}\nservers:\n" +
          server("9lives", "a"),
      );
      expect(message).toMatch(
        /:3: checkpoint\.control_auth_token must come from the Secret gym-secrets/,
      );
      expect(message).toMatch(/:7: tls\.client_ca_file \(mutual TLS\) is not supported/);
      expect(message).toMatch(/server 9lives has no Kubernetes name/);
    });
  });

  it("the Dockerfile copies what the pods run (it is not built here)", () => {
    const text = readFileSync(path.join(ROOT, "deploy/kubernetes/Dockerfile"), "utf8");
    const stages = text.split(/^FROM /m).slice(1);
    expect(stages.map((stage) => stage.split("\n")[0])).toEqual([
      "node:20-slim AS build",
      "node:20-slim AS runtime",
    ]);
    const [build = "", runtime = ""] = stages;
    /** What a stage copies before its `npm ci`, and after it. */
    const copies = (stage: string) => {
      const [before = "", after = ""] = stage.split(/^RUN npm ci/m);
      const sources = (part: string) =>
        [...part.matchAll(/^COPY (?:--from=build )?(\S+)/gm)].map((match) =>
          (match[1] as string).replace(/^\/app\//, ""),
        );
      return { before: sources(before), after: sources(after) };
    };
    const root = JSON.parse(readFileSync(path.join(ROOT, "package.json"), "utf8")) as {
      workspaces: string[];
    };
    const workspaces = root.workspaces.flatMap((pattern) =>
      pattern.endsWith("/*")
        ? readdirSync(path.join(ROOT, pattern.slice(0, -2)))
            .map((dir) => `${pattern.slice(0, -2)}/${dir}`)
            .filter((dir) => existsSync(path.join(ROOT, dir, "package.json")))
        : [pattern],
    );
    // npm ci needs every workspace's package.json, in both stages.
    for (const stage of [build, runtime]) {
      for (const workspace of workspaces) {
        expect(copies(stage).before).toContain(`${workspace}/package.json`);
      }
    }
    const runtimeCopies = [...copies(runtime).before, ...copies(runtime).after];
    expect(runtimeCopies).toContain("sdk/bin");
    expect(runtimeCopies).toContain("sdk/dist");
    expect(runtimeCopies).toContain(DEPLOYMENT);
    expect(runtimeCopies).toContain(path.dirname(FLAGS[1] as string));
    const loaded = loadDeploymentFile(path.join(ROOT, DEPLOYMENT), {
      env: {
        ...readManifests(path.join(ROOT, MANIFESTS)).objects.find((o) => o.kind === "ConfigMap")
          ?.data,
        GYM_CONTROL_TOKEN: "x",
      },
      checkEntrypoints: false,
    });
    for (const server of Object.values(loaded.servers)) {
      const dir = path.relative(ROOT, server.entrypoint).split(path.sep).join("/");
      expect(runtimeCopies, server.name).toContain(`${dir}/dist`);
    }
    expect(runtime).toMatch(/^USER node$/m);
    expect(runtime).not.toMatch(/^COPY (--from=build )?(\/app\/)?\.\s/m);
  });
});
