/**
 * The deployment file as a library: load and check it ({@link loadDeploymentFile}), then resolve
 * it for the server processes ({@link resolveDeployment}). It knows nothing of the `gym`
 * command, which adds its own advice to a {@link DeploymentFileError}.
 *
 * @see docs/deployment.md
 */
export { EntrypointError, resolveEntrypoint } from "./entrypoint.js";
export { DeploymentFileError } from "./errors.js";
export type { DeploymentProblem } from "./errors.js";
export { expandVariables } from "./expand.js";
export type { Expansion } from "./expand.js";
export { loadDeploymentFile } from "./load.js";
export type { LoadOptions, LoadedDeployment, LoadedServer } from "./load.js";
export { resolveDeployment, serverUrl } from "./resolve.js";
