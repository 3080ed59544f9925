/**
 * The control loop: sources → store → coalesced rebuild → translate →
 * publish.
 *
 * - Nothing is published before every source has delivered its first
 *   complete picture (every reflector listed, or every manifest read); then
 *   the first translation is published at once and the controller is ready.
 * - After that, each change the store says matters schedules a rebuild
 *   (hold-off with a ceiling, see `rebuild_scheduler.ts`); a rebuild
 *   translates the whole store and publishes only when the translation
 *   differs from the last one published.
 * - Nothing is ever withdrawn for lack of news: while the API server is
 *   unreachable the sources simply deliver nothing and the last good
 *   translation stays published. A translation that throws (a bug) or a
 *   publish that fails is logged, and the last good one stays.
 * - A certificate expiring is a change too: a rebuild is scheduled for the
 *   moment the first published certificate expires.
 *
 * Owns readiness, rebuild pacing and the decision to publish. Knows nothing
 * about how objects arrive (sources) or how a translation is served (the
 * injected `publish`).
 *
 * @module
 */
import type { Logger } from "../log/logging.ts";
import type { ObjectSource, SourceStatus, StoreWriter } from "../sources/source.ts";
import type { Change, ChangeReason } from "../store/matters.ts";
import { ObjectStore, type ObjectStoreOptions } from "../store/object_store.ts";
import { translate as realTranslate } from "../translate/translate.ts";
import type {
  ClusterObjects,
  InspectCertificate,
  TranslateOptions,
  Translation,
} from "../translate/translation.ts";
import { jsonEqual } from "../store/json_equal.ts";
import { createTranslationMemo } from "../translate/translation_memo.ts";
import { REAL_TIMERS, RebuildScheduler, type SchedulerTimers } from "./rebuild_scheduler.ts";
import { errorText } from "../log/error_text.ts";

/** Translation options other than the clock and the certificate inspector. */
export type TranslateSettings = Omit<TranslateOptions, "now" | "inspectCertificate">;

/** Options of {@linkcode Controller}. */
export interface ControllerOptions {
  readonly sources: readonly ObjectSource[];
  readonly settings: TranslateSettings;
  /** Parses certificates; pass the memoising one from `lib/tls/certificate_inspector.ts`. */
  readonly inspectCertificate: InspectCertificate;
  /** Hands a new translation to the data plane. May be async; a rejection is logged and retried. */
  readonly publish: (translation: Translation) => void | Promise<void>;
  readonly logger: Logger;
  /** Wall-clock milliseconds, for certificate expiry. `Date.now` by default. */
  readonly now?: () => number;
  /** Monotonic clock and timers of the scheduler (and of retries). */
  readonly timers?: SchedulerTimers;
  /** Hold-off after the latest change. Default 10 ms. */
  readonly holdOffMs?: number;
  /** Default 250 ms. */
  readonly maxHoldOffMs?: number;
  /** Wait before publishing again after a failed publish. Default 1,000 ms. */
  readonly publishRetryMs?: number;
  /** The translation function; the real one by default (tests inject failures). */
  readonly translate?: (objects: ClusterObjects, options: TranslateOptions) => Translation;
  /** A store to fill; by default one made from `settings`. */
  readonly store?: ObjectStore;
}

/** Counters and state of a {@linkcode Controller}, for `/metrics` and `/readyz`. */
export interface ControllerStats {
  readonly ready: boolean;
  /** Rebuilds run (translations attempted). */
  readonly rebuilds: number;
  /** Translations handed to `publish` successfully. */
  readonly publishes: number;
  /** Rebuilds whose translation equalled the one already published. */
  readonly unchanged: number;
  readonly translateErrors: number;
  readonly publishErrors: number;
  /** Milliseconds the last translation took. */
  readonly lastTranslateMs: number | undefined;
  /** Wall-clock milliseconds of the last publish. */
  readonly lastPublishTime: number | undefined;
  /** Number of routes and issues in the published translation. */
  readonly routes: number;
  readonly issues: number;
  /** Store writes by verdict (`added`, `status-only`, `unreferenced-secret`, …). */
  readonly changes: Readonly<Record<ChangeReason, number>>;
  readonly sources: readonly SourceStatus[];
}

const MAX_TIMER_MS = 2 ** 31 - 1;

