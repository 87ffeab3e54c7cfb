import type { RawState } from '../../src/haproxy/model.js';
import { DEFAULT_RENDER_OPTIONS } from '../../src/haproxy/render.js';
import { MemoryProvider } from '../../src/providers/memory/memory-provider.js';
import { describeProvider } from '../contract/provider-contract.js';

const fixture: RawState = {
  frontends: [
    {
      name: 'console_https',
      bind: { address: '127.0.0.1', port: 8443 },
      inspectDelayMs: null,
      acceptsTlsHello: false,
      defaultBackend: 'console',
      rules: [],
      tags: {},
    },
  ],
  backends: [
    {
      name: 'console',
      balance: 'roundrobin',
      servers: [{ name: 'web1', address: '127.0.0.1', port: 9443, check: false, tags: {} }],
      tags: {},
    },
  ],
};

describeProvider(
  'memory',
  async () => {
    const provider = new MemoryProvider();
    return {
      provider,
      render: { ...DEFAULT_RENDER_OPTIONS, defaultBackend: 'console' },
      reset: async () => {
        provider.state = structuredClone(fixture);
      },
      cleanup: async () => {},
    };
  },
  { runs: 100 },
);
