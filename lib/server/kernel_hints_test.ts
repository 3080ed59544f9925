import { assertEquals } from "../../tests/support/assert.ts";
import { TCP_MIGRATE_REQ_PATH, tcpMigrateReqEnabled } from "./kernel_hints.ts";

Deno.test("tcpMigrateReqEnabled() reads the sysctl file and says undefined when it cannot", async () => {
  const files = new Map([[TCP_MIGRATE_REQ_PATH, "1\n"]]);
  const readTextFile = (path: string) => {
    const text = files.get(path);
    return text === undefined
      ? Promise.reject(new Deno.errors.NotFound(path))
      : Promise.resolve(text);
  };
  assertEquals(await tcpMigrateReqEnabled({ readTextFile }), true);
  files.set(TCP_MIGRATE_REQ_PATH, "0\n");
  assertEquals(await tcpMigrateReqEnabled({ readTextFile }), false);
  files.clear();
  assertEquals(await tcpMigrateReqEnabled({ readTextFile }), undefined);
});
