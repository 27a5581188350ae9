// X-Inngest-Env with the real SDK: a signing key registered as an account-scoped key
// (`sandboxd keys create --account --key-stdin`) works once the client names its
// environment (`new Inngest({ env })`), and is refused without one.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { after, before, describe, it } from "node:test";
import { Inngest } from "inngest";
import { hashSigningKey, startServer } from "./server.mjs";

describe("account-scoped keys and X-Inngest-Env", () => {
  let server;
  const signingKey = `signkey-prod-${randomBytes(32).toString("hex")}`;
  const client = (env) =>
    new Inngest({ id: "sandboxd-env", signingKey, baseUrl: server.baseUrl, isDev: false, ...(env && { env }) })
      .sandboxes;

  before(async () => {
    server = await startServer();
    execFileSync(server.binary, ["keys", "create", "--account", "--key-stdin", "--data-dir", server.dataDir], {
      input: `${hashSigningKey(signingKey)}\n`,
    });
  });

  after(async () => {
    await server?.stop();
  });

  it("selects the environment the client names", async () => {
    const sandbox = await server.inngest.sandboxes.create({ name: "sdk-env", vcpu: 1, memoryMb: 256 });
    const page = await client("production").list({ limit: 10 });
    assert.deepEqual(
      page.items.map((s) => s.id),
      [sandbox.id],
    );
    const got = await client("production").get(sandbox.id);
    assert.equal(got.name, "sdk-env");
    await sandbox.destroy();
  });

  it("refuses a missing or unknown environment with invalid_request", async () => {
    for (const env of [undefined, "nowhere"]) {
      await assert.rejects(client(env).list({ limit: 10 }), (err) => {
        assert.equal(err.status ?? err.statusCode, 400, `${env}: ${err}`);
        assert.match(`${err.code ?? ""} ${err.message}`, /invalid_request|X-Inngest-Env/);
        return true;
      });
    }
  });
});
