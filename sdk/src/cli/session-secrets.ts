/**
 * How a configured session secret reaches its server's process, and only that process: through
 * the environment `gym serve` starts it with, never through the resolved deployment (which every
 * server reads and which is kept on disk) nor through a plan file or a command line.
 *
 * @see docs/deployment.md
 */
import type { LoadedDeployment } from "../deployment/load.js";
import { takeEnv } from "../util/take-env.js";

/** The variable a server process reads its session secret from (`gym serve`, `serveMain`). */
export const SESSION_SECRET_ENV = "GYM_SESSION_SECRET";
/** The variable `gym serve --detach` hands its supervisor every server's secret in (JSON). */
export const SESSION_SECRETS_ENV = "GYM_SESSION_SECRETS";

/** The configured session secrets by server name (servers without one are left out). */
export type SessionSecrets = Readonly<Record<string, string>>;

/** The session secrets the deployment file configures for `names`. */
export function sessionSecretsOf(
  loaded: LoadedDeployment,
  names: readonly string[],
): SessionSecrets {
  const secrets: Record<string, string> = {};
  for (const name of names) {
    const secret = loaded.servers[name]?.session_secret ?? null;
    if (secret !== null) secrets[name] = secret;
  }
  return secrets;
}

export { takeEnv };

/** The environment of the detached supervisor: `base` plus every server's secret. */
export function supervisorEnv(base: NodeJS.ProcessEnv, secrets: SessionSecrets): NodeJS.ProcessEnv {
  const env = withoutSecrets(base);
  if (Object.keys(secrets).length > 0) env[SESSION_SECRETS_ENV] = JSON.stringify(secrets);
  return env;
}

/** The secrets the detached supervisor was handed, taken out of its environment. */
export function takeSupervisorSecrets(env: NodeJS.ProcessEnv): SessionSecrets {
  const text = takeEnv(env, SESSION_SECRETS_ENV);
  if (text === undefined) return {};
  const value = JSON.parse(text) as unknown;
  const secrets: Record<string, string> = {};
  if (typeof value === "object" && value !== null) {
    for (const [name, secret] of Object.entries(value)) {
      if (typeof secret === "string") secrets[name] = secret;
    }
  }
  return secrets;
}

/**
 * The environment of one server's process: `base` plus its own secret, if any. An inherited
 * secret is dropped, so only the deployment file decides.
 */
export function serverEnv(base: NodeJS.ProcessEnv, secret: string | undefined): NodeJS.ProcessEnv {
  const env = withoutSecrets(base);
  if (secret !== undefined) env[SESSION_SECRET_ENV] = secret;
  return env;
}

function withoutSecrets(base: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  const env = { ...base };
  delete env[SESSION_SECRET_ENV];
  delete env[SESSION_SECRETS_ENV];
  return env;
}
