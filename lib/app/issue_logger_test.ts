import { assertEquals } from "../../tests/support/assert.ts";
import type { Issue } from "../translate/issues.ts";
import { createIssueLogger, MAX_LOGGED_MESSAGE } from "./issue_logger.ts";

function issue(name: string, message = `Cannot resolve Service "shop/${name}"`): Issue {
  return { kind: "Ingress", namespace: "shop", name, field: "spec", message };
}

function recorder() {
  const lines: string[] = [];
  const log = createIssueLogger({
    warn: (_, properties) => lines.push(`${properties.name}: ${properties.message}`),
  });
  return { lines, log };
}

Deno.test("createIssueLogger() logs an issue once for as long as it persists, again after it came back", () => {
  const { lines, log } = recorder();
  log([issue("a"), issue("b")]);
  log([issue("a"), issue("b")]);
  log([issue("b")]);
  log([issue("a"), issue("b")]);
  assertEquals(lines, [
    'a: Cannot resolve Service "shop/a"',
    'b: Cannot resolve Service "shop/b"',
    'a: Cannot resolve Service "shop/a"',
  ]);
});

Deno.test("createIssueLogger() logs an issue whose message changed as a new one", () => {
  const { lines, log } = recorder();
  log([issue("a", "Cannot resolve port 80")]);
  log([issue("a", "Cannot resolve port 81")]);
  assertEquals(lines, ["a: Cannot resolve port 80", "a: Cannot resolve port 81"]);
});

Deno.test("createIssueLogger() cuts a message longer than 1,024 characters", () => {
  const { lines, log } = recorder();
  log([issue("a", "x".repeat(MAX_LOGGED_MESSAGE)), issue("b", "y".repeat(MAX_LOGGED_MESSAGE + 1))]);
  assertEquals(lines, [
    `a: ${"x".repeat(MAX_LOGGED_MESSAGE)}`,
    `b: ${"y".repeat(MAX_LOGGED_MESSAGE)}…`,
  ]);
});
