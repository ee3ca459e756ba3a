/**
 * The crash-and-continue scenario of `crash-continue.test.ts`, with two worker processes on
 * every environment, agent and resources server: sessions live on the worker that made them
 * and are restored onto the new workers by owner; restored episodes wait at each environment's
 * coordinator until the worker receiving the replacement `/run` claims them; an unclaimed one is
 * checkpointed again. Every assertion of the scenario holds unchanged.
 */
process.env.GYM_E2E_NUM_WORKERS = "2";
try {
  await import("./crash-continue.test.js");
} finally {
  delete process.env.GYM_E2E_NUM_WORKERS;
}
