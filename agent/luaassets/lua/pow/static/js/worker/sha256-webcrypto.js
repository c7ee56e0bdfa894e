// Proof-of-work worker using the browser's WebCrypto SHA-256 (secure
// contexts only). Message in: {data, difficulty, nonce, threads}.
// Messages out: {progress: n} (worker started with nonce 0, every 1024
// attempts) and finally {hash, data, difficulty, nonce}.
"use strict";

const HEX = [];
for (let i = 0; i < 256; i++) HEX.push(i.toString(16).padStart(2, "0"));

function toHex(bytes) {
  let s = "";
  for (let i = 0; i < bytes.length; i++) s += HEX[bytes[i]];
  return s;
}

// True when the hex digest starts with `difficulty` zeros.
function meets(bytes, difficulty) {
  const whole = difficulty >> 1;
  for (let i = 0; i < whole; i++) if (bytes[i] !== 0) return false;
  return difficulty % 2 === 0 || (bytes[whole] >> 4) === 0;
}

self.onmessage = async (event) => {
  const { data, difficulty, nonce, threads } = event.data;
  const encoder = new TextEncoder();
  const step = Math.max(1, threads | 0);
  const reports = nonce === 0;
  let n = nonce;
  let attempts = 0;
  for (;;) {
    const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", encoder.encode(data + String(n))));
    if (meets(digest, difficulty)) {
      self.postMessage({ hash: toHex(digest), data, difficulty, nonce: n });
      return;
    }
    n += step;
    attempts++;
    if (reports && (attempts & 1023) === 0) self.postMessage({ progress: attempts });
  }
};
