import { asCliError } from "#sdk/cli/output.js";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import fc from "fast-check";
import { problemsOf, writeDeploymentFile } from "../../support/deployment-files.js";
import { afterAll, describe, expect, it } from "vitest";
import {
  DeploymentFileError,
  EntrypointError,
  expandVariables,
  loadDeploymentFile,
  resolveDeployment,
  resolveEntrypoint,
  serverUrl,
} from "#sdk/deployment/index.js";
import { ResolvedDeploymentSchema } from "#sdk/wire/deployment.js";

const FIXTURES = fileURLToPath(new URL("../../fixtures/", import.meta.url));
const DEPLOYMENTS = path.join(FIXTURES, "deployments");
const SERVERS = path.join(FIXTURES, "servers");

const temp = mkdtempSync(path.join(tmpdir(), "gym-deployment-file-"));
afterAll(() => rmSync(temp, { recursive: true, force: true }));

/** Writes a deployment file in a fresh directory holding a server module `srv.ts`. */
const deploymentFile = (text: string, name?: string): string =>
  writeDeploymentFile(temp, text, name);

describe("loading the fixture deployments", () => {
  it("loads the good deployment with its entrypoints resolved next to the file", () => {
    const loaded = loadDeploymentFile(path.join(DEPLOYMENTS, "good.yaml"), { env: {} });
    expect(Object.keys(loaded.servers)).toEqual(["counter", "echo"]);
    expect(loaded.checkpoint).toEqual({
      enabled: true,
      control_auth_token: "fixture-token",
      lease_grace_seconds: 600,
    });
    expect(loaded.servers.counter?.entrypoint).toBe(path.join(SERVERS, "episodes-resources.ts"));
    expect(loaded.servers.counter).toMatchObject({
      kind: "resources",
      host: "127.0.0.1",
      port: 0,
      num_workers: 1,
      line: 7,
    });
    expect(loaded.servers.echo?.line).toBe(13);
    expect(loaded.servers.echo?.node_args).toEqual(["--max-old-space-size=256"]);
    expect(loaded.servers.counter?.node_args).toEqual([]);
  });

  it("loads JSON deployment files too", () => {
    const loaded = loadDeploymentFile(path.join(DEPLOYMENTS, "good.json"), { env: {} });
    expect(loaded.checkpoint).toBeNull();
    expect(loaded.servers.echo?.kind).toBe("backend");
  });

  it("expands the token from the environment", () => {
    const loaded = loadDeploymentFile(path.join(DEPLOYMENTS, "good.yaml"), {
      env: { GYM_TEST_CONTROL_TOKEN: "from-env" },
    });
    expect(loaded.checkpoint?.control_auth_token).toBe("from-env");
  });

  it.each([
    ["bad-unknown-key.yaml", 8, /unknown key 'prot' in server counter.*allowed: kind, entrypoint/],
    ["bad-duplicate-name.yaml", 11, /duplicate server name 'counter' \(first defined on line 5\)/],
    [
      "bad-dangling-reference.yaml",
      10,
      /servers\.counter\.config\.backend_server names server 'policy', which this deployment does not define/,
    ],
    ["bad-kind.yaml", 6, /bad kind "database" for server echo: use one of environment, agent/],
    ["bad-missing-token.yaml", 1, /checkpoint\.control_auth_token is required/],
  ])("%s: names line %i and what is wrong", (name, line, message) => {
    const problems = problemsOf(path.join(DEPLOYMENTS, name));
    expect(problems).toHaveLength(1);
    expect(problems[0]?.line).toBe(line);
    expect(problems[0]?.message).toMatch(message);
  });

  it("formats every problem as file:line and ends with what to do", () => {
    const file = path.join(DEPLOYMENTS, "bad-kind.yaml");
    try {
      loadDeploymentFile(file, { env: {} });
      expect.unreachable();
    } catch (error) {
      expect(error).toBeInstanceOf(DeploymentFileError);
      expect((error as Error).message).toContain(`${file}:6: bad kind`);
      expect((error as Error).message).toContain("nothing was started");
      // The gym command reports it with what to do.
      const failure = asCliError(error);
      expect(failure?.message).toBe((error as Error).message);
      expect(failure?.hint).toMatch(/fix what each line above names/);
      expect(failure?.exitCode).toBe(1);
    }
  });
});

