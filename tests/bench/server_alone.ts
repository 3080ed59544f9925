// A benchmark helper: printing its ready line is its job.
// deno-lint-ignore-file no-console
/**
 * The ceiling of the proxy benchmark: `Deno.serve` alone, answering the
 * backend's files from memory with the backend's header fields, so no
 * upstream at all. What is left between it and the floor (`floor_proxy.ts`)
 * is the cost of one pooled backend round trip on `Deno.connect`; between the
 * floor and Sluice, the cost of proxying faithfully.
 *
 * Usage: `deno run --allow-net --allow-read tests/bench/server_alone.ts --port 18083 --root <dir>`
 * (serves every file in `<dir>` by its name, read once at start).
 * Prints one JSON line `{ "ready": true, "pid": n }` when serving.
 *
 * @module
 */

function flag(name: string): string {
  const index = Deno.args.indexOf(`--${name}`);
  const value = index >= 0 ? Deno.args[index + 1] : undefined;
  if (value === undefined) throw new Error(`Cannot start the server alone: --${name} is required`);
  return value;
}

if (import.meta.main) {
  const root = flag("root");
  const files = new Map<string, Uint8Array<ArrayBuffer>>();
  for await (const entry of Deno.readDir(root)) {
    if (entry.isFile) files.set(`/${entry.name}`, await Deno.readFile(`${root}/${entry.name}`));
  }
  // The fields nginx sends for a static file (besides Date, Content-Length and Connection).
  const fields: [string, string][] = [
    ["server", "nginx"],
    ["content-type", "application/octet-stream"],
    ["last-modified", new Date().toUTCString()],
    ["etag", '"0-0"'],
    ["accept-ranges", "bytes"],
  ];
  const missing = new Uint8Array(0);
  Deno.serve({
    hostname: "127.0.0.1",
    port: Number(flag("port")),
    onListen: () => console.log(JSON.stringify({ ready: true, pid: Deno.pid })),
  }, (req) => {
    const url = req.url;
    const path = url.slice(url.indexOf("/", url.indexOf("//") + 2));
    const body = files.get(path);
    if (body === undefined) return new Response(missing, { status: 404 });
    return new Response(body, { headers: fields });
  });
}
