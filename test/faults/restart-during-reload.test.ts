import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { DEFAULT_RENDER_OPTIONS, renderDesired } from '../../src/haproxy/render.js';
import { plan } from '../../src/plan/plan.js';
import type { StockHaproxyProvider } from '../../src/providers/haproxy/provider.js';
import { resolveRoutes } from '../../src/routes/route.js';
import { haproxyVersionUnderTest } from '../support/haproxy-testbed.js';
import { ownedBy } from '../support/stock-haproxy.js';
import { type NamedTlsServer, sniProbe, startNamedTlsServer } from '../support/tls.js';
import { describeFault, docker, type StockFaultBed, startFaultBed } from './harness.js';

// HAProxy restarted at the very moment the provider reloads it: the `reload` never reaches the old master,
// and the new master loads the owned file (already committed) from disk, with a reload count that starts at 0.
// The provider must take that as the end of the reload and confirm the new file runs, not wait out its
// reload timeout for a count that will not pass the old one.
describeFault('stock', `HAProxy restarted during a reload, HAProxy ${haproxyVersionUnderTest()}`, () => {
  let bed: StockFaultBed;
  let backend: NamedTlsServer;

  beforeAll(async () => {
    backend = await startNamedTlsServer('a');
    bed = await startFaultBed();
  });
  afterAll(async () => {
    await bed?.stop();
    await backend?.close();
  });

  it('finishes the apply once the restarted HAProxy runs the new file', async () => {
    const provider: StockHaproxyProvider = bed.reader;
    const render = {
      ...DEFAULT_RENDER_OPTIONS,
      bind: { address: '127.0.0.1', port: bed.sniPort },
      healthChecks: false,
    };
    const claims = [
      {
        cluster: 'one',
        host: 'one.example.com',
        endpoints: [{ address: '127.0.0.1', port: backend.port }],
        claimedAt: 0,
      },
    ];
    const desired = renderDesired(resolveRoutes(claims).routes, render);
    // One reload first, so that the master's count is above 0; then let its uptime pass a second.
    await bed.haproxy.owned?.reloadWith('');
    await sleep(1_500);
    const id = await bed.containerId();
    // The `reload` command is replaced by a restart of the container: the connection drops, as it would.
    const cli = (
      provider as unknown as { cli: { send(command: string, ...rest: unknown[]): Promise<string> } }
    ).cli;
    const send = cli.send.bind(cli);
    let restarted = false;
    cli.send = async (command: string, ...rest: unknown[]) => {
      if (command !== 'reload') return send(command, ...rest);
      restarted = true;
      await docker('restart', '-t', '0', id);
      return '';
    };
    const owned = ownedBy(provider);
    const current = await owned.read(AbortSignal.timeout(30_000));
    const p = plan(desired, current.state);
    expect(p.operations.map((o) => o.kind)).toContain('create_frontend');
    const started = Date.now();
    const report = await owned.apply(p, current, AbortSignal.timeout(60_000));
    const ms = Date.now() - started;
    cli.send = send;
    expect(restarted).toBe(true);
    expect(report.reload).toBe('succeeded');
    expect(await sniProbe(bed.sniPort, 'one.example.com')).toEqual({ reached: 'a' });
    expect(
      plan(desired, (await owned.read(AbortSignal.timeout(30_000), { fresh: true })).state).operations,
    ).toEqual([]);
    console.log(
      `[measure] restart during a reload: apply finished ${(ms / 1000).toFixed(1)} s after it began`,
    );
  });
});
