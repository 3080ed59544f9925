/**
 * Typed requests to the Kubernetes API over Deno's `fetch`: list (one page
 * or all pages), get, create, update, patch, delete, and raw watch streams.
 * Failures come back as {@linkcode KubeApiError} carrying the API's `Status`.
 *
 * Knows how to talk to the API; knows nothing of what Sluice does with the
 * objects (no caching, no retries: those belong to the reflectors).
 *
 * @module
 */
import { JsonLinesStream } from "./json_lines.ts";
import type { KubeAccess } from "./kube_access.ts";
import { type Location, type Resource, resourcePath } from "./resources.ts";

/** The parts of `metadata` every object has. */
export interface ObjectMeta {
  readonly name?: string;
  readonly namespace?: string;
  readonly resourceVersion?: string;
  readonly uid?: string;
  readonly [key: string]: unknown;
}

/** Any Kubernetes object, as JSON. */
export interface KubeObject {
  readonly apiVersion?: string;
  readonly kind?: string;
  readonly metadata?: ObjectMeta;
  readonly [key: string]: unknown;
}

/** The API's error document. */
export interface Status {
  readonly kind?: "Status";
  readonly status?: string;
  readonly message?: string;
  readonly reason?: string;
  readonly code?: number;
  readonly details?: unknown;
}

/** A request the API answered with an error status. */
export class KubeApiError extends Error {
  readonly status: number;
  readonly reason: string;
  readonly body: Status | undefined;
  constructor(action: string, status: number, body: Status | undefined) {
    const detail = body?.message ?? `HTTP ${status}`;
    super(`Cannot ${action}: ${detail}`);
    this.name = "KubeApiError";
    this.status = status;
    this.reason = body?.reason ?? "";
    this.body = body;
  }
  /** The resourceVersion asked for is too old (HTTP 410 or reason `Expired`/`Gone`). */
  get isGone(): boolean {
    return this.status === 410 || this.reason === "Expired" || this.reason === "Gone";
  }
  get isNotFound(): boolean {
    return this.status === 404;
  }
  get isConflict(): boolean {
    return this.status === 409;
  }
  get isForbidden(): boolean {
    return this.status === 403;
  }
  /** The resourceVersion asked for is newer than any the server has (it waited, then gave up). */
  get isTooLargeResourceVersion(): boolean {
    return this.body !== undefined && isTooLargeResourceVersion(this.body);
  }
}

/**
 * Whether `status` says the resourceVersion asked for is newer than the
 * server's data: reason `Timeout` with the cause `ResourceVersionTooLarge`
 * (apimachinery's `IsTooLargeResourceVersionError`), or its message.
 */
export function isTooLargeResourceVersion(status: Status): boolean {
  const causes = (status.details as { causes?: unknown } | undefined)?.causes;
  if (
    Array.isArray(causes) &&
    causes.some((c) => (c as { reason?: unknown } | null)?.reason === "ResourceVersionTooLarge")
  ) return true;
  return typeof status.message === "string" &&
    status.message.includes("Too large resource version");
}

/** Selectors and paging of a list or watch. */
export interface ListOptions {
  readonly namespace?: string | undefined;
  readonly labelSelector?: string | undefined;
  readonly fieldSelector?: string | undefined;
  readonly limit?: number | undefined;
  readonly continue?: string | undefined;
  readonly resourceVersion?: string | undefined;
  /** How `resourceVersion` is read: `NotOlderThan` or `Exact`. */
  readonly resourceVersionMatch?: "NotOlderThan" | "Exact" | undefined;
  readonly signal?: AbortSignal | undefined;
}

/** One page of a list. */
export interface ListPage<T> {
  readonly items: T[];
  readonly resourceVersion: string;
  /** Token for the next page; empty on the last page. */
  readonly continue: string;
}

/** Options of {@linkcode KubeClient.watch}. */
export interface WatchOptions {
  readonly namespace?: string | undefined;
  readonly labelSelector?: string | undefined;
  readonly fieldSelector?: string | undefined;
  /** Start after this version (normally the list's). */
  readonly resourceVersion?: string | undefined;
  readonly allowWatchBookmarks?: boolean | undefined;
  /** Server-side timeout; the server ends the stream cleanly after it. */
  readonly timeoutSeconds?: number | undefined;
  readonly signal?: AbortSignal | undefined;
}

/** An event of a watch stream, or a line that could not be understood. */
export type WatchItem<T> =
  | { readonly type: "ADDED" | "MODIFIED" | "DELETED"; readonly object: T }
  | { readonly type: "BOOKMARK"; readonly object: KubeObject }
  | { readonly type: "ERROR"; readonly object: Status }
  | { readonly type: "MALFORMED"; readonly line: string; readonly error: string };

