/**
 * The one place where the proxy reaches into Deno internals (Deno 2.9.6).
 *
 * `Request.headers` iterates sorted by name with duplicates joined by ", "
 * (the Fetch standard's view). A proxy wants the header fields as the client
 * sent them: in order, with their original case, duplicates separate. Deno's
 * server keeps that list on the request's inner object (reached through an
 * own symbol whose description is `"request"`, property `headerList`, an
 * array of `[name, value]` pairs read from the wire on each access).
 *
 * If a Deno upgrade changes that shape, {@linkcode requestHeaderList} falls
 * back to the public `req.headers` (sorted, combined: still correct HTTP,
 * less faithful), and `deno_internal_test.ts` fails loudly so the change is
 * noticed.
 *
 * The second reach is a behaviour, not an API: {@linkcode releaseTakenChunk}
 * and {@linkcode releaseWrittenChunk} rely on how `Deno.serve` takes a
 * streamed response body and makes a request body's chunks (see there), and
 * the same test file fails loudly if that changes.
 *
 * Not here (see docs/deno-workarounds.md, section 11): a raw upgrade of a
 * `Deno.serve` connection. Deno 2.9.6's `_wantsUpgrade` only implements `upgradeWebSocket`;
 * `upgradeHttpRaw` is gone, so WebSockets are relayed message by message.
 *
 * @module
 */

type HeaderPair = [string, string];

let requestSymbol: symbol | undefined;
let lastSource: "internal" | "public" = "internal";

/**
 * The request's header fields in wire order with original name case (HTTP/1.1;
 * HTTP/2 names are lowercase and grouped by name). Must be called while the
 * request is live (before the response is returned).
 */
export function requestHeaderList(req: Request): HeaderPair[] {
  const list = internalHeaderList(req);
  if (list !== undefined) {
    lastSource = "internal";
    return list;
  }
  lastSource = "public";
  return Array.from(req.headers);
}

/** Where the last {@linkcode requestHeaderList} call got its answer; for the canary test. */
export function lastHeaderListSource(): "internal" | "public" {
  return lastSource;
}

function internalHeaderList(req: Request): HeaderPair[] | undefined {
  try {
    const symbol = requestSymbol ?? findRequestSymbol(req);
    if (symbol === undefined) return undefined;
    const inner = (req as unknown as Record<symbol, unknown>)[symbol];
    if (inner === null || typeof inner !== "object") return undefined;
    const list = (inner as { headerList?: unknown }).headerList;
    if (!Array.isArray(list)) return undefined;
    const first = list[0] as unknown;
    if (
      first !== undefined &&
      !(Array.isArray(first) && typeof first[0] === "string" && typeof first[1] === "string")
    ) {
      return undefined;
    }
    return list as HeaderPair[];
  } catch {
    // "Request closed" or an internal change: let the caller use the public API.
    return undefined;
  }
}

function findRequestSymbol(req: Request): symbol | undefined {
  for (const symbol of Object.getOwnPropertySymbols(req)) {
    if (symbol.description === "request") {
      requestSymbol = symbol;
      return symbol;
    }
  }
  return undefined;
}

/**
 * Frees a response body chunk's memory now instead of at V8's next
 * collection, by detaching its buffer. For a chunk of a `ReadableStream`
 * given to a `Deno.serve` response only, and only once the stream has been
 * asked for the next chunk and that pull has awaited something.
 *
 * Why this is safe on Deno 2.9.6 (ext/web/06_streams.js,
 * `resourceForReadableStream`): the server reads the stream with a reader
 * whose chunk steps hand each chunk synchronously to a Rust op, which keeps
 * its own counted reference to the chunk's backing store until hyper has
 * written it. With a high-water mark of 1, a stream is pulled again only
 * once its queue is empty, that is once the previous chunk has been read,
 * and its chunk steps run before the pull's first await resumes. Detaching
 * drops only JavaScript's reference: the bytes stay alive for hyper and are
 * freed the moment it has sent them.
 *
 * Why it matters: a proxy relaying large bodies makes a fresh 256 KiB chunk
 * per read. Left to the garbage collector, sent chunks pile up until the next
 * collection and raise the peak RSS under load (docs/benchmarks.md,
 * "Streamed bodies").
 *
 * Never for a body read by JavaScript (`Response.arrayBuffer()`, a reader
 * that keeps chunks): it would see empty chunks. `deno_internal_test.ts`
 * shows both: the bytes arrive intact through `Deno.serve` (HTTP/1.1 with a
 * stalled client, and HTTP/2), and a JavaScript collector gets them cut.
 */
export function releaseTakenChunk(chunk: Uint8Array<ArrayBuffer>): void {
  detach(chunk);
}

/**
 * Frees a request body chunk's memory now instead of at V8's next
 * collection, by detaching its buffer, once the chunk has been written out
 * (the write op has finished with it). For chunks of a `Deno.serve` request
 * body, or of a buffer the caller made and no longer needs.
 *
 * Why this is safe on Deno 2.9.6: a `Deno.serve` request body is a byte
 * stream over the request's resource (ext/web/06_streams.js
 * `readableStreamForRid`) that reads each chunk into a freshly allocated
 * 64 KiB buffer, so a chunk's buffer holds that chunk and nothing else; and
 * a finished write no longer references the bytes. `deno_internal_test.ts`
 * fails loudly if Deno starts handing out views of a shared buffer.
 *
 * Why it matters: during a long upload, dead 64 KiB chunks wait for a
 * collection and raise RSS while it streams (docs/benchmarks.md, "Streamed
 * bodies").
 */
export function releaseWrittenChunk(chunk: Uint8Array<ArrayBuffer>): void {
  detach(chunk);
}

function detach(chunk: Uint8Array<ArrayBuffer>): void {
  if (!chunk.buffer.detached) chunk.buffer.transfer(0);
}
