/** The turn's SHA-256 (sha256.ts) against the FIPS 180-4 vectors and node:crypto's digests. */
import { describe, expect, it } from 'vitest';
import { sha256 } from './sha256.js';

const hex = (bytes: Uint8Array): string => [...bytes].map((b) => b.toString(16).padStart(2, '0')).join('');

describe('sha256', () => {
  it('gives the FIPS 180-4 digests of the standard messages', () => {
    expect(hex(sha256(''))).toBe('e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855');
    expect(hex(sha256('abc'))).toBe('ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad');
    // Two blocks: 56 bytes leave no room for the length in the first.
    expect(hex(sha256('abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq'))).toBe(
      '248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1',
    );
    expect(hex(sha256('a'.repeat(1_000)))).toBe(
      '41edece42d63e8d9bf515a9ba6932e1c20cbc9f5a5d134645adb5db1b9737ea3',
    );
  });

  it('hashes the UTF-8 bytes, a lone surrogate as U+FFFD (what node:crypto gives)', () => {
    expect(hex(sha256('é\u{1F600}\uD800x'))).toBe(
      'a05018721ebcdd9d59dd2f86700c765689ed65d21028407e7f3b07ebf2fa0692',
    );
  });
});
