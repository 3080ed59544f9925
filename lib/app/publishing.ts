/**
 * Publishing back to the cluster, wired: leader election on a Lease, Ingress
 * status for our class, and Events for the routing model's issues. Only the
 * leader writes; every replica serves traffic. Fed by the controller's store
 * after each publish and on a periodic resync (status-only changes made by
 * others do not trigger rebuilds), and, with `--publish-service`, whenever
 * that Service changes (a new load-balancer address changes no route, so it
 * triggers no publish).
 *
 * A replica that does not lead, or that has no address to publish, skips the
 * status work (a pass over every Ingress) altogether. Gateway API status
 * follows a publish by a short delay, one pass for the publishes meanwhile.
 *
 * @module
 */
import type { KubeClient } from "../k8s/kube_client.ts";
import type { Ingress, Service } from "../k8s/objects.ts";
import type { Logger } from "../log/logging.ts";
import { EventRecorder } from "../publish/event_recorder.ts";
import { LeaderElector, leaderIdentity } from "../publish/leader_election.ts";
import { desiredAddresses, type PublishedService, StatusWriter } from "../publish/status_writer.ts";
import { GatewayStatusWriter } from "../publish/gateway_status_writer.ts";
import { DEFAULT_CONTROLLER_NAME } from "../translate/class_selection.ts";
import type { ObjectStore } from "../store/object_store.ts";
import { type ClassSelectionOptions, createClassSelector } from "../translate/class_selection.ts";
import type { Translation } from "../translate/translation.ts";
import { coalescedTask } from "./coalesced_task.ts";

/** Kinds whose Events name the object by uid (looked up in the store). */
const LOOKUP_KINDS = [
  "Ingress",
  "Service",
  "Secret",
  "GatewayClass",
  "Gateway",
  "HTTPRoute",
  "ReferenceGrant",
] as const;

/** Options of {@linkcode startPublishing}. */
export interface PublishingOptions {
  readonly client: KubeClient;
  readonly store: ObjectStore;
  readonly classes: ClassSelectionOptions;
  readonly electionId: string;
  readonly electionNamespace: string;
  /** Base of this replica's identity (pod name or hostname). */
  readonly identity: string;
  readonly publishService: string | undefined;
  readonly publishStatusAddresses: readonly string[];
  readonly logger: Logger;
  /** How often status is re-checked without a rebuild. Default 60 s. */
  readonly resyncMs?: number;
  /** How often the store's copy of the publish Service is checked for a change. Default 1 s. */
  readonly publishServiceCheckMs?: number;
  /**
   * How long after a published translation the Gateway API status pass runs;
   * translations published meanwhile share it. Default 500 ms.
   */
  readonly gatewayStatusDelayMs?: number;
}

/** The running publishers. */
export interface Publishing {
  readonly elector: LeaderElector;
  /** Call after every published translation. */
  published(translation: Translation): void;
  /** Stops writing and releases the Lease. */
  stop(): Promise<void>;
}

