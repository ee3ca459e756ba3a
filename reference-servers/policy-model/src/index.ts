/**
 * The reference policy model server: `PolicyModelServer` as configured, in front of an
 * inference backend speaking chat completions (the fake inference backend in the reference
 * deployment). Configure it in the deployment file:
 *
 * ```yaml
 * policy:
 *   kind: model
 *   entrypoint: policy-model/src/index.ts
 *   config:
 *     backend_server: inference
 *     capture_dir: .gym/capture
 *     checkpoint_generation_cuts: true
 * ```
 *
 * See docs/policy-model.md.
 */
import { PolicyModelServer, isMainModule, serveMain } from "gym-participant-sdk";

export default class PolicyModel extends PolicyModelServer {}

if (isMainModule(import.meta.url)) await serveMain(PolicyModel);