describe("a blank control token", () => {
  it("is refused at load, not only at startup, naming the key", () => {
    const file = deploymentFile(
      [
        "checkpoint:",
        "  enabled: true",
        '  control_auth_token: "   "',
        "servers:",
        "  a:",
        "    kind: agent",
        "    entrypoint: ./srv.ts",
      ].join("\n"),
    );
    const problems = problemsOf(file);
    expect(problems).toHaveLength(1);
    expect(problems[0]?.path).toBe("checkpoint.control_auth_token");
    expect(problems[0]?.message).toMatch(/not blank \(empty or whitespace only\)/);
  });
});

describe("a server's session secret", () => {
  const SECRET = "a-long-random-session-secret-42";
  const withSecret = (value: string) =>
    deploymentFile(
      [
        "servers:",
        "  a:",
        "    kind: resources",
        "    entrypoint: ./srv.ts",
        `    session_secret: ${value}`,
      ].join("\n"),
    );

  it("is read from the environment, kept on the loaded server, and left out of the resolved deployment", () => {
    const file = withSecret('"${GYM_TEST_SESSION_SECRET}"');
    const loaded = loadDeploymentFile(file, { env: { GYM_TEST_SESSION_SECRET: SECRET } });
    expect(loaded.servers.a?.session_secret).toBe(SECRET);
    const resolved = resolveDeployment(loaded, { a: 8100 });
    expect(JSON.stringify(resolved)).not.toContain(SECRET);
    expect(ResolvedDeploymentSchema.parse(resolved).servers.a).not.toHaveProperty("session_secret");
  });

  it("defaults to none", () => {
    const file = deploymentFile(
      ["servers:", "  a:", "    kind: resources", "    entrypoint: ./srv.ts"].join("\n"),
    );
    expect(loadDeploymentFile(file, { env: {} }).servers.a?.session_secret).toBeNull();
  });

  it("is refused when blank, naming the key and never the value", () => {
    const problems = problemsOf(withSecret('"   "'));
    expect(problems).toHaveLength(1);
    expect(problems[0]?.path).toBe("servers.a.session_secret");
    expect(problems[0]?.message).toMatch(/must not be blank/);
    const numeric = problemsOf(withSecret("${GYM_TEST_SESSION_SECRET}"), {
      GYM_TEST_SESSION_SECRET: "987654321987",
    });
    expect(numeric[0]?.message).toMatch(/quote it/);
    expect(numeric[0]?.message).not.toContain("987654321987");
  });
});