/** Options of writes. */
export interface WriteOptions {
  readonly signal?: AbortSignal | undefined;
  /** `fieldManager` for server-side apply and managed fields. */
  readonly fieldManager?: string | undefined;
}

/** Ways to patch. */
export type PatchType = "merge" | "strategic" | "json" | "apply";

const PATCH_CONTENT_TYPES: Record<PatchType, string> = {
  merge: "application/merge-patch+json",
  strategic: "application/strategic-merge-patch+json",
  json: "application/json-patch+json",
  apply: "application/apply-patch+yaml",
};

/** How long a request without a signal of its own may take (watches excepted). */
export const DEFAULT_REQUEST_TIMEOUT_MS = 60_000;

/** A client for one API server. */
export class KubeClient {
  readonly #access: KubeAccess;
  readonly #userAgent: string;
  readonly #requestTimeoutMs: number;

  constructor(access: KubeAccess, options: { userAgent?: string; requestTimeoutMs?: number } = {}) {
    this.#access = access;
    this.#userAgent = options.userAgent ?? "sluice";
    this.#requestTimeoutMs = options.requestTimeoutMs ?? DEFAULT_REQUEST_TIMEOUT_MS;
  }

  /** The API server's base URL. */
  get server(): string {
    return this.#access.server;
  }

