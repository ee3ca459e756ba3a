/**
 * `GET /openapi.json` and Swagger UI at `/docs`, both built on first use. A server starts
 * without generating its document or loading Swagger UI's assets: start-up is paid by every
 * process of a deployment at every (re)start, while the pages are read by people, now and then.
 */
import { Router, type Express, type RequestHandler } from "express";

/** Mounts the document route and the Swagger UI pages on `app`; `build` runs once, when first asked. */
export function mountOpenApiRoutes(app: Express, build: () => object): void {
  let document: object | null = null;
  const documentOnce = (): object => (document ??= build());
  app.get("/openapi.json", (_req, res) => {
    res.json(documentOnce());
  });
  app.use("/docs", lazySwaggerUi(documentOnce));
}

/** Swagger UI's static assets and page, loaded with `swagger-ui-express` on the first request. */
function lazySwaggerUi(documentOnce: () => object): RequestHandler {
  let pages: Promise<Router> | null = null;
  return (req, res, next) => {
    pages ??= import("swagger-ui-express").then(({ default: swaggerUi }) => {
      const router = Router();
      router.use(swaggerUi.serve, swaggerUi.setup(documentOnce()));
      return router;
    });
    pages.then(
      (router) => router(req, res, next),
      (error: unknown) => {
        // Not cached: a failed load (or document) is retried by the next request.
        pages = null;
        next(error);
      },
    );
  };
}
