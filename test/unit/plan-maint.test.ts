import { describe, expect, it } from 'vitest';
import type { ServerState } from '../../src/haproxy/model.js';
import type { Operation } from '../../src/plan/operations.js';
import { planServers } from '../../src/plan/plan.js';

const server = (over: Partial<ServerState> = {}): ServerState => ({
  name: 'srv1',
  address: '127.0.0.1',
  port: 31001,
  check: false,
  tags: {},
  owned: true,
  ...over,
});

// Found with kill -9 against the real Data Plane API (test/dataplaneapi/crash.test.ts, v3.4.0, kill 49 of 200):
// a runtime server is added in maintenance and made ready by a second request; a process killed between the
// two left it in maintenance, the next one read it as there, planned nothing, and the host was refused for
// good while its status said applied.
describe('a server in maintenance', () => {
  it('is planned again when wanted, and left alone when ready', () => {
    const want = [{ address: '127.0.0.1', port: 31001, check: false }];
    const ready: Operation[] = [];
    planServers('kubebyon_slot_00001', want, [server()], ready);
    expect(ready).toEqual([]);
    const maint: Operation[] = [];
    planServers('kubebyon_slot_00001', want, [server({ maint: true })], maint);
    expect(maint).toEqual([
      {
        kind: 'update_server',
        backend: 'kubebyon_slot_00001',
        server: { name: 'srv1', address: '127.0.0.1', port: 31001, check: false },
        changes: [{ field: 'state', from: 'maint', to: 'ready' }],
      },
    ]);
  });

  it('is deleted when no longer wanted', () => {
    const ops: Operation[] = [];
    planServers('kubebyon_slot_00001', [], [server({ maint: true })], ops);
    expect(ops.map((o) => o.kind)).toEqual(['delete_server']);
  });
});
