import { DEFAULT_RENDER_OPTIONS } from '../../src/haproxy/render.js';
import { describeProvider } from '../contract/provider-contract.js';
import { haproxyVersionUnderTest, startHaproxyTestbed } from '../support/haproxy-testbed.js';
import { freeLoopbackPort } from '../support/ports.js';
import { operatorConfig, stockProviderFor } from '../support/stock-haproxy.js';

// The provider contract against a real HAProxy: every random plan is a real `haproxy -c` and reload (or
// runtime commands), next to a foreign frontend and backend in the operator's own file. A second provider
// that shares nothing reads back what HAProxy runs, where the first may answer from what it knows of its own
// applies. (Map routing is the only layout; the contract ran `rules` too while it was a setting.)
const version = haproxyVersionUnderTest();

describeProvider(
  `haproxy ${version}`,
  async () => {
    const haproxy = await startHaproxyTestbed(
      operatorConfig(await freeLoopbackPort(), await freeLoopbackPort()),
      version,
      { ownedFile: true },
    );
    const provider = stockProviderFor(haproxy);
    return {
      provider,
      render: {
        ...DEFAULT_RENDER_OPTIONS,
        minSlots: 4,
        bind: { address: '127.0.0.1', port: await freeLoopbackPort() },
        defaultBackend: 'console',
      },
      fresh: () => stockProviderFor(haproxy),
      reset: async () => {
        await provider.flush();
        await (haproxy.owned?.reloadWith('') ?? Promise.resolve());
      },
      cleanup: async () => {
        await provider.close();
        await haproxy.stop();
      },
    };
  },
  { runs: 15, timeoutMs: 15_000 },
);
