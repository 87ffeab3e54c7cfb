// The image's HEALTHCHECK: GET /healthz on the address KUBEBYON_LISTEN_ADDR names (a wildcard means loopback).
const listen = process.env.KUBEBYON_LISTEN_ADDR || '0.0.0.0:8080';
const at = listen.lastIndexOf(':');
let host = listen.slice(0, at);
if (host === '' || host === '*' || host === '0.0.0.0') host = '127.0.0.1';
if (host === '[::]') host = '[::1]';
try {
  const res = await fetch(`http://${host}:${listen.slice(at + 1)}/healthz`, {
    signal: AbortSignal.timeout(4000),
  });
  process.exit(res.ok ? 0 : 1);
} catch {
  process.exit(1);
}