describe("problems and their lines", () => {
  it("reports every problem of a file at once, each on its own line", () => {
    const file = deploymentFile(
      [
        "checkpoint:", // 1
        "  enabled: true", // 2
        "  control_auth_token: ${GYM_UNSET_TOKEN}", // 3
        "servers:", // 4
        "  a:", // 5
        "    kind: agent", // 6
        "    entrypoint: ./srv.ts", // 7
        "    config:", // 8
        "      model_server: policy", // 9
        "  b:", // 10
        "    kind: resources", // 11
        "    entrypoint: ./missing.ts", // 12
        "  a:", // 13
        "    kind: agent", // 14
        "    entrypoint: ./srv.ts", // 15
      ].join("\n"),
    );
    const problems = problemsOf(file);
    const byLine = Object.fromEntries(problems.map((p) => [p.line, p.message]));
    expect(byLine[3]).toMatch(/\$\{GYM_UNSET_TOKEN\} is not set: export GYM_UNSET_TOKEN/);
    expect(byLine[13]).toMatch(/duplicate server name 'a' \(first defined on line 5\)/);
    expect(byLine[12]).toMatch(/entrypoint \.\/missing\.ts not found/);
    // The unset token is reported once, not again as a missing token.
    expect(problems.filter((p) => p.line === 3)).toHaveLength(1);
  });

  it("with a duplicate key and a refused value, still reports every other problem", () => {
    const file = deploymentFile(
      [
        "servers:", // 1
        "  a:", // 2
        "    kind: resource", // 3
        "    entrypoint: ./srv.ts", // 4
        "    entrypoint: ./missing.ts", // 5
        "  b:", // 6
        "    kind: agent", // 7
        "    entrypoint: ./nope.ts", // 8
        "    port: 8101", // 9
        "    config:", // 10
        "      model_server: policy", // 11
        "  c:", // 12
        "    kind: model", // 13
        "    entrypoint: ./srv.ts", // 14
        "    port: 8101", // 15
      ].join("\n"),
    );
    const problems = problemsOf(file);
    const messages = (line: number): string =>
      problems
        .filter((problem) => problem.line === line)
        .map((problem) => problem.message)
        .join("\n");
    expect(messages(3)).toMatch(/bad kind "resource" for server a \(did you mean 'resources'\?\)/);
    expect(messages(5)).toMatch(/duplicate key 'entrypoint' \(first on line 4\)/);
    // The last entrypoint is the one read; it is looked for although the file was refused.
    expect(messages(5)).toMatch(/entrypoint \.\/missing\.ts not found/);
    expect(messages(8)).toMatch(/entrypoint \.\/nope\.ts not found/);
    expect(messages(11)).toMatch(/names server 'policy', which this deployment does not define/);
    expect(messages(15)).toMatch(/port 8101 on 127\.0\.0\.1 is also given to server b/);
    expect(problems).toHaveLength(6);
  });

  it("suggests the closest kind, key and server name for a typo", () => {
    const file = deploymentFile(
      [
        "servers:",
        "  a:",
        "    kind: Agent",
        "    entrypoint: ./srv.ts",
        "    prot: 8101",
        "    config:",
        "      model_server: modle",
        "  model:",
        "    kind: database",
        "    entrypoint: ./srv.ts",
      ].join("\n"),
    );
    const byLine = Object.fromEntries(problemsOf(file).map((p) => [p.line, p.message]));
    expect(byLine[3]).toMatch(/bad kind "Agent" for server a \(did you mean 'agent'\?\)/);
    expect(byLine[5]).toMatch(/unknown key 'prot' in server a \(did you mean 'port'\?\)/);
    expect(byLine[7]).toMatch(/names server 'modle', .* \(did you mean 'model'\?\)/);
    // Nothing is suggested for a word that is not a typo of a choice.
    expect(byLine[9]).toMatch(/bad kind "database" for server model: use one of/);
  });

  it("names the line of a dangling reference nested in config", () => {
    const file = deploymentFile(
      [
        "servers:",
        "  a:",
        "    kind: agent",
        "    entrypoint: ./srv.ts",
        "    config:",
        "      tools:",
        "        - name: search",
        "          resources_server: nowhere",
      ].join("\n"),
    );
    const [problem] = problemsOf(file);
    expect(problem?.line).toBe(8);
    expect(problem?.path).toBe("servers.a.config.tools.0.resources_server");
  });

  it("accepts references to servers that exist, and null", () => {
    const file = deploymentFile(
      [
        "servers:",
        "  a:",
        "    kind: agent",
        "    entrypoint: ./srv.ts",
        "    config: { model_server: p, judge_server: null }",
        "  p:",
        "    kind: model",
        "    entrypoint: ./srv.ts",
      ].join("\n"),
    );
    expect(Object.keys(loadDeploymentFile(file, { env: {} }).servers)).toEqual(["a", "p"]);
  });

  it("refuses a reference that is not a string", () => {
    const file = deploymentFile(
      "servers:\n  a:\n    kind: agent\n    entrypoint: ./srv.ts\n    config:\n      model_server: 3\n",
    );
    expect(problemsOf(file)[0]).toMatchObject({
      line: 6,
      message: expect.stringMatching(/must name a server/),
    });
  });

  it("names an unknown top-level key", () => {
    const file = deploymentFile(
      "servers:\n  a:\n    kind: agent\n    entrypoint: ./srv.ts\nsever: 1\n",
    );
    expect(problemsOf(file)[0]).toMatchObject({
      line: 5,
      message: expect.stringMatching(
        /unknown key 'sever' at the top level.*allowed: checkpoint, telemetry, tls, nodes, servers/,
      ),
    });
  });

  it("refuses a node_args entry that is not a flag, naming the line", () => {
    const file = deploymentFile(
      "servers:\n  a:\n    kind: agent\n    entrypoint: ./srv.ts\n    node_args: [--inspect, other.js]\n",
    );
    expect(problemsOf(file)[0]).toMatchObject({
      line: 5,
      message: expect.stringMatching(/a node_args entry is a Node.js flag/),
    });
  });

  it("names an unknown key of the checkpoint block", () => {
    const file = deploymentFile(
      "checkpoint:\n  enabled: false\n  token: x\nservers:\n  a:\n    kind: agent\n    entrypoint: ./srv.ts\n",
    );
    expect(problemsOf(file)[0]).toMatchObject({
      line: 3,
      message: expect.stringMatching(/unknown key 'token'/),
    });
  });

  it("names a server without a kind", () => {
    const file = deploymentFile("servers:\n  a:\n    entrypoint: ./srv.ts\n");
    expect(problemsOf(file)[0]).toMatchObject({
      line: 2,
      message: expect.stringMatching(/servers\.a has no kind: add it \(one of environment/),
    });
  });

  it("names a bad server name and one that cannot name a directory", () => {
    const bad = deploymentFile("servers:\n  a b:\n    kind: agent\n    entrypoint: ./srv.ts\n");
    expect(problemsOf(bad)[0]).toMatchObject({
      line: 2,
      message: expect.stringMatching(/bad server name 'a b'/),
    });
    const leading = deploymentFile("servers:\n  _a:\n    kind: agent\n    entrypoint: ./srv.ts\n");
    expect(problemsOf(leading)[0]).toMatchObject({
      line: 2,
      message: expect.stringMatching(/must start with a letter or a digit/),
    });
  });

  it("names two servers given the same fixed port", () => {
    const file = deploymentFile(
      [
        "servers:",
        "  a:",
        "    kind: agent",
        "    entrypoint: ./srv.ts",
        "    port: 8101",
        "  b:",
        "    kind: backend",
        "    entrypoint: ./srv.ts",
        "    port: 8101",
      ].join("\n"),
    );
    expect(problemsOf(file)[0]).toMatchObject({
      line: 9,
      message: expect.stringMatching(
        /port 8101 on 127\.0\.0\.1 is also given to server a \(line 5\)/,
      ),
    });
  });

  it("names a duplicate key inside a server", () => {
    const file = deploymentFile(
      "servers:\n  a:\n    kind: agent\n    kind: model\n    entrypoint: ./srv.ts\n",
    );
    expect(problemsOf(file)[0]).toMatchObject({
      line: 4,
      message: expect.stringMatching(/duplicate key 'kind' \(first on line 3\)/),
    });
  });

  it("names the line of a YAML syntax error", () => {
    const file = deploymentFile("servers:\n  a:\n    kind: [agent\n    entrypoint: ./srv.ts\n");
    const [problem] = problemsOf(file);
    expect(problem?.message).toMatch(/not valid YAML or JSON/);
    expect(problem?.line).toBeGreaterThanOrEqual(3);
  });

  it("needs at least one server", () => {
    const file = deploymentFile("servers: {}\n");
    expect(problemsOf(file)[0]).toMatchObject({
      line: 1,
      message: expect.stringMatching(/at least one server/),
    });
  });

  it("says when the file does not exist", () => {
    expect(problemsOf(path.join(temp, "nope.yaml"))[0]).toMatchObject({
      line: null,
      message: expect.stringMatching(/no such file/),
    });
  });
});

describe("variable expansion", () => {
  it("expands ${VAR}, ${VAR:-default} and $$", () => {
    const env = { A: "1", EMPTY: "" };
    expect(expandVariables("x${A}y", env)).toEqual({ value: "x1y", expanded: true, problems: [] });
    expect(expandVariables("${B:-dflt}", env).value).toBe("dflt");
    expect(expandVariables("${EMPTY:-dflt}", env).value).toBe("dflt");
    expect(expandVariables("${A:-dflt}", env).value).toBe("1");
    expect(expandVariables("cost: $$5", env).value).toBe("cost: $5");
    expect(expandVariables("${1X}", env).problems[0]).toMatch(/not a variable reference/);
    expect(expandVariables("${B}", env).problems[0]).toMatch(/\$\{B\} is not set/);
  });

  it("law: text without $ is unchanged, and ${NAME} becomes NAME's value", () => {
    fc.assert(
      fc.property(
        fc.string().filter((s) => !s.includes("$")),
        fc.stringMatching(/^[A-Za-z_][A-Za-z0-9_]{0,10}$/),
        fc.string().filter((s) => !s.includes("$")),
        (text, name, value) => {
          expect(expandVariables(text, {})).toEqual({ value: text, expanded: false, problems: [] });
          expect(expandVariables(`<${"$"}{${name}}>`, { [name]: value }).value).toBe(`<${value}>`);
        },
      ),
    );
  });

  it("re-reads a plain value as YAML, keeps a quoted one a string", () => {
    const file = deploymentFile(
      [
        "checkpoint:",
        "  enabled: ${ON:-true}",
        '  control_auth_token: "${TOKEN}"',
        "servers:",
        "  a:",
        "    kind: agent",
        "    entrypoint: ./srv.ts",
        "    port: ${PORT:-0}",
      ].join("\n"),
    );
    const loaded = loadDeploymentFile(file, { env: { TOKEN: "12345", PORT: "8123" } });
    expect(loaded.checkpoint?.enabled).toBe(true);
    expect(loaded.checkpoint?.control_auth_token).toBe("12345");
    expect(loaded.servers.a?.port).toBe(8123);
  });

  it("suggests quoting when an expanded plain value is not the string expected", () => {
    const file = deploymentFile(
      "checkpoint:\n  enabled: true\n  control_auth_token: ${TOKEN}\nservers:\n  a:\n    kind: agent\n    entrypoint: ./srv.ts\n",
    );
    expect(problemsOf(file, { TOKEN: "12345" })[0]).toMatchObject({
      line: 3,
      message: expect.stringMatching(/quote it to keep it a string/),
    });
  });

  it("never expands keys", () => {
    const file = deploymentFile(
      "servers:\n  a:\n    kind: agent\n    entrypoint: ./srv.ts\n    config:\n      ${X}: 1\n",
    );
    expect(loadDeploymentFile(file, { env: {} }).servers.a?.config).toEqual({ "${X}": 1 });
  });
});

describe("entrypoints", () => {
  const base = path.join(temp, "entrypoints");
  mkdirSync(path.join(base, "pkg-exports", "dist"), { recursive: true });
  writeFileSync(path.join(base, "pkg-exports", "dist", "main.js"), "");
  writeFileSync(
    path.join(base, "pkg-exports", "package.json"),
    JSON.stringify({ exports: { ".": { types: "./dist/main.d.ts", import: "./dist/main.js" } } }),
  );
  mkdirSync(path.join(base, "pkg-main"), { recursive: true });
  writeFileSync(path.join(base, "pkg-main", "server.js"), "");
  writeFileSync(path.join(base, "pkg-main", "package.json"), JSON.stringify({ main: "server.js" }));
  mkdirSync(path.join(base, "pkg-unbuilt"), { recursive: true });
  writeFileSync(
    path.join(base, "pkg-unbuilt", "package.json"),
    JSON.stringify({ main: "dist/main.js" }),
  );
  mkdirSync(path.join(base, "plain-dir"), { recursive: true });
  writeFileSync(path.join(base, "plain-dir", "index.ts"), "");
  writeFileSync(path.join(base, "module.ts"), "");
  mkdirSync(path.join(base, "node_modules", "gym-installed"), { recursive: true });
  writeFileSync(path.join(base, "node_modules", "gym-installed", "index.js"), "");

  it.each([
    ["./pkg-exports", "pkg-exports/dist/main.js"],
    ["./pkg-main", "pkg-main/server.js"],
    ["./plain-dir", "plain-dir/index.ts"],
    ["./module.ts", "module.ts"],
    ["./module", "module.ts"],
    ["gym-installed", "node_modules/gym-installed/index.js"],
  ])("resolves %s to %s", (entrypoint, expected) => {
    expect(resolveEntrypoint(entrypoint, base)).toBe(path.join(base, expected));
  });

  it("says to build a package whose main does not exist yet", () => {
    expect(() => resolveEntrypoint("./pkg-unbuilt", base)).toThrow(EntrypointError);
    expect(() => resolveEntrypoint("./pkg-unbuilt", base)).toThrow(/build the package first/);
  });

  it("says what it looked for when nothing matches", () => {
    expect(() => resolveEntrypoint("./gone", base)).toThrow(/entrypoint \.\/gone not found/);
  });
});

describe("resolving", () => {
  it("gives every server its URL and validates as a resolved deployment", () => {
    const loaded = loadDeploymentFile(path.join(DEPLOYMENTS, "good.yaml"), { env: {} });
    const resolved = resolveDeployment(loaded, { counter: 8101, echo: 8102 });
    expect(ResolvedDeploymentSchema.parse(resolved)).toEqual(resolved);
    expect(resolved.servers.counter?.url).toBe("http://127.0.0.1:8101");
    expect(resolved.servers.counter?.config).toEqual({
      episodes: ["task-1", "task-2", "task-3"],
      backend_server: "echo",
    });
  });

  it("reaches wildcard hosts through loopback", () => {
    expect(serverUrl("0.0.0.0", 80)).toBe("http://127.0.0.1:80");
    expect(serverUrl("::", 80)).toBe("http://[::1]:80");
    expect(serverUrl("::1", 80)).toBe("http://[::1]:80");
  });
});

describe("hostile or odd deployment files", () => {
  it("refuse an alias bomb with a typed problem on line 1, not a crash", () => {
    const bomb = [
      "a: &a [x, x, x, x, x, x, x, x, x]",
      "b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]",
      "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]",
      "d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]",
      "e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]",
      "servers: {}",
    ].join("\n");
    const problems = problemsOf(deploymentFile(bomb));
    expect(problems[0]?.line).toBe(1);
    expect(problems[0]?.message).toContain("aliases");
  });

  it("refuse a host that is not a host name or an IP address, naming its line", () => {
    const file = deploymentFile(
      [
        "servers:",
        "  a:",
        "    kind: backend",
        "    entrypoint: ./srv.ts",
        '    host: "not a host"',
      ].join("\n"),
    );
    const problems = problemsOf(file);
    expect(problems.map((p) => p.line)).toContain(5);
    expect(problems.map((p) => p.message).join(" ")).toContain("host name or an IP address");
  });
});
