/**
 * `gym kubernetes <deployment> [--out DIR] [--check]`: writes (or checks) the Kubernetes
 * manifests generated from a deployment file (see `deployment/kubernetes`), with the
 * kustomization that lists them.
 *
 * @see docs/kubernetes.md
 */
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { mkdir, writeFile } from "node:fs/promises";
import path from "node:path";
import {
  KubernetesDeploymentError,
  SECRET_NAME,
  kubernetesManifests,
} from "../deployment/kubernetes/generate.js";
import { parseDuration } from "./duration.js";
import { CliError, UsageError, commandOf, shownPath, type Io } from "./output.js";

/** The flags of `gym kubernetes`, as commander parses them. */
export interface KubernetesFlags {
  readonly namespace?: string;
  readonly image?: string;
  readonly out?: string;
  readonly tasks?: string;
  readonly appDir?: string;
  readonly storage?: string;
  readonly storageClass?: string;
  readonly stepTimeout?: string;
  readonly check?: boolean;
}

/** The command line that regenerates the files: the flags given, in a fixed order. */
function regenerateCommand(deployment: string, flags: KubernetesFlags): string {
  const parts = ["gym kubernetes", deployment];
  const add = (flag: string, value: string | undefined): void => {
    if (value !== undefined) parts.push(flag, value);
  };
  add("--namespace", flags.namespace);
  add("--image", flags.image);
  add("--tasks", flags.tasks);
  add("--app-dir", flags.appDir);
  add("--storage", flags.storage);
  add("--storage-class", flags.storageClass);
  add("--step-timeout", flags.stepTimeout);
  add("--out", flags.out);
  return parts.join(" ");
}

/** `gym kubernetes`; returns the exit status (1 when `--check` finds a stale file). */
export async function kubernetesCommand(
  deployment: string,
  flags: KubernetesFlags,
  io: Io,
): Promise<number> {
  let stepSeconds: number | undefined;
  if (flags.stepTimeout !== undefined) {
    const ms = parseDuration(flags.stepTimeout, "--step-timeout");
    if (ms < 1000 || ms % 1000 !== 0) {
      throw new UsageError(
        "--step-timeout must be a whole number of seconds",
        "e.g. --step-timeout 60s",
      );
    }
    stepSeconds = ms / 1000;
  }
  if (flags.tasks !== undefined && !existsSync(path.resolve(io.cwd, flags.tasks))) {
    throw new UsageError(
      `--tasks ${flags.tasks}: no such file`,
      "name the JSON Lines task file the image holds (relative to this directory)",
    );
  }
  if (flags.appDir !== undefined && !path.posix.isAbsolute(flags.appDir)) {
    throw new UsageError(
      `--app-dir ${flags.appDir} is not an absolute path`,
      "e.g. --app-dir /app",
    );
  }
  const command = regenerateCommand(deployment, flags);
  let manifests;
  try {
    manifests = kubernetesManifests({
      deploymentFile: deployment,
      cwd: io.cwd,
      command,
      ...(flags.namespace === undefined ? {} : { namespace: flags.namespace }),
      ...(flags.image === undefined ? {} : { image: flags.image }),
      ...(flags.appDir === undefined ? {} : { appDir: flags.appDir }),
      ...(flags.tasks === undefined ? {} : { tasksFile: flags.tasks }),
      ...(flags.storage === undefined ? {} : { storage: flags.storage }),
      ...(flags.storageClass === undefined ? {} : { storageClass: flags.storageClass }),
      ...(stepSeconds === undefined ? {} : { stepTimeoutSeconds: stepSeconds }),
    });
  } catch (error) {
    if (error instanceof KubernetesDeploymentError) {
      throw new CliError(
        error.message,
        "change the deployment file as each line says (see docs/kubernetes.md)",
        undefined,
        {
          cause: error,
        },
      );
    }
    throw error;
  }

  const out = path.resolve(io.cwd, flags.out ?? "kubernetes");
  const generated = new Set(manifests.files.map((file) => file.file));
  if (flags.check === true) {
    const stale: string[] = [];
    for (const file of manifests.files) {
      const target = path.join(out, file.file);
      const committed = existsSync(target) ? readFileSync(target, "utf8") : null;
      if (committed !== file.text)
        stale.push(`${shownPath(io, target)}${committed === null ? " (missing)" : ""}`);
    }
    const extra = existsSync(out)
      ? readdirSync(out).filter((file) => file.endsWith(".yaml") && !generated.has(file))
      : [];
    for (const file of extra)
      stale.push(`${shownPath(io, path.join(out, file))} (no longer generated)`);
    if (stale.length > 0) {
      throw new CliError(
        `stale Kubernetes manifests:\n${stale.map((file) => `  - ${file}`).join("\n")}`,
        `regenerate them with \`${command.replace(/^gym/, commandOf(io))}\``,
      );
    }
    io.out(`kubernetes manifests in ${shownPath(io, out)} are up to date`);
    return 0;
  }
  await mkdir(out, { recursive: true });
  for (const file of manifests.files) {
    const target = path.join(out, file.file);
    await writeFile(target, file.text, "utf8");
    io.out(`wrote ${shownPath(io, target)}`);
  }
  const leftovers = readdirSync(out).filter(
    (file) => file.endsWith(".yaml") && !generated.has(file),
  );
  for (const file of leftovers) {
    io.err(`gym: ${shownPath(io, path.join(out, file))} is no longer generated: remove it`);
  }
  if (manifests.secretKeys.length > 0) {
    const namespace = flags.namespace ?? "gym";
    const literals = manifests.secretKeys
      .map((key) => `--from-literal=${key}="$(openssl rand -hex 32)"`)
      .join(" ");
    io.out(
      `\nthe pods read ${manifests.secretKeys.join(", ")} from the Secret ${SECRET_NAME}; create it first:\n` +
        `  kubectl create secret generic ${SECRET_NAME} -n ${namespace} ${literals}\n` +
        `then: kubectl apply -k ${shownPath(io, out)}`,
    );
  }
  return 0;
}
