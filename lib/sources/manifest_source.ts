/**
 * A directory of YAML manifests as a source of objects (`--manifests DIR`),
 * for running Sluice without a cluster: every `.yaml`/`.yml` file directly in
 * the directory is read (multi-document), the directory is watched, and a
 * change reloads it after a short debounce, into the same store the
 * Kubernetes source fills.
 *
 * A file that cannot be parsed is reported with its path, line and column,
 * and its last good objects stay in place (so the last good snapshot keeps
 * serving). Documents of other kinds, or without a name, are reported and
 * skipped. Secrets are read as in the cluster: `type: kubernetes.io/tls`
 * only, `data` base64-encoded (`stringData` also works, as `kubectl apply`
 * would accept it).
 *
 * Owns file reading and watching. Knows nothing about routing.
 *
 * @module
 */
import { join } from "node:path";
import type { Logger } from "../log/logging.ts";
import type { KubeObject } from "../k8s/objects.ts";
import { type Kind, KINDS, storeKey } from "../store/matters.ts";
import { type ManifestObject, parseManifest } from "./manifests.ts";
import type { ManifestSourceStatus, ObjectSource, StoreWriter } from "./source.ts";
import { errorText } from "../log/error_text.ts";

const UTF8 = new TextDecoder("utf-8", { fatal: true });
/** The largest manifest file read (a Kubernetes object is at most about 1.5 MB in etcd). */
const MAX_MANIFEST_BYTES = 16 * 1024 * 1024;

/** Options of {@linkcode ManifestSource}. */
export interface ManifestSourceOptions {
  readonly directory: string;
  readonly logger: Logger;
  /** Watch the directory for changes. Default true. */
  readonly watch?: boolean;
  /** Quiet time after the last file event before reloading. Default 100 ms. */
  readonly debounceMs?: number;
  /** Reload interval when the directory cannot be read or watched. Default 2,000 ms. */
  readonly retryMs?: number;
  /** Wall-clock milliseconds, for `lastLoadTime`. `Date.now` by default. */
  readonly now?: () => number;
}

interface FileState {
  /** The text last read. */
  text: string;
  /** The objects of the last text that parsed. */
  objects: readonly ManifestObject[];
  /** Why the current text does not parse, if it does not. */
  error: string | undefined;
  skipped: number;
}

function isManifestName(name: string): boolean {
  return !name.startsWith(".") && (name.endsWith(".yaml") || name.endsWith(".yml"));
}

/** Objects from the manifest files of one directory, reloaded on change. */
export class ManifestSource implements ObjectSource {
  readonly name = "manifests";
  readonly #directory: string;
  readonly #logger: Logger;
  readonly #watch: boolean;
  readonly #debounceMs: number;
  readonly #retryMs: number;
  readonly #now: () => number;
  readonly #files = new Map<string, FileState>();
  readonly #synced: Promise<void>;
  #resolveSynced!: () => void;
  #isSynced = false;
  #writer: StoreWriter | undefined;
  #watcher: Deno.FsWatcher | undefined;
  #watchLoop: Promise<void> | undefined;
  #timer: ReturnType<typeof setTimeout> | undefined;
  #loading: Promise<void> = Promise.resolve();
  #stopped = false;
  #polling = false;
  /** Objects defined in two files, already reported. */
  #duplicates = new Set<string>();
  #loads = 0;
  #lastLoadTime: number | undefined;
  #directoryError: string | undefined;

  constructor(options: ManifestSourceOptions) {
    this.#directory = options.directory;
    this.#logger = options.logger.with({ directory: options.directory });
    this.#watch = options.watch ?? true;
    this.#debounceMs = options.debounceMs ?? 100;
    this.#retryMs = options.retryMs ?? 2_000;
    this.#now = options.now ?? Date.now;
    this.#synced = new Promise((resolve) => this.#resolveSynced = resolve);
  }

  get synced(): Promise<void> {
    return this.#synced;
  }

  get isSynced(): boolean {
    return this.#isSynced;
  }

