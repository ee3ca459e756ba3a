/**
 * `gym-participant-sdk/testing`: a test kit for authors of gym servers. Start a server in
 * process, drive prepare, commit, restore into a fresh instance, retire and forget against its
 * real control routes, read its committed records, and run whole episodes with a checkpoint
 * and restore at every boundary so state a hook forgets shows up as a failing test.
 *
 * @example
 * import { startTestServer } from "gym-participant-sdk/testing";
 * const counter = await startTestServer(CounterServer, { checkpointEvery: "boundary" });
 * await counter.request("/seed_session", { target: 2 }, { rollout: "ep1" }); // then a restore
 *
 * @see docs/getting-started.md
 *
 * @packageDocumentation
 */
export { startTestServer, TestServer } from "./test-server.js";
export type {
  CommitResult,
  EpisodeRef,
  RequestOptions,
  TestServerOptions,
  TestableServer,
  TestableServerClass,
} from "./test-server.js";
export type { TestReply } from "./bounded-fetch.js";
export { TestKitError } from "./test-kit-error.js";
export { TestEnvironment } from "./environment.js";
