/**
 * The background process `gym serve --detach` leaves behind: it starts the servers of a plan,
 * reports to `gym serve` over IPC, then stays their parent until they have all exited.
 */
import { runSupervisorProcess } from "./supervisor.js";

const code = await runSupervisorProcess(process.argv.slice(2));
process.exitCode = code;
// Every server has exited; should a stray handle remain, do not hang on it.
setTimeout(() => process.exit(code), 3_000).unref();
