/**
 * Weather: a `stateless` resources server with a replayable `/verify`. Its tool answers from the
 * request alone, so nothing needs exporting, and verifying again after a crash is safe.
 */
import { createHash } from "node:crypto";
import { z } from "zod";
import { ResourcesServer, dataRoute, isMainModule, serveMain } from "gym-participant-sdk";
import type { VerifyInput } from "gym-participant-sdk";

/** The same city always gets the same weather. */
export function weatherOf(city: string): { city: string; temperature_c: number } {
  const digest = createHash("sha256").update(city.trim().toLowerCase()).digest();
  return { city, temperature_c: (digest[0] ?? 0) % 40 };
}

export default class WeatherServer extends ResourcesServer {
  static override checkpointMode = "stateless";
  static override checkpointVerify = "replay";

  protected override tools() {
    return [
      dataRoute({
        method: "post",
        path: "/get_weather",
        summary: "The weather in a city",
        request: z.strictObject({ city: z.string().min(1) }),
        reply: z.strictObject({ city: z.string(), temperature_c: z.int() }),
        examples: { request: { city: "Paris" }, reply: weatherOf("Paris") },
        handler: ({ body }) => weatherOf(body.city),
      }),
    ];
  }

  // Both optional: a body without them is verified (reward 0.0), not refused.
  override readonly verifyRequest = z.looseObject({
    city: z.string().optional(),
    temperature_c: z.number().optional(),
  });

  protected override verify({ body: { city, temperature_c } }: VerifyInput<this>) {
    const right = city !== undefined && weatherOf(city).temperature_c === temperature_c;
    return { reward: right ? 1.0 : 0.0 };
  }
}

if (isMainModule(import.meta.url)) await serveMain(WeatherServer);
