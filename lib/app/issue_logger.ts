/**
 * Logs the routing model's issues after each publish: each issue once, for as
 * long as it persists (logged again only after it went away and came back),
 * with its message cut to the length Kubernetes Events keep.
 *
 * Knows nothing of where issues come from or of Events.
 *
 * @module
 */
import type { Issue } from "../translate/issues.ts";

/** Longest issue message logged whole (Events cut theirs at 1,024 characters too). */
export const MAX_LOGGED_MESSAGE = 1_024;

/** Where the lines go; LogTape's `Logger` fits. */
export interface IssueLogTarget {
  warn(message: string, properties: Record<string, unknown>): void;
}

/**
 * Returns a function to call with every published translation's issues: it
 * warns about those not in the previous call's list.
 */
export function createIssueLogger(logger: IssueLogTarget): (issues: readonly Issue[]) => void {
  let seen = new Set<string>();
  return (issues) => {
    const current = new Set<string>();
    for (const issue of issues) {
      const key = JSON.stringify(issue);
      current.add(key);
      if (seen.has(key)) continue;
      // Messages quote users' values: a 1 MB path must not make a 1 MB log line.
      const message = issue.message.length > MAX_LOGGED_MESSAGE
        ? `${issue.message.slice(0, MAX_LOGGED_MESSAGE)}…`
        : issue.message;
      logger.warn("{kind} {namespace}/{name}: {message}", { ...issue, message });
    }
    seen = current;
  };
}
