import { EventEmitter } from 'node:events';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { type GateLimits, gateConnections } from '../../src/webhook/connection-gate.js';

class FakeSocket extends EventEmitter {
  destroyed = false;
  writableNeedDrain = false;
  destroy() {
    if (this.destroyed) return;
    this.destroyed = true;
    this.emit('close');
  }
}

const LIMITS: GateLimits = { perConnection: 4, waitingTotal: 5, drainTimeoutMs: 1000 };

function setup(limits = LIMITS) {
  const started: string[] = [];
  const responses = new Map<string, EventEmitter>();
  const gate = gateConnections((req) => {
    started.push(String(req.url));
  }, limits);
  const send = (socket: FakeSocket, url: string) => {
    const res = new EventEmitter();
    responses.set(url, res);
    gate.listener({ socket, url } as unknown as IncomingMessage, res as unknown as ServerResponse);
  };
  const answer = (url: string) => responses.get(url)?.emit('finish');
  return { gate, started, send, answer };
}

describe('gateConnections', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it('runs one request of a connection at a time, in order, and other connections meanwhile', () => {
    const { gate, started, send, answer } = setup();
    const [a, b] = [new FakeSocket(), new FakeSocket()];
    send(a, 'a1');
    send(a, 'a2');
    send(b, 'b1');
    expect(started).toEqual(['a1', 'b1']);
    expect(gate.unanswered()).toBe(3);
    answer('a1');
    expect(started).toEqual(['a1', 'b1', 'a2']);
    answer('a2');
    answer('b1');
    expect(gate.unanswered()).toBe(0);
  });

  it('closes a connection with more than perConnection unanswered, and forgets what it had waiting', () => {
    const { gate, started, send } = setup();
    const a = new FakeSocket();
    for (let i = 1; i <= 4; i++) send(a, `a${i}`);
    expect(a.destroyed).toBe(false);
    send(a, 'a5');
    expect(a.destroyed).toBe(true);
    // Requests Node still hands over from the same read are dropped.
    send(a, 'a6');
    expect(started).toEqual(['a1']);
    // The running one ends with the connection; nothing waits any more.
    expect(gate.unanswered()).toBe(1);
    expect(gate.closed()).toBe(1);
  });

  it('closes a connection that would queue a request while all together have waitingTotal waiting', () => {
    const { gate, send } = setup();
    const [a, b, c, d] = [new FakeSocket(), new FakeSocket(), new FakeSocket(), new FakeSocket()];
    for (let i = 1; i <= 3; i++) {
      send(a, `a${i}`);
      send(b, `b${i}`);
    }
    // 2 running, 4 waiting; one more may wait.
    send(c, 'c1');
    send(c, 'c2');
    expect(gate.unanswered()).toBe(8);
    // A request that waits for nothing still runs.
    send(d, 'd1');
    expect(d.destroyed).toBe(false);
    send(d, 'd2');
    expect(d.destroyed).toBe(true);
    expect([a, b, c].map((s) => s.destroyed)).toEqual([false, false, false]);
  });

  it('starts the next request only once the answers before it have drained, and closes after drainTimeoutMs', () => {
    vi.useFakeTimers();
    const { started, send, answer } = setup();
    const a = new FakeSocket();
    send(a, 'a1');
    send(a, 'a2');
    send(a, 'a3');
    a.writableNeedDrain = true;
    answer('a1');
    expect(started).toEqual(['a1']);
    a.writableNeedDrain = false;
    a.emit('drain');
    expect(started).toEqual(['a1', 'a2']);
    a.writableNeedDrain = true;
    answer('a2');
    vi.advanceTimersByTime(999);
    expect(a.destroyed).toBe(false);
    vi.advanceTimersByTime(1);
    expect(a.destroyed).toBe(true);
    expect(started).toEqual(['a1', 'a2']);
  });
});
