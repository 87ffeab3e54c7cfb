import { isIP } from 'node:net';
import { TerminalError } from '../../model/errors.js';
import { isHaproxyName } from '../../naming/names.js';
import { validateHost } from '../../routes/host.js';

/**
 * Every value that reaches the Data Plane API is checked here once more (validation happened at the webhook
 * and in the planner): nothing unvalidated reaches haproxy.cfg, a map file or a runtime request.
 */
function refuse(what: string): never {
  throw new TerminalError(`refusing to send ${what} to the Data Plane API`);
}

export function checkedName(name: string, what: string): string {
  if (!isHaproxyName(name)) refuse(`${what} name ${JSON.stringify(name)}`);
  return name;
}

export function checkedHost(host: string): string {
  const result = validateHost(host);
  if (!result.ok || result.host !== host) refuse(`SNI host ${JSON.stringify(host)}`);
  return host;
}

export function checkedPort(port: number, what: string): number {
  if (!Number.isInteger(port) || port < 1 || port > 65535) refuse(`${what} port ${port}`);
  return port;
}

export function checkedServerAddress(address: string): string {
  if (isIP(address) === 0) refuse(`server address ${JSON.stringify(address)}`);
  return address;
}

export function checkedBindAddress(address: string): string {
  if (address !== '*' && isIP(address) === 0) refuse(`bind address ${JSON.stringify(address)}`);
  return address;
}
