/**
 * Reads a variable and removes it from `env`, so what this process starts next (and any code
 * that dumps its environment) does not see it.
 */
export function takeEnv(env: NodeJS.ProcessEnv, name: string): string | undefined {
  const value = env[name];
  delete env[name];
  return value === "" ? undefined : value;
}
