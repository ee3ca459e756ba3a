/**
 * The error handler's answers to failures of body parsers it does not own (an author's
 * `express.json()` in `configureApp`) and of the router: typed 4xx, never a 500.
 */
import express from "express";
import { pino } from "pino";
import request from "supertest";
import { describe, expect, it } from "vitest";
import { errorHandler } from "#sdk/server/error-handler.js";

function app(): express.Express {
  const app = express();
  app.post("/parsed", express.json({ limit: "1kb" }), (req, res) => {
    res.json({ body: req.body as unknown });
  });
  app.get("/items/:id", (req, res) => {
    res.json({ id: req.params.id });
  });
  app.use(errorHandler(pino({ level: "silent" })));
  return app;
}

describe("the error handler", () => {
  it("answers a body-parser body that is not valid gzip with 400 invalid_request", async () => {
    const res = await request(app())
      .post("/parsed")
      .set("content-type", "application/json")
      .set("content-encoding", "gzip")
      .send('{"not": "gzip"}');
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe("invalid_request");
  });

  it("answers a body-parser encoding it does not speak with 415 invalid_request", async () => {
    const res = await request(app())
      .post("/parsed")
      .set("content-type", "application/json")
      .set("content-encoding", "compress")
      .send("{}");
    expect(res.status).toBe(415);
    expect(res.body.error.code).toBe("invalid_request");
  });

  it("keeps 413 for too large and 422 for JSON that does not parse", async () => {
    const large = await request(app())
      .post("/parsed")
      .set("content-type", "application/json")
      .send(JSON.stringify({ pad: "x".repeat(4096) }));
    expect(large.status).toBe(413);
    expect(large.body.error.code).toBe("invalid_request");
    const bad = await request(app())
      .post("/parsed")
      .set("content-type", "application/json")
      .send('{"a": ');
    expect(bad.status).toBe(422);
    expect(bad.body.error.code).toBe("invalid_request");
  });

  it("answers a path parameter that does not decode with 400 invalid_request", async () => {
    const res = await request(app()).get("/items/%E0%A4%A");
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe("invalid_request");
    expect(res.body.error.detail).toContain("%E0%A4%A");
  });
});
