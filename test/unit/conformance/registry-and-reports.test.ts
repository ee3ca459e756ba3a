/**
 * The conformance kit's registry and reports, without a server: every requirement names a docs
 * section that exists, selection by ID and group, expected failures (stale entries fail the run),
 * the JUnit form, and the CLI's usage errors.
 */
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import {
  applyExpectedFailures,
  ExpectedFailuresError,
  parseExpectedFailures,
} from "#sdk/conformance/expected-failures.js";
import { REQUIREMENTS, selectRequirements, unknownSelector } from "#sdk/conformance/registry.js";
import { reportJunit, reportTable } from "#sdk/conformance/report.js";
import type { ConformanceReport, RequirementResult } from "#sdk/conformance/runner.js";
import { runGym } from "../../support/gym-in-process.js";

const ROOT = fileURLToPath(new URL("../../../", import.meta.url));

/** GitHub's anchor of a heading: lower case, punctuation dropped, spaces as dashes. */
function anchorOf(heading: string): string {
  return heading
    .toLowerCase()
    .replace(/[^a-z0-9 _-]/g, "")
    .replace(/ /g, "-");
}

function result(id: string, outcome: RequirementResult["result"]): RequirementResult {
  return {
    id,
    group: id,
    title: id,
    docs: "docs/x.md#y",
    result: outcome,
    reason: outcome === "pass" ? null : "why",
    ms: 3,
  };
}

describe("the requirement registry", () => {
  it("gives every requirement a unique dotted ID and a docs section that exists", () => {
    const ids = REQUIREMENTS.map((r) => r.id);
    expect(new Set(ids).size).toBe(ids.length);
    for (const requirement of REQUIREMENTS) {
      expect(requirement.id).toMatch(
        /^(core|resources|crash|agent|environment|model)\.[a-z-]+\.[a-z0-9-]+$/,
      );
      const [page, anchor] = requirement.docs.split("#") as [string, string];
      const headings = readFileSync(`${ROOT}${page}`, "utf8")
        .split("\n")
        .filter((line) => line.startsWith("#"))
        .map((line) => anchorOf(line.replace(/^#+\s*/, "")));
      expect(headings, `${requirement.id} cites ${requirement.docs}`).toContain(anchor);
    }
  });

  it("selects by ID or group, and leaves out what --skip names", () => {
    const auth = selectRequirements(["core.auth"], []).map((r) => r.id);
    expect(auth).toEqual(["core.auth.required", "core.auth.before-body"]);
    const noResources = selectRequirements([], ["resources"]);
    expect(noResources.some((r) => r.id.startsWith("resources."))).toBe(false);
    expect(unknownSelector(["core.auth", "core.nope"])).toBe("core.nope");
    // A prefix that is not a whole segment names nothing.
    expect(unknownSelector(["core.au"])).toBe("core.au");
  });
});

describe("expected failures", () => {
  const known = ["core.auth.required", "core.phase.cycle"];

  it("turns a listed failure into an expected one and a listed pass into a stale entry", () => {
    const expected = parseExpectedFailures(
      "# gaps\ncore.auth.required  checks the token late\n",
      known,
    );
    expect(applyExpectedFailures(result("core.auth.required", "fail"), expected).result).toBe(
      "expected-fail",
    );
    expect(applyExpectedFailures(result("core.auth.required", "pass"), expected).result).toBe(
      "stale",
    );
    expect(applyExpectedFailures(result("core.phase.cycle", "fail"), expected).result).toBe("fail");
  });

  it("refuses an ID the kit does not have, naming the line", () => {
    expect(() => parseExpectedFailures("core.phase.cycle\ncore.typo\n", known)).toThrow(
      ExpectedFailuresError,
    );
    expect(() => parseExpectedFailures("core.typo\n", known)).toThrow(/line 1/);
  });
});

describe("the reports", () => {
  const report: ConformanceReport = {
    url: "http://127.0.0.1:1",
    profile: { kind: "resources", instance: "x", mode: "exported", verify: "wait", workers: 1 },
    declared: "resources 'x'",
    seed: 42,
    results: [
      result("core.a.b", "pass"),
      result("core.a.c", "fail"),
      result("core.a.d", "skip"),
      result("core.a.e", "stale"),
    ],
    passed: false,
  };

  it("writes one JUnit test case per requirement, failures and stale entries as failures", () => {
    const xml = reportJunit(report);
    expect(xml.match(/<testcase /g)).toHaveLength(4);
    expect(xml).toContain('failures="2"');
    expect(xml.match(/<failure /g)).toHaveLength(2);
    expect(xml.match(/<skipped /g)).toHaveLength(1);
  });

  it("ends the table with the verdict and the seed's replay command", () => {
    const text = reportTable(report, "gym conformance http://127.0.0.1:1 --seed 42");
    expect(text).toMatch(/core\.a\.c\s+FAIL\s+why\s+docs\/x\.md#y/);
    expect(text).toContain(
      "does not conform: 1 passed, 1 failed, 1 skipped, 1 stale expected failures",
    );
    expect(text).toContain("seed 42; replay: gym conformance http://127.0.0.1:1 --seed 42");
  });
});

describe("gym conformance: usage", () => {
  const gym = (...argv: string[]) => runGym({ cwd: ROOT }, argv);

  it("refuses a URL that is not http(s), an unknown kind and a missing token with exit 2", async () => {
    expect((await gym("conformance", "localhost:8000", "--token", "t")).code).toBe(2);
    expect(
      (await gym("conformance", "http://127.0.0.1:1", "--token", "t", "--kind", "robot")).code,
    ).toBe(2);
    const untokened = await gym("conformance", "http://127.0.0.1:1");
    expect(untokened.code).toBe(2);
    expect(untokened.err).toContain("GYM_CONTROL_TOKEN");
    expect(
      (await gym("conformance", "http://127.0.0.1:1", "--token", "t", "--only", "core.nope")).code,
    ).toBe(2);
  });

  it("exits 1 with what to do when the server cannot be reached", async () => {
    const { code, err } = await gym("conformance", "http://127.0.0.1:1", "--token", "t");
    expect(code).toBe(1);
    expect(err).toMatch(/cannot reach/);
    expect(err).toMatch(/what to do:/);
  });

  it("lists every requirement with --list", async () => {
    const { code, out } = await gym("conformance", "--list");
    expect(code).toBe(0);
    for (const requirement of REQUIREMENTS) expect(out).toContain(requirement.id);
  });
});