  start(writer: StoreWriter): void {
    if (this.#writer !== undefined || this.#stopped) return;
    this.#writer = writer;
    // Watch first: a file written while the first load runs (or right after `synced`) then
    // still schedules a reload.
    if (this.#watch) this.#startWatching();
    void this.reload();
  }

  /** Reads the directory again now; resolves when the store has the result. */
  reload(): Promise<void> {
    // A failed load must not break the chain: every later reload would fail with it.
    this.#loading = this.#loading.then(() => this.#load()).catch((error) => {
      this.#logger.error("Cannot load manifests from {directory}: {error}", {
        error: errorText(error),
      });
    });
    return this.#loading;
  }

  status(): ManifestSourceStatus {
    const failedFiles: string[] = [];
    let skippedDocuments = 0;
    for (const [path, state] of this.#files) {
      if (state.error !== undefined) failedFiles.push(path);
      skippedDocuments += state.skipped;
    }
    return {
      type: "manifests",
      synced: this.#isSynced,
      directory: this.#directory,
      files: this.#files.size,
      failedFiles: failedFiles.sort(),
      loads: this.#loads,
      lastLoadTime: this.#lastLoadTime,
      skippedDocuments,
    };
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    clearTimeout(this.#timer);
    this.#timer = undefined;
    try {
      this.#watcher?.close();
    } catch {
      // already closed
    }
    await this.#watchLoop;
    await this.#loading;
  }

  #schedule(ms: number): void {
    if (this.#stopped) return;
    clearTimeout(this.#timer);
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      void this.reload().then(() => {
        if (this.#polling && this.#timer === undefined) this.#schedule(this.#retryMs);
      });
    }, ms);
  }

  #startWatching(): void {
    let watcher: Deno.FsWatcher;
    try {
      watcher = Deno.watchFs(this.#directory, { recursive: false });
    } catch (error) {
      this.#startPolling(error);
      return;
    }
    this.#watcher = watcher;
    this.#watchLoop = (async () => {
      try {
        for await (const _event of watcher) this.#schedule(this.#debounceMs);
      } catch (error) {
        if (!this.#stopped) this.#startPolling(error);
      }
    })();
  }

  /** Without file events, re-read the directory every `retryMs`. */
  #startPolling(error: unknown): void {
    if (this.#polling || this.#stopped) return;
    this.#polling = true;
    this.#logger.warn(
      "Cannot watch manifests directory {directory}: {error}; re-reading it every {retryMs} ms",
      { error: errorText(error), retryMs: this.#retryMs },
    );
    this.#schedule(this.#retryMs);
  }

  async #load(): Promise<void> {
    if (this.#stopped || this.#writer === undefined) return;
    let names: string[];
    try {
      names = await this.#manifestNames();
    } catch (error) {
      const detail = errorText(error);
      if (this.#directoryError !== detail) {
        this.#logger.error("Cannot read manifests directory {directory}: {error}", {
          error: detail,
        });
      }
      this.#directoryError = detail;
      // Until the directory can be read, try again now and then.
      if (!this.#polling) this.#schedule(this.#retryMs);
      return;
    }
    if (this.#directoryError !== undefined) {
      this.#logger.info("Reading manifests directory {directory} again", {});
      this.#directoryError = undefined;
    }
    const seen = new Set<string>();
    for (const name of names) {
      const path = join(this.#directory, name);
      let text: string;
      try {
        // Bounded: a huge file would be parsed whole into a syntax tree.
        if ((await Deno.stat(path)).size > MAX_MANIFEST_BYTES) {
          if (this.#files.has(path)) seen.add(path);
          this.#readFile(path, undefined, `the file is larger than ${MAX_MANIFEST_BYTES} bytes`);
          continue;
        }
        // Not readTextFile: it turns bytes that are not UTF-8 into U+FFFD without a word.
        text = UTF8.decode(await Deno.readFile(path));
      } catch (error) {
        // Gone between listing and reading, or unreadable: keep what we had.
        if (this.#files.has(path)) seen.add(path);
        if (error instanceof TypeError) {
          this.#readFile(path, undefined, "the file is not valid UTF-8");
          continue;
        }
        if (!(error instanceof Deno.errors.NotFound)) {
          this.#logger.warn("Cannot read manifest {path}: {error}", {
            path,
            error: errorText(error),
          });
        }
        continue;
      }
      seen.add(path);
      this.#readFile(path, text);
    }
    for (const path of [...this.#files.keys()]) if (!seen.has(path)) this.#files.delete(path);
    if (this.#stopped) return;
    this.#publish();
    this.#loads++;
    this.#lastLoadTime = this.#now();
    if (!this.#isSynced) {
      this.#isSynced = true;
      this.#logger.info("Loaded {files} manifest files from {directory}", {
        files: this.#files.size,
      });
      this.#resolveSynced();
    }
  }

  async #manifestNames(): Promise<string[]> {
    const names: string[] = [];
    for await (const entry of Deno.readDir(this.#directory)) {
      if (!isManifestName(entry.name)) continue;
      if (entry.isFile) names.push(entry.name);
      else if (entry.isSymlink) {
        // ConfigMap volumes link each key to a file under `..data/`.
        const target = await Deno.stat(join(this.#directory, entry.name)).catch(() => undefined);
        if (target?.isFile) names.push(entry.name);
      }
    }
    return names.sort();
  }

  #readFile(path: string, text: string | undefined, unreadable?: string): void {
    const previous = this.#files.get(path);
    if (previous !== undefined && text !== undefined && previous.text === text) return;
    let parsed: ReturnType<typeof parseManifest>;
    if (text === undefined) {
      parsed = { ok: false, line: 1, column: 1, message: unreadable ?? "the file is unreadable" };
    } else {
      try {
        parsed = parseManifest(text);
      } catch (error) {
        // The YAML library or a hostile document: a failed file, never a failed source.
        parsed = { ok: false, line: 1, column: 1, message: errorText(error).split("\n", 1)[0]! };
      }
    }
    if (!parsed.ok) {
      const error = `line ${parsed.line}, column ${parsed.column}: ${parsed.message}`;
      if (previous?.error !== error) {
        this.#logger.error(
          "Cannot load manifest {path}: {error}; keeping its last good objects",
          { path, error, line: parsed.line, column: parsed.column },
        );
      }
      this.#files.set(path, {
        text: text ?? "",
        objects: previous?.objects ?? [],
        error,
        skipped: previous?.skipped ?? 0,
      });
      return;
    }
    for (const problem of parsed.problems) {
      this.#logger.warn("Manifest {path}: {problem}", { path, problem });
    }
    if (previous?.error !== undefined) {
      this.#logger.info("Loaded manifest {path} again after its error was fixed", { path });
    }
    this.#files.set(path, {
      text: text ?? "",
      objects: parsed.objects,
      error: undefined,
      skipped: parsed.problems.length,
    });
  }

  /** Writes the union of every file's objects into the store, one list per kind. */
  #publish(): void {
    const byKind = new Map<Kind, Map<string, { object: KubeObject; path: string }>>(
      KINDS.map((kind) => [kind, new Map()]),
    );
    const paths = [...this.#files.keys()].sort();
    const duplicates = new Set<string>();
    for (const path of paths) {
      for (const { kind, object } of this.#files.get(path)!.objects) {
        const key = storeKey(kind, object)!;
        const objects = byKind.get(kind)!;
        const earlier = objects.get(key);
        const duplicate = `${kind} ${key} ${earlier?.path} ${path}`;
        if (earlier !== undefined && earlier.path !== path) duplicates.add(duplicate);
        if (earlier !== undefined && earlier.path !== path && !this.#duplicates.has(duplicate)) {
          this.#logger.warn("{kind} {key} is defined in both {first} and {path}; the latter wins", {
            kind,
            key,
            first: earlier.path,
            path,
          });
        }
        objects.set(key, { object, path });
      }
    }
    this.#duplicates = duplicates;
    for (const kind of KINDS) {
      this.#writer!.replace(kind, [...byKind.get(kind)!.values()].map((entry) => entry.object));
    }
  }
}
