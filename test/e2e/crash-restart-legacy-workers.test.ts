/**
 * The restart, retire and legacy `/run` scenario of `crash-restart-legacy.test.ts`, with two
 * worker processes on every environment, agent and resources server: a legacy `/run`'s
 * self-dispatched turn loop comes back to the worker running it (`x-ng-session-owner` on the
 * agent's calls to itself), and a restored legacy run waits at the agent's coordinator until
 * the worker receiving its replacement `/run` claims it.
 */
process.env.GYM_E2E_NUM_WORKERS = "2";
try {
  await import("./crash-restart-legacy.test.js");
} finally {
  delete process.env.GYM_E2E_NUM_WORKERS;
}