  /** Sends one request; resolves to the response on 2xx, else throws {@linkcode KubeApiError}. */
  async request(
    method: string,
    path: string,
    options: {
      query?: Record<string, string | number | boolean | undefined> | undefined;
      body?: unknown;
      contentType?: string | undefined;
      signal?: AbortSignal | undefined;
      action?: string | undefined;
    } = {},
  ): Promise<Response> {
    // A request the caller gave no signal ends at a deadline (a watch ends at its own
    // timeoutSeconds): an answer that never comes must not hold a list, a status write or an
    // Event forever.
    const signal = options.signal ??
      (options.query?.watch === true ? undefined : AbortSignal.timeout(this.#requestTimeoutMs));
    const url = new URL(this.#access.server + path);
    for (const [k, v] of Object.entries(options.query ?? {})) {
      if (v !== undefined && v !== "") url.searchParams.set(k, String(v));
    }
    const headers = await this.#access.headers();
    headers.set("accept", "application/json");
    headers.set("user-agent", this.#userAgent);
    let body: string | undefined;
    if (options.body !== undefined) {
      headers.set("content-type", options.contentType ?? "application/json");
      body = typeof options.body === "string" ? options.body : JSON.stringify(options.body);
    }
    const init: RequestInit & { client: Deno.HttpClient } = {
      method,
      headers,
      client: this.#access.client,
    };
    if (body !== undefined) init.body = body;
    if (signal !== undefined) init.signal = signal;
    const response = await fetch(url, init);
    if (response.ok) return response;
    const text = await response.text();
    let status: Status | undefined;
    try {
      status = JSON.parse(text) as Status;
    } catch {
      status = { message: text.slice(0, 200) || `HTTP ${response.status}` };
    }
    throw new KubeApiError(options.action ?? `${method} ${path}`, response.status, status);
  }

  async #json<T>(method: string, path: string, options: Parameters<KubeClient["request"]>[2]) {
    const response = await this.request(method, path, options);
    return await response.json() as T;
  }

  /** Lists one page. */
  async list<T>(r: Resource, options: ListOptions = {}): Promise<ListPage<T>> {
    const list = await this.#json<
      { items?: T[]; metadata?: { resourceVersion?: string; continue?: string } }
    >(
      "GET",
      resourcePath(r, { namespace: options.namespace }),
      {
        query: {
          labelSelector: options.labelSelector,
          fieldSelector: options.fieldSelector,
          limit: options.limit,
          continue: options.continue,
          resourceVersion: options.resourceVersion,
          resourceVersionMatch: options.resourceVersionMatch,
        },
        signal: options.signal,
        action: `list ${r.plural}${
          options.namespace ? ` in namespace "${options.namespace}"` : ""
        }`,
      },
    );
    return {
      items: list.items ?? [],
      resourceVersion: list.metadata?.resourceVersion ?? "",
      continue: list.metadata?.continue ?? "",
    };
  }

  /** Lists every page (`limit` items at a time) and returns the items with the list's resourceVersion. */
  async listAll<T>(
    r: Resource,
    options: ListOptions = {},
  ): Promise<{ items: T[]; resourceVersion: string }> {
    const items: T[] = [];
    let token = "";
    let resourceVersion = "";
    do {
      const page = await this.list<T>(r, { ...options, continue: token || undefined });
      items.push(...page.items);
      resourceVersion = page.resourceVersion;
      token = page.continue;
    } while (token !== "");
    return { items, resourceVersion };
  }

  /** Reads one object. */
  async get<T>(r: Resource, at: Location, options: { signal?: AbortSignal } = {}): Promise<T> {
    return await this.#json<T>("GET", resourcePath(r, at), {
      signal: options.signal,
      action: `get ${r.kind} "${describe(at)}"`,
    });
  }

  /** Creates an object (or a subresource such as a ServiceAccount's `token`). */
  async create<T>(
    r: Resource,
    at: Location,
    object: unknown,
    options: WriteOptions = {},
  ): Promise<T> {
    return await this.#json<T>("POST", resourcePath(r, at), {
      body: object,
      query: { fieldManager: options.fieldManager },
      signal: options.signal,
      action: `create ${r.kind}${at.name ? ` "${describe(at)}"` : ""}${
        at.namespace ? ` in namespace "${at.namespace}"` : ""
      }`,
    });
  }

  /** Replaces an object (optimistic concurrency through its resourceVersion). */
  async update<T>(
    r: Resource,
    at: Location,
    object: unknown,
    options: WriteOptions = {},
  ): Promise<T> {
    return await this.#json<T>("PUT", resourcePath(r, at), {
      body: object,
      query: { fieldManager: options.fieldManager },
      signal: options.signal,
      action: `update ${r.kind} "${describe(at)}"`,
    });
  }

  /** Patches an object or subresource (`status`). `apply` is server-side apply (requires `fieldManager`). */
  async patch<T>(
    r: Resource,
    at: Location,
    patch: unknown,
    options: WriteOptions & { type?: PatchType; force?: boolean } = {},
  ): Promise<T> {
    const type = options.type ?? "merge";
    return await this.#json<T>("PATCH", resourcePath(r, at), {
      body: patch,
      contentType: PATCH_CONTENT_TYPES[type],
      query: { fieldManager: options.fieldManager, force: options.force },
      signal: options.signal,
      action: `patch ${r.kind} "${describe(at)}"`,
    });
  }

  /** Deletes an object; resolves also when it was already gone. */
  async delete(r: Resource, at: Location, options: { signal?: AbortSignal } = {}): Promise<void> {
    try {
      const response = await this.request("DELETE", resourcePath(r, at), {
        signal: options.signal,
        action: `delete ${r.kind} "${describe(at)}"`,
      });
      await response.body?.cancel();
    } catch (e) {
      if (e instanceof KubeApiError && e.isNotFound) return;
      throw e;
    }
  }

  /**
   * Opens a watch and yields its events as they arrive. Throws
   * {@linkcode KubeApiError} if the API refuses the watch (410 for a stale
   * resourceVersion). The stream ends when the server ends it (its timeout)
   * or when `signal` aborts.
   */
  async *watch<T>(r: Resource, options: WatchOptions = {}): AsyncGenerator<WatchItem<T>> {
    const response = await this.request("GET", resourcePath(r, { namespace: options.namespace }), {
      query: {
        watch: true,
        labelSelector: options.labelSelector,
        fieldSelector: options.fieldSelector,
        resourceVersion: options.resourceVersion,
        allowWatchBookmarks: options.allowWatchBookmarks,
        timeoutSeconds: options.timeoutSeconds,
      },
      signal: options.signal,
      action: `watch ${r.plural}`,
    });
    if (response.body === null) return;
    const lines = response.body.pipeThrough(new JsonLinesStream());
    for await (const line of lines) {
      if (!line.ok) {
        yield { type: "MALFORMED", line: line.line, error: line.error };
        continue;
      }
      const event = line.value as { type?: unknown; object?: unknown } | null;
      const type = typeof event === "object" && event !== null ? event.type : undefined;
      if (
        (type === "ADDED" || type === "MODIFIED" || type === "DELETED" || type === "BOOKMARK" ||
          type === "ERROR") && typeof event?.object === "object" && event.object !== null
      ) {
        yield { type, object: event.object } as WatchItem<T>;
      } else {
        yield {
          type: "MALFORMED",
          line: JSON.stringify(line.value).slice(0, 512),
          error: 'Not a watch event: expected a known "type" and an "object"',
        };
      }
    }
  }
}

function describe(at: Location): string {
  return at.namespace !== undefined ? `${at.namespace}/${at.name ?? ""}` : at.name ?? "";
}
