/**
 * The health port (`--health-port`, default 10254): `/healthz` (the process
 * serves), `/readyz` (routes are loaded and Sluice is not shutting down) and
 * `/metrics` (Prometheus text). Runs on the main thread, beside the control
 * plane; knows nothing of how readiness or metrics are computed.
 *
 * @module
 */

/** Options of {@linkcode serveHealth}. */
export interface HealthServerOptions {
  readonly hostname?: string;
  readonly port: number;
  /** The process can serve (workers alive). */
  readonly live: () => boolean;
  /** Routes are loaded and Sluice is not shutting down. */
  readonly ready: () => boolean;
  /** The Prometheus exposition and its content type. */
  readonly metrics: () => Promise<{ readonly body: string; readonly contentType: string }>;
  readonly onError?: (error: unknown) => void;
}

const TEXT = { "content-type": "text/plain; charset=utf-8" };

/** Answers one health-port request (exported for tests that call it directly). */
export async function healthResponse(
  req: Request,
  options: HealthServerOptions,
): Promise<Response> {
  const { pathname } = new URL(req.url);
  if (req.method !== "GET" && req.method !== "HEAD") {
    return new Response("Method not allowed\n", {
      status: 405,
      headers: { ...TEXT, allow: "GET, HEAD" },
    });
  }
  switch (pathname) {
    case "/healthz":
      return options.live()
        ? new Response("ok\n", { headers: TEXT })
        : new Response("not serving\n", { status: 503, headers: TEXT });
    case "/readyz":
      return options.ready()
        ? new Response("ok\n", { headers: TEXT })
        : new Response("not ready\n", { status: 503, headers: TEXT });
    case "/metrics": {
      const { body, contentType } = await options.metrics();
      return new Response(body, { headers: { "content-type": contentType } });
    }
    default:
      return new Response("Not found\n", { status: 404, headers: TEXT });
  }
}

/** Serves the health port until `shutdown()`. */
export function serveHealth(options: HealthServerOptions): Deno.HttpServer<Deno.NetAddr> {
  return Deno.serve({
    hostname: options.hostname ?? "0.0.0.0",
    port: options.port,
    onListen: () => {},
    onError: (error) => {
      options.onError?.(error);
      return new Response("Internal error\n", { status: 500, headers: TEXT });
    },
  }, (req) => healthResponse(req, options));
}
