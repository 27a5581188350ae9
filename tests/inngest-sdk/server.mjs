// Starts a real `sandboxd serve` on a free loopback port with a fresh data directory,
// and stops it (after destroying what the tests left behind) when done.
import { spawn } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { Inngest } from "inngest";

const here = path.dirname(fileURLToPath(import.meta.url));
const binary = process.env.SANDBOXD_BIN ?? path.resolve(here, "../../target/debug/sandboxd");

/** The SDK sends `signkey-<env>-<sha256 of the hex-decoded key>` as its bearer token. */
export const hashSigningKey = (signingKey) => {
  const prefix = signingKey.match(/^signkey-\w+-/)?.[0] ?? "";
  const key = signingKey.slice(prefix.length);
  return `${prefix}${createHash("sha256").update(Buffer.from(key, "hex")).digest("hex")}`;
};

/** Spawns `sandboxd serve` and resolves once it logs `listening on ADDR`. */
const spawnServer = async (dataDir, signingKey) => {
  const child = spawn(binary, ["serve", "--listen", "127.0.0.1:0", "--data-dir", dataDir], {
    // Disk admission is tested on a filesystem of its own (full_disk.rs); a shared test
    // host's free space must not refuse these creates.
    env: {
      ...process.env,
      SANDBOXD_MASTER_KEY: hashSigningKey(signingKey),
      SANDBOXD_DISK_OVERCOMMIT: "1000",
      SANDBOXD_METRICS_LISTEN: "none",
      NO_COLOR: "1",
    },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let log = "";
  const address = await new Promise((resolve, reject) => {
    const onData = (chunk) => {
      log += chunk.toString();
      // eslint-disable-next-line no-control-regex
      const match = log.replace(/\x1b\[[0-9;]*m/g, "").match(/listening on (\S+)/);
      if (match) resolve(match[1]);
    };
    child.stdout.on("data", onData);
    child.stderr.on("data", onData);
    child.once("exit", (code) => reject(new Error(`sandboxd exited (${code}) before listening:\n${log}`)));
    child.once("error", reject);
  });
  const baseUrl = `http://${address}`;
  const inngest = new Inngest({ id: "sandboxd-conformance", signingKey, baseUrl, isDev: false });
  const stop = async () => {
    const exited = new Promise((resolve) => child.once("exit", resolve));
    child.kill("SIGTERM");
    await exited;
  };
  return { inngest, baseUrl, stop };
};

/**
 * A server over a fresh data directory. `restart()` stops it with SIGTERM and starts a
 * new one on the same directory; `stop()` destroys every sandbox left, stops the server
 * and removes the directory.
 */
export const startServer = async () => {
  const dataDir = await mkdtemp(path.join(tmpdir(), "sandboxd-sdk-"));
  const signingKey = `signkey-test-${randomBytes(32).toString("hex")}`;
  let running = await spawnServer(dataDir, signingKey);
  return {
    apiKey: hashSigningKey(signingKey),
    dataDir,
    binary,
    get inngest() {
      return running.inngest;
    },
    get baseUrl() {
      return running.baseUrl;
    },
    restart: async () => {
      await running.stop();
      running = await spawnServer(dataDir, signingKey);
    },
    stop: async () => {
      await destroyEverything(running.inngest).catch(() => undefined);
      await running.stop();
      await rm(dataDir, { recursive: true, force: true });
    },
  };
};

const destroyEverything = async (inngest) => {
  let cursor;
  do {
    const page = await inngest.sandboxes.list({ limit: 250, ...(cursor && { cursor }) });
    for (const sandbox of page.items) {
      if (!["TERMINATED", "FAILED", "TERMINATING"].includes(sandbox.status)) await sandbox.destroy();
    }
    cursor = page.page.hasMore ? page.page.cursor : undefined;
  } while (cursor);
};

/** Collects a stream of output chunks into text per stream. */
export const collect = async (stream, { until } = {}) => {
  const out = { STDOUT: "", STDERR: "" };
  const decoder = new TextDecoder();
  const reader = stream.getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    out[value.stream] += decoder.decode(value.data);
    if (until?.(out)) {
      await reader.cancel();
      break;
    }
  }
  return out;
};