/** Starts leader election and the status and Event publishers. */
export function startPublishing(options: PublishingOptions): Publishing {
  const { store, logger } = options;
  const elector: LeaderElector = new LeaderElector({
    client: options.client,
    namespace: options.electionNamespace,
    name: options.electionId,
    identity: leaderIdentity(options.identity),
    logger: logger.with({ component: "leader-election" }),
    onStartedLeading: () => {
      logger.info("Became the leader: writing Ingress status and Events", {});
      syncStatus();
      syncGatewayStatus();
      void writer.resync();
      void recorder.record(lastIssues);
    },
    onStoppedLeading: (reason) => logger.info("Stopped leading: {reason}", { reason }),
  });
  const isLeader = () => elector.isLeader();
  const writer = new StatusWriter({
    client: options.client,
    isLeader,
    ...(options.publishStatusAddresses.length > 0
      ? { publishStatusAddresses: [...options.publishStatusAddresses] }
      : {}),
    ...(options.publishService !== undefined ? { publishService: options.publishService } : {}),
    logger: logger.with({ component: "status" }),
  });
  const recorder = new EventRecorder({
    client: options.client,
    isLeader,
    lookup: ({ kind, namespace, name }) => {
      const k = LOOKUP_KINDS.find((known) => known === kind);
      if (k === undefined) return undefined;
      const o = store.get(k, namespace === "" ? name : `${namespace}/${name}`) as
        | { metadata?: { uid?: string; resourceVersion?: string } }
        | undefined;
      return o?.metadata?.uid === undefined
        ? undefined
        : { uid: o.metadata.uid, resourceVersion: o.metadata.resourceVersion ?? "" };
    },
    logger: logger.with({ component: "events" }),
  });

  const gatewayWriter = new GatewayStatusWriter({
    client: options.client,
    isLeader,
    logger: logger.with({ component: "gateway-status" }),
  });
  let lastGateway: Translation["gateway"];
  // Gateway API status is written whatever the addresses (conditions and
  // attached routes do not depend on them).
  const syncGatewayStatus = () => {
    if (lastGateway === undefined || !elector.isLeader()) return;
    const publishService = options.publishService === undefined
      ? undefined
      : store.get("Service", options.publishService) as PublishedService | undefined;
    void gatewayWriter.sync({
      statuses: lastGateway.statuses,
      gatewayClasses: store.list("GatewayClass"),
      gateways: store.list("Gateway"),
      httpRoutes: store.list("HTTPRoute"),
      controllerName: options.classes.controllerName ?? DEFAULT_CONTROLLER_NAME,
      addresses: desiredAddresses({
        addresses: options.publishStatusAddresses,
        service: publishService,
      }) ?? [],
    });
  };

  // A pass plans the status of every Gateway API object (a pass over every HTTPRoute) and writes
  // what changed: after a publish it waits, off the path of the next change, and the
  // translations published meanwhile share it (the latest one is written).
  const gatewayStatusAfterPublish = coalescedTask(syncGatewayStatus, {
    delayMs: options.gatewayStatusDelayMs ?? 500,
  });

  let lastIssues: Translation["issues"] = [];
  // Without addresses there is nothing to write nor to clear (see `planStatus`).
  const statusWanted = options.publishStatusAddresses.length > 0 ||
    options.publishService !== undefined;
  const syncStatus = () => {
    if (!statusWanted || !elector.isLeader()) return;
    const ingresses = store.list("Ingress") as Ingress[];
    const select = createClassSelector(store.list("IngressClass"), options.classes);
    const owned = new Set<string>();
    for (const ingress of ingresses) {
      if (select(ingress).ours) {
        owned.add(`${ingress.metadata?.namespace}/${ingress.metadata?.name}`);
      }
    }
    const publishService = options.publishService === undefined
      ? undefined
      : store.get("Service", options.publishService) as Service | undefined;
    void writer.sync({
      ingresses,
      owned,
      ...(publishService !== undefined
        ? { publishService: publishService as PublishedService }
        : {}),
    });
  };

  // The publish Service's own changes matter to status only: follow its resourceVersion.
  let publishServiceVersion: string | undefined;
  const checkPublishService = () => {
    if (options.publishService === undefined) return;
    const service = store.get("Service", options.publishService);
    const version = service === undefined ? "" : service.metadata?.resourceVersion ?? "?";
    if (version === publishServiceVersion) return;
    publishServiceVersion = version;
    syncStatus();
    syncGatewayStatus();
  };

  elector.start();
  const timer = setInterval(() => {
    syncStatus();
    syncGatewayStatus();
  }, options.resyncMs ?? 60_000);
  const serviceTimer = options.publishService === undefined
    ? undefined
    : setInterval(checkPublishService, options.publishServiceCheckMs ?? 1_000);

  return {
    elector,
    published(translation) {
      lastIssues = translation.issues;
      lastGateway = translation.gateway;
      syncStatus();
      gatewayStatusAfterPublish.request();
      void recorder.record(translation.issues);
    },
    async stop() {
      clearInterval(timer);
      clearInterval(serviceTimer);
      gatewayStatusAfterPublish.cancel();
      await writer.close();
      await gatewayWriter.close();
      await recorder.close();
      await elector.stop({ release: true });
    },
  };
}
