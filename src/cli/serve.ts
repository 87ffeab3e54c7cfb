import { ConfigError, loadConfig } from '../config/env.js';
import { errorText } from '../model/errors.js';
import { startService } from '../service.js';
import { createLogger } from '../wiring.js';
import type { Output } from './output.js';

/**
 * `serve`: the service, configured by the environment. Resolves with the exit code once a SIGTERM or SIGINT
 * has stopped it gracefully (0); a bad configuration, with every problem named, or a failed start is 1.
 */
export async function serveCommand(env: NodeJS.ProcessEnv, io: Output): Promise<number> {
  let config: ReturnType<typeof loadConfig>;
  try {
    config = loadConfig(env);
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    io.err(`serve: ${err.message}`);
    return 1;
  }
  const logger = createLogger(config);
  // A setting an earlier release read: the install starts as before, told once that it is ignored.
  for (const warning of config.warnings) logger.warn({ setting: warning.split(' ')[0] }, warning);
  // Listening from the start: a signal that arrives while the service starts stops it once it has started.
  // The handlers fire once, so a second signal ends the process at once (the default action).
  const signalled = new Promise<NodeJS.Signals>((resolve) => {
    process.once('SIGTERM', () => resolve('SIGTERM'));
    process.once('SIGINT', () => resolve('SIGINT'));
  });
  let service: Awaited<ReturnType<typeof startService>>;
  try {
    service = await startService(config, { logger, env });
  } catch (err) {
    logger.fatal({ err: errorText(err) }, 'service failed to start');
    io.err(`serve: ${errorText(err)}`);
    return 1;
  }
  const signal = await signalled;
  logger.info({ signal }, 'signal received');
  await service.stop();
  return 0;
}
