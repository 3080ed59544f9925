/**
 * Test support for leader election and publishing back against the real
 * kube-apiserver (`tests/integration/leader_election_test.ts` and
 * `publish_test.ts`): the short timings their electors run on (lease 2 s, the
 * API counting whole seconds; renew deadline 1 s; retry period 0.25 s), an
 * {@linkcode elector} on them that marks its transitions on a
 * {@linkcode Timeline}, and the status an Ingress was published with. Owns no
 * cluster, namespace or client: tests pass in their own. Not part of Sluice.
 *
 * @module
 */
import type { KubeClient } from "../../lib/k8s/kube_client.ts";
import type { Ingress } from "../../lib/k8s/objects.ts";
import { INGRESSES } from "../../lib/k8s/resources.ts";
import {
  LeaderElector,
  type LeaderElectorOptions,
  type LeaseClient,
} from "../../lib/publish/leader_election.ts";

export const LEASE_MS = 2_000;
export const RENEW_DEADLINE_MS = 1_000;
export const RETRY_MS = 250;

/** The Lease the electors compete for (the elector's default). */
export const LEASE_NAME = "sluice-leader";

/** Leadership transitions of one or more electors, with monotonic times. */
export class Timeline {
  readonly entries: { what: string; at: number }[] = [];
  mark(what: string): void {
    this.entries.push({ what, at: performance.now() });
  }
  at(what: string): number | undefined {
    return this.entries.find((e) => e.what === what)?.at;
  }
  count(what: string): number {
    return this.entries.filter((e) => e.what === what).length;
  }
  toString(): string {
    const t0 = this.entries[0]?.at ?? 0;
    return this.entries.map((e) => `${Math.round(e.at - t0)} ms ${e.what}`).join(", ");
  }
}

/** Options of {@linkcode elector}: whatever else the test's elector needs. */
export interface ElectorOptions extends Partial<Omit<LeaderElectorOptions, "client">> {
  readonly namespace: string;
  readonly identity: string;
  /** Marked with `<identity> started` and `<identity> stopped`. */
  readonly timeline: Timeline;
}

/** An elector on the short timings (not started), marking its transitions on the timeline. */
export function elector(client: LeaseClient, options: ElectorOptions): LeaderElector {
  const { namespace, identity, timeline, ...extra } = options;
  return new LeaderElector({
    client,
    namespace,
    identity,
    leaseDurationMs: LEASE_MS,
    renewDeadlineMs: RENEW_DEADLINE_MS,
    retryPeriodMs: RETRY_MS,
    onStartedLeading: () => timeline.mark(`${identity} started`),
    onStoppedLeading: () => timeline.mark(`${identity} stopped`),
    ...extra,
  });
}

/** The addresses in the status of Ingress `ns/name`, joined by commas ("" for none). */
export async function ingressStatusOf(
  client: KubeClient,
  ns: string,
  name = "web",
): Promise<string> {
  const found = await client.get<Ingress>(INGRESSES, { namespace: ns, name });
  return (found.status?.loadBalancer?.ingress ?? []).map((a) => a.ip ?? a.hostname).join(",");
}