/** Runs sources into a store and publishes translations of it. */
export class Controller {
  readonly #options: ControllerOptions;
  readonly #store: ObjectStore;
  readonly #scheduler: RebuildScheduler;
  readonly #timers: SchedulerTimers;
  readonly #now: () => number;
  /** Per-object results reused across rebuilds (the store never changes an object in place). */
  readonly #memo = createTranslationMemo();
  readonly #translate: (objects: ClusterObjects, options: TranslateOptions) => Translation;
  readonly #logger: Logger;
  readonly #ready: Promise<void>;
  #resolveReady!: () => void;
  #isReady = false;
  #syncedAll = false;
  #started = false;
  #stopped = false;
  #stopSignal = new AbortController();
  #published: Translation | undefined;
  #expiryTimer: unknown;
  #expiryTimerSet = false;
  #retryTimer: unknown;
  #retryTimerSet = false;
  #rebuilds = 0;
  #publishes = 0;
  #unchanged = 0;
  #translateErrors = 0;
  #publishErrors = 0;
  #lastTranslateMs: number | undefined;
  #lastPublishTime: number | undefined;

  constructor(options: ControllerOptions) {
    this.#options = options;
    this.#logger = options.logger;
    this.#timers = options.timers ?? REAL_TIMERS;
    this.#now = options.now ?? Date.now;
    this.#translate = options.translate ?? realTranslate;
    const settings = options.settings;
    const storeOptions: ObjectStoreOptions = {
      ...(settings.controllerName !== undefined ? { controllerName: settings.controllerName } : {}),
      ...(settings.ingressClass !== undefined ? { ingressClass: settings.ingressClass } : {}),
      ...(settings.watchIngressWithoutClass !== undefined
        ? { watchIngressWithoutClass: settings.watchIngressWithoutClass }
        : {}),
      defaultSslCertificate: settings.defaultSslCertificate,
      defaultBackendService: settings.defaultBackendService,
    };
    this.#store = options.store ?? new ObjectStore(storeOptions);
    this.#scheduler = new RebuildScheduler({
      rebuild: () => this.#rebuild(),
      timers: this.#timers,
      ...(options.holdOffMs !== undefined ? { holdOffMs: options.holdOffMs } : {}),
      ...(options.maxHoldOffMs !== undefined ? { maxHoldOffMs: options.maxHoldOffMs } : {}),
      onError: (error) =>
        this.#logger.error("Cannot rebuild: {error}", { error: errorText(error) }),
    });
    this.#ready = new Promise((resolve) => this.#resolveReady = resolve);
  }

  /** The store the sources fill (read it, do not write it). */
  get store(): ObjectStore {
    return this.#store;
  }

  /** True once every source synced and the first translation was published; stays true. */
  get ready(): boolean {
    return this.#isReady;
  }

  /** Resolves when {@linkcode Controller.ready} becomes true. Stays pending if stopped before. */
  get whenReady(): Promise<void> {
    return this.#ready;
  }

  /** The translation last published, if any. */
  get published(): Translation | undefined {
    return this.#published;
  }

  /** Starts the sources; the first publish follows once all of them synced. */
  start(): void {
    if (this.#started || this.#stopped) return;
    this.#started = true;
    const writer = this.#writer();
    for (const source of this.#options.sources) source.start(writer);
    const stopped = new Promise<"stopped">((resolve) => {
      this.#stopSignal.signal.addEventListener("abort", () => resolve("stopped"), { once: true });
    });
    void Promise.race([
      Promise.all(this.#options.sources.map((s) => s.synced)).then(() => "synced" as const),
      stopped,
    ]).then(async (outcome) => {
      if (outcome === "stopped" || this.#stopped) return;
      this.#syncedAll = true;
      this.#logger.info("Every source synced: publishing the first translation", {});
      await this.#scheduler.flush();
    });
  }

  /** Stops the sources and the scheduler; resolves when nothing is left running. */
  async stop(): Promise<void> {
    this.#stopped = true;
    this.#stopSignal.abort();
    this.#cancelTimers();
    await Promise.all(this.#options.sources.map((s) => s.stop()));
    await this.#scheduler.stop();
    this.#cancelTimers();
  }

  /** Counters and state as of now. */
  stats(): ControllerStats {
    return {
      ready: this.#isReady,
      rebuilds: this.#rebuilds,
      publishes: this.#publishes,
      unchanged: this.#unchanged,
      translateErrors: this.#translateErrors,
      publishErrors: this.#publishErrors,
      lastTranslateMs: this.#lastTranslateMs,
      lastPublishTime: this.#lastPublishTime,
      routes: this.#published?.routes.length ?? 0,
      issues: this.#published?.issues.length ?? 0,
      changes: this.#store.counts,
      sources: this.#options.sources.map((s) => s.status()),
    };
  }

  /** Writes into the store and schedules a rebuild for every change that matters. */
  #writer(): StoreWriter {
    const store = this.#store;
    const after = (change: Change) => {
      if (change.matters && this.#syncedAll && !this.#stopped) this.#scheduler.notify();
      return change;
    };
    return {
      replace: (kind, items, scope) => after(store.replace(kind, items, scope)),
      upsert: (kind, object) => after(store.upsert(kind, object)),
      delete: (kind, object) => after(store.delete(kind, object)),
    };
  }

  async #rebuild(): Promise<void> {
    if (this.#stopped) return;
    this.#rebuilds++;
    const started = performance.now();
    let translation: Translation;
    try {
      translation = this.#translate(this.#store.objects(), {
        ...this.#options.settings,
        memo: this.#memo,
        now: this.#now(),
        inspectCertificate: this.#options.inspectCertificate,
      });
    } catch (error) {
      this.#translateErrors++;
      this.#logger.error("Cannot translate the cluster: {error}; keeping the last good routes", {
        error: errorText(error),
      });
      return;
    } finally {
      this.#lastTranslateMs = performance.now() - started;
    }
    if (this.#published !== undefined && jsonEqual(this.#published, translation)) {
      this.#unchanged++;
      this.#armExpiry(translation);
      return;
    }
    const publishing = performance.now();
    try {
      await this.#options.publish(translation);
    } catch (error) {
      this.#publishErrors++;
      this.#logger.error("Cannot publish the new routes: {error}; retrying", {
        error: errorText(error),
      });
      this.#retryPublish();
      return;
    }
    this.#published = translation;
    this.#publishes++;
    this.#lastPublishTime = this.#now();
    const round = (ms: number) => Math.round(ms * 10) / 10;
    this.#logger.debug(
      "Published {routes} routes, {issues} issues in {ms} ms (translate {translateMs} ms, publish {publishMs} ms)",
      {
        routes: translation.routes.length,
        issues: translation.issues.length,
        ms: round(performance.now() - started),
        translateMs: round(this.#lastTranslateMs ?? 0),
        publishMs: round(performance.now() - publishing),
      },
    );
    this.#armExpiry(translation);
    if (!this.#isReady) {
      this.#isReady = true;
      this.#logger.info("Ready: the first routes are published", {});
      this.#resolveReady();
    }
  }

  #retryPublish(): void {
    if (this.#stopped || this.#retryTimerSet) return;
    this.#retryTimerSet = true;
    this.#retryTimer = this.#timers.setTimeout(() => {
      this.#retryTimerSet = false;
      if (!this.#stopped) this.#scheduler.notify();
    }, this.#options.publishRetryMs ?? 1_000);
  }

  /** Schedules a rebuild for when the first published certificate expires. */
  #armExpiry(translation: Translation): void {
    if (this.#expiryTimerSet) {
      this.#timers.clearTimeout(this.#expiryTimer);
      this.#expiryTimerSet = false;
    }
    if (this.#stopped) return;
    const now = this.#now();
    let first = Infinity;
    const bindings = [...translation.certificates];
    if (translation.defaultCertificate !== undefined) bindings.push(translation.defaultCertificate);
    for (const binding of bindings) {
      const notAfter = Date.parse(binding.notAfter);
      if (!Number.isNaN(notAfter) && notAfter >= now) first = Math.min(first, notAfter);
    }
    if (first === Infinity) return;
    // Expiry is judged as `now > notAfter`: rebuild just after.
    const delay = Math.min(MAX_TIMER_MS, first - now + 1_000);
    this.#expiryTimerSet = true;
    this.#expiryTimer = this.#timers.setTimeout(() => {
      this.#expiryTimerSet = false;
      if (!this.#stopped) this.#scheduler.notify();
    }, delay);
  }

  #cancelTimers(): void {
    if (this.#expiryTimerSet) this.#timers.clearTimeout(this.#expiryTimer);
    if (this.#retryTimerSet) this.#timers.clearTimeout(this.#retryTimer);
    this.#expiryTimerSet = false;
    this.#retryTimerSet = false;
  }
}
