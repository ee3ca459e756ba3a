#!/usr/bin/env node
/**
 * `npm run build`: every package of the repository, incrementally (TypeScript project
 * references, `tsconfig.build.json`), one line per project as it builds. A project whose
 * sources, settings and upstream declarations are unchanged since its last build is skipped, so
 * a build with nothing changed only reads the build-info files and prints one line.
 *
 * Plain JavaScript on purpose: it runs before anything is compiled and without tsx's start-up.
 */
import path from "node:path";
import { performance } from "node:perf_hooks";
import process from "node:process";
import { fileURLToPath } from "node:url";
import ts from "typescript";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const SOLUTION = path.join(ROOT, "tsconfig.build.json");

const started = performance.now();
const formatHost = {
  getCanonicalFileName: (file) => file,
  getCurrentDirectory: () => ROOT,
  getNewLine: () => "\n",
};
let errors = 0;
const reportDiagnostic = (diagnostic) => {
  if (diagnostic.category === ts.DiagnosticCategory.Error) errors++;
  const format = process.stderr.isTTY
    ? ts.formatDiagnosticsWithColorAndContext
    : ts.formatDiagnostics;
  process.stderr.write(format([diagnostic], formatHost));
};
// Status lines ("Building project …") are what --verbose prints; the loop below says it shorter.
const reportStatus = () => {};

const host = ts.createSolutionBuilderHost(
  ts.sys,
  ts.createSemanticDiagnosticsBuilderProgram,
  reportDiagnostic,
  reportStatus,
);
const builder = ts.createSolutionBuilder(host, [SOLUTION], {});

/** The project's directory relative to the repository, e.g. `reference-servers/counter`. */
function projectName(configFile) {
  return path.relative(ROOT, path.dirname(configFile)) || ".";
}

function seconds(ms) {
  return `${(ms / 1000).toFixed(1)} s`;
}

let built = 0;
let failed = 0;
for (let project = builder.getNextInvalidatedProject(); project !== undefined;) {
  const name = projectName(project.project);
  const onlyStamps = project.kind === ts.InvalidatedProjectKind.UpdateOutputFileStamps;
  const t0 = performance.now();
  if (!onlyStamps) process.stdout.write(`build: ${name} …`);
  const before = errors;
  const status = project.done();
  if (!onlyStamps) {
    const ok = status === ts.ExitStatus.Success && errors === before;
    process.stdout.write(` ${ok ? seconds(performance.now() - t0) : "failed"}\n`);
    if (ok) built++;
    else failed++;
  }
  project = builder.getNextInvalidatedProject();
}

const total = seconds(performance.now() - started);
if (failed > 0) {
  process.stderr.write(`build: ${failed} project(s) failed (${total})\n`);
  process.exitCode = 1;
} else if (built === 0) {
  process.stdout.write(`build: up to date (${total})\n`);
} else {
  process.stdout.write(`build: ${built} project(s) built in ${total}\n`);
}
