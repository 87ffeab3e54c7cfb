import { DEFAULT_RENDER_OPTIONS } from '../../src/haproxy/render.js';
import { describeProvider } from '../contract/provider-contract.js';
import { haproxyVersionUnderTest, startHaproxyTestbed } from '../support/haproxy-testbed.js';
import { freeLoopbackPort } from '../support/ports.js';
import { operatorConfig, stockProviderFor } from '../support/stock-haproxy.js';

// The provider contract against a real HAProxy: every random plan is a real `haproxy -c` and reload (or
// runtime commands), next to a foreign frontend and backend in the operator's own file.
const version = haproxyVersionUnderTest();

describeProvider(
  `haproxy ${version}`,
  async () => {
    const haproxy = await startHaproxyTestbed(
      operatorConfig(await freeLoopbackPort(), await freeLoopbackPort()),
      version,
      { ownedFile: true },
    );
    return {
      provider: stockProviderFor(haproxy),
      render: {
        ...DEFAULT_RENDER_OPTIONS,
        bind: { address: '127.0.0.1', port: await freeLoopbackPort() },
        defaultBackend: 'console',
      },
      reset: () => haproxy.owned?.reloadWith('') ?? Promise.resolve(),
      cleanup: () => haproxy.stop(),
    };
  },
  { runs: 15, timeoutMs: 15_000 },
);
