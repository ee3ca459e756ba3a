/**
 * The SDK's own `package.json`: its name, version and description, read once when first asked
 * for, so the OpenAPI documents and `gym --version` follow the package instead of a copy of it.
 */
import { readFileSync } from "node:fs";

/** What the SDK says of itself in its `package.json`. */
export interface SdkPackage {
  readonly name: string;
  readonly version: string;
  readonly description: string;
}

function readSdkPackage(): SdkPackage {
  // Two levels up from both `src/util/` (tsx, tests) and `dist/util/` (the built package).
  const file = new URL("../../package.json", import.meta.url);
  const data = JSON.parse(readFileSync(file, "utf8")) as Partial<SdkPackage>;
  return {
    name: data.name ?? "gym-participant-sdk",
    version: data.version ?? "0.0.0",
    description: data.description ?? "",
  };
}

let cached: SdkPackage | null = null;

/** The SDK package's name, version and description (read on first use). */
export function sdkPackage(): SdkPackage {
  cached ??= readSdkPackage();
  return cached;
}
