/**
 * The process `gym serve` starts for each server:
 * `node [--import tsx] server-process.js --deployment FILE --name NAME --entrypoint MODULE`.
 */
import { runServerProcess } from "./run-server.js";

await runServerProcess(process.argv.slice(2));
