/**
 * The data plane's flags reach a real Sluice's workers: `--hsts-max-age` and
 * `--no-hsts` set the HSTS a TLS host gets over HTTPS (HTTP gets a 308 keeping
 * the query), and `--max-body-size` and `--trusted-proxy-cidrs` reach every
 * worker of a 2-worker Sluice.
 *
 * @module
 */
import { startEchoBackend } from "../support/echo_backend.ts";
import { generateSelfSignedCertificate } from "../../lib/tls/self_signed.ts";
import { echoSite, writeManifestDir } from "../support/manifest_dir.ts";
import { headerValue, headerValues, RawConnection } from "../support/raw_http.ts";
import { spawnSluice } from "../support/sluice_process.ts";
import { assertEquals } from "../support/assert.ts";

Deno.test("--hsts-max-age sets the HSTS a TLS host gets over HTTPS, --no-hsts removes it, and HTTP gets a 308 keeping the query", async () => {
  const backend = await startEchoBackend({ name: "secure/web" });
  const tls = await generateSelfSignedCertificate({ hostnames: ["secure.test"] });
  const dir = await writeManifestDir([
    { namespace: "secure", name: "web", host: "secure.test", port: backend.port, tls },
  ]);
  /** One HTTPS request to `secure.test` over a raw TLS connection. */
  const overHttps = async (port: number) => {
    const tcp = await Deno.connect({ hostname: "127.0.0.1", port });
    const conn = RawConnection.wrap(
      await Deno.startTls(tcp, { hostname: "secure.test", caCerts: [tls.certPem] }),
    );
    try {
      await conn.send("GET /x HTTP/1.1\r\nHost: secure.test\r\n\r\n");
      return await conn.readResponse();
    } finally {
      conn.close();
    }
  };
  try {
    for (
      const [flags, hsts] of [
        [["--hsts-max-age=60"], ["max-age=60; includeSubDomains"]],
        [["--no-hsts"], []],
      ] as const
    ) {
      const sluice = await spawnSluice([
        `--manifests=${dir.path}`,
        "--workers=1",
        "--shutdown-delay=0s",
        ...flags,
      ]);
      try {
        await sluice.ready();
        const secure = await overHttps(sluice.httpsPort);
        assertEquals(secure.status, 200, flags.join(" "));
        assertEquals(
          headerValues(secure.headers, "strict-transport-security"),
          [...hsts],
          flags[0],
        );
        using conn = await RawConnection.open(sluice.httpPort);
        await conn.send("GET /a/b?c=d%20e&f HTTP/1.1\r\nHost: secure.test\r\n\r\n");
        const redirect = await conn.readResponse();
        assertEquals(redirect.status, 308, flags[0]);
        assertEquals(
          headerValue(redirect.headers, "location"),
          "https://secure.test/a/b?c=d%20e&f",
        );
        assertEquals(headerValues(redirect.headers, "strict-transport-security"), []);
      } finally {
        await sluice.stop("SIGKILL");
      }
    }
  } finally {
    await backend.close();
    await dir.remove();
  }
});

Deno.test("--max-body-size and --trusted-proxy-cidrs reach the data plane of a 2-worker Sluice", async () => {
  const site = await echoSite({ name: "shop/web" });
  const { backend, dir } = site;
  const sluice = await spawnSluice([
    `--manifests=${dir.path}`,
    "--workers=2",
    "--shutdown-delay=0s",
    "--max-body-size=1k",
    "--trusted-proxy-cidrs=127.0.0.0/8",
  ]);
  const ask = async (text: string) => {
    using conn = await RawConnection.open(sluice.httpPort);
    await conn.send(text);
    return await conn.readResponse();
  };
  try {
    await sluice.ready();
    // Several connections, so both workers (reusePort) are likely to answer some.
    for (let i = 0; i < 6; i++) {
      const big = await ask(
        `POST /u HTTP/1.1\r\nHost: shop.test\r\nContent-Length: 2000\r\n\r\n${"x".repeat(2000)}`,
      );
      assertEquals(big.status, 413);
      const fits = await ask(
        `POST /u HTTP/1.1\r\nHost: shop.test\r\nContent-Length: 1000\r\nX-Forwarded-For: 203.0.113.5\r\n` +
          `X-Request-ID: kept-${i}\r\n\r\n${"y".repeat(1000)}`,
      );
      assertEquals(fits.status, 200);
      const seen = JSON.parse(new TextDecoder().decode(fits.body)) as {
        headers: [string, string][];
      };
      assertEquals(headerValues(seen.headers, "x-forwarded-for"), ["203.0.113.5, 127.0.0.1"]);
      assertEquals(headerValues(seen.headers, "x-real-ip"), ["203.0.113.5"]);
      assertEquals(headerValues(seen.headers, "x-request-id"), [`kept-${i}`]);
    }
    assertEquals(backend.requests.filter((r) => r.bodyLength > 1024), []);
  } finally {
    await sluice.stop("SIGKILL");
    await site.close();
  }
});
