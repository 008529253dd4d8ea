import { describe, expect, it } from 'vitest';
import { heartbeatReconnectBackoffSeconds, poolReconnectBackoffSeconds } from './db/database.js';
import { reconnectBackoffSeconds } from './index.js';

describe('reconnect backoff', () => {
  it('is public as reconnectBackoffSeconds, for a client the host gives the engine', () => {
    expect(reconnectBackoffSeconds).toBe(poolReconnectBackoffSeconds);
  });

  it('grows from tens of milliseconds and never passes half a second, however many connects failed', () => {
    for (let retries = 0; retries <= 60; retries++) {
      for (let k = 0; k < 50; k++) {
        const s = poolReconnectBackoffSeconds(retries);
        expect(s).toBeGreaterThanOrEqual(0.025 * Math.min(2 ** retries, 10));
        expect(s).toBeLessThanOrEqual(Math.min(0.05 * 2 ** retries, 0.5));
      }
    }
    // postgres.js's default at 5 failed connects is already 1.2 to 2.4 s, and 10 to 20 s from 7 on.
    expect(poolReconnectBackoffSeconds(7)).toBeLessThanOrEqual(0.5);
  });

  it('is short and flat for the heartbeat client', () => {
    for (let k = 0; k < 100; k++) {
      const s = heartbeatReconnectBackoffSeconds();
      expect(s).toBeGreaterThanOrEqual(0.02);
      expect(s).toBeLessThanOrEqual(0.05);
    }
  });
});
