import { execFileSync } from 'node:child_process';
import { closeSync, mkdtempSync, openSync, rmdirSync, rmSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { haproxyVersionUnderTest } from '../support/haproxy-testbed.js';
import { type ServiceProcess, startServiceProcess } from '../support/service-process.js';
import { type NamedTlsServer, sniProbe, startNamedTlsServer } from '../support/tls.js';
import { waitFor } from '../support/wait.js';
import { describeFault, readyz, type StockFaultBed, startFaultBed } from './harness.js';

// The state folder full (a 64 KiB tmpfs, filled) or read-only (remounted): the tests run as root, whom
// permissions do not stop. Writes must answer 503 and acknowledge nothing they did not store; the routes in
// HAProxy stay as they were; once the folder is writable again, writes go through and converge.
describeFault('stock', `state folder full or read-only, HAProxy ${haproxyVersionUnderTest()}`, () => {
  let bed: StockFaultBed;
  let service: ServiceProcess;
  let stateDir: string;
  const servers: Record<string, NamedTlsServer> = {};
  /** The clusters acknowledged with 202: exactly what must be stored and routed. */
  const acked = new Map<string, string>();
  let n = 0;
  let refused = 0;

  const change = async (method: 'PUT' | 'DELETE', name: string, server = 'a') =>
    service.client.request(
      method,
      `/v1/clusters/${name}?n=${n++}`,
      method === 'PUT'
        ? {
            control_plane_host: `${name}.example.com`,
            public_access_mode: 'loadbalancer',
            node_port: servers[server]?.port,
          }
        : undefined,
    );
  const accepted = async (method: 'PUT' | 'DELETE', name: string, server = 'a') => {
    const res = await change(method, name, server);
    expect(res.status).toBe(202);
    if (method === 'PUT') acked.set(name, server);
    else acked.delete(name);
  };
  const unavailable = async (method: 'PUT' | 'DELETE', name: string, server = 'b') => {
    const res = await change(method, name, server);
    expect({ name, status: res.status, error: res.body?.error }).toEqual({
      name,
      status: 503,
      error: 'state_unavailable',
    });
    refused++;
  };
  const storedAndRouted = async () => {
    const want = [...acked.keys()].sort();
    await waitFor(
      async () => {
        const listed = await service.client.request('GET', '/v1/clusters');
        const clusters = listed.body.clusters as Array<{ name: string; state: string }>;
        const routes = await bed.routes();
        return {
          names: clusters.map((c) => c.name).sort(),
          states: clusters.map((c) => c.state),
          hosts: [...routes.keys()].sort(),
        };
      },
      30_000,
      `exactly ${want.join(', ')} stored and routed`,
      {
        ok: (r) =>
          r.names.join() === want.join() &&
          r.states.every((s) => s === 'applied') &&
          r.hosts.join() === want.map((w) => `${w}.example.com`).join(),
        everyMs: 300,
      },
    );
    for (const [name, server] of acked)
      expect(await sniProbe(bed.sniPort, `${name}.example.com`)).toEqual({ reached: server });
  };

  beforeAll(async () => {
    for (const name of ['a', 'b']) servers[name] = await startNamedTlsServer(name);
    stateDir = mkdtempSync(join(tmpdir(), 'kubebyon-statefs-'));
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=64k,mode=0700', 'tmpfs', stateDir]);
    bed = await startFaultBed({ stateDir });
    service = await startServiceProcess(bed.env(), bed.secret);
  });
  afterAll(async () => {
    await service?.stop();
    await bed?.stop();
    if (stateDir) {
      execFileSync('umount', [stateDir]);
      rmdirSync(stateDir);
    }
    await Promise.all(Object.values(servers).map((s) => s.close()));
  });

  it('full: writes answer 503 state_unavailable, nothing is stored or routed, and it recovers when space is freed', async () => {
    await accepted('PUT', 'one');
    await accepted('PUT', 'two');
    await storedAndRouted();
    // Fill the file system to the last byte.
    const filler = join(stateDir, 'filler');
    const fd = openSync(filler, 'w');
    const chunk = Buffer.alloc(4096, 1);
    try {
      for (;;) writeSync(fd, chunk);
    } catch (err) {
      expect((err as NodeJS.ErrnoException).code).toBe('ENOSPC');
    }
    try {
      for (;;) writeSync(fd, chunk, 0, 1);
    } catch {
      // full
    }
    closeSync(fd);
    for (let i = 0; i < 5; i++) await unavailable('PUT', `new${i}`);
    await unavailable('PUT', 'one', 'b');
    await unavailable('DELETE', 'two');
    await unavailable('PUT', 'clusters-set-item');
    const set = await service.client.request('PUT', `/v1/clusters?n=${n++}`, { clusters: [] });
    expect(set.status).toBe(503);
    refused++;
    await storedAndRouted();
    // Readiness says that changes cannot be stored, and says so until they can again (no write needed).
    await waitFor(() => readyz(service.url), 10_000, 'readiness to report the state folder unwritable', {
      ok: (r) => r.status === 503 && r.body.checks.state?.ok === false,
    });

    rmSync(filler);
    await waitFor(() => readyz(service.url), 10_000, 'readiness once space is free', {
      ok: (r) => r.status === 200,
    });
    await accepted('PUT', 'three', 'b');
    await accepted('DELETE', 'two');
    await storedAndRouted();
  });

  it('read-only: writes answer 503 state_unavailable, nothing is stored or routed, and it recovers when writable', async () => {
    execFileSync('mount', ['-o', 'remount,ro', stateDir]);
    try {
      await unavailable('PUT', 'four');
      await unavailable('DELETE', 'one');
      await unavailable('PUT', 'three', 'a');
      await storedAndRouted();
      await waitFor(() => readyz(service.url), 10_000, 'readiness to report the state folder read-only', {
        ok: (r) => r.status === 503 && r.body.checks.state?.ok === false,
      });
    } finally {
      execFileSync('mount', ['-o', 'remount,rw', stateDir]);
    }
    await waitFor(() => readyz(service.url), 10_000, 'readiness once writable', {
      ok: (r) => r.status === 200,
    });
    await accepted('PUT', 'four', 'b');
    await storedAndRouted();
  });

  it('after a kill -9 and a restart, holds exactly what was acknowledged', async () => {
    await service.kill9();
    service = await startServiceProcess(bed.env(), bed.secret);
    await storedAndRouted();
    console.log(
      `[measure] state folder full / read-only: ${refused} writes refused with 503, ${acked.size} acknowledged clusters kept`,
    );
  });
});
