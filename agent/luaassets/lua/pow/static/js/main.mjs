// Challenge page of the OpenFlare proof-of-work check: reads the challenge
// the server put into the page, solves it in Web Workers and hands the
// answer to pass-challenge, which sets the session cookie and sends the
// visitor back to the page it asked for. Makes no request to any other site.

const STATIC = "/.within.website/x/cmd/anubis/static/";
const API = "/.within.website/x/cmd/anubis/api/";

const el = (id) => document.getElementById(id);

function readJSON(id) {
  const node = el(id);
  return node ? JSON.parse(node.textContent) : null;
}

const version = readJSON("anubis_version") || "openflare-pow";
const prefix = readJSON("anubis_base_prefix") || "";
const title = el("title");
const status = el("status");
const mark = el("image");
const progress = el("progress");
const bar = progress && progress.querySelector(".bar-inner");
const why = el("why");

let strings = {};

function t(key) {
  return strings["js_" + key] ?? strings[key] ?? key;
}

async function loadStrings() {
  const lang = document.documentElement.lang || "en";
  for (const name of [lang, "en"]) {
    try {
      const res = await fetch(`${prefix}${STATIC}locales/${encodeURIComponent(name)}.json?cacheBuster=${encodeURIComponent(version)}`);
      if (res.ok) {
        strings = await res.json();
        return;
      }
    } catch (_) {
      // try the next one
    }
  }
}

function fail(heading, message) {
  title.textContent = heading;
  status.textContent = message;
  mark.classList.add("failed");
  if (progress) progress.hidden = true;
}

function setProgress(fraction) {
  const pct = Math.min(99, Math.floor(fraction * 100));
  bar.style.width = pct + "%";
  progress.setAttribute("aria-valuenow", String(pct));
}

function workerURL() {
  const ua = navigator.userAgent || "";
  const webcrypto = window.isSecureContext && window.crypto && crypto.subtle && !/Firefox|Goanna/.test(ua);
  const file = webcrypto ? "sha256-webcrypto.js" : "sha256-purejs.js";
  return `${prefix}${STATIC}js/worker/${file}?cacheBuster=${encodeURIComponent(version)}`;
}

function solve(data, difficulty, onProgress) {
  const threads = Math.max(Math.floor((navigator.hardwareConcurrency || 2) / 2), 1);
  const url = workerURL();
  return new Promise((resolve, reject) => {
    const workers = [];
    const stop = () => workers.forEach((w) => w.terminate());
    for (let i = 0; i < threads; i++) {
      const w = new Worker(url);
      w.onmessage = (event) => {
        const msg = event.data;
        if (typeof msg.progress === "number") {
          onProgress(msg.progress * threads);
          return;
        }
        stop();
        resolve(msg);
      };
      w.onerror = (event) => {
        stop();
        reject(event.message || "worker error");
      };
      workers.push(w);
      w.postMessage({ data, difficulty, nonce: i, threads });
    }
  });
}

function passURL(id, result, elapsed) {
  const q = new URLSearchParams({
    id,
    response: result.hash,
    nonce: String(result.nonce),
    redir: window.location.href,
    elapsedTime: String(Math.round(elapsed)),
  });
  return `${prefix}${API}pass-challenge?${q}`;
}

async function main() {
  await loadStrings();

  if (typeof Worker === "undefined") {
    fail(t("missing_feature"), t("web_workers_error"));
    return;
  }
  if (!navigator.cookieEnabled) {
    fail(t("missing_feature"), t("cookies_error"));
    return;
  }

  let challenge;
  try {
    challenge = readJSON("anubis_challenge");
  } catch (_) {
    challenge = null;
  }
  const algorithm = challenge && challenge.rules && challenge.rules.algorithm;
  const difficulty = challenge && challenge.rules && Number(challenge.rules.difficulty);
  if (!challenge || !challenge.challenge || (algorithm !== "fast" && algorithm !== "slow") ||
      !Number.isInteger(difficulty) || difficulty < 0 || difficulty > 64) {
    fail(t("challenge_error"), t("challenge_error_msg"));
    return;
  }

  const expected = Math.pow(16, difficulty);
  const started = performance.now();
  let slowShown = false;
  status.textContent = `${t("calculating")} ${t("calculating_difficulty")} ${difficulty}`;

  let result;
  try {
    result = await solve(challenge.challenge.randomData, difficulty, (attempts) => {
      const seconds = (performance.now() - started) / 1000;
      const rate = seconds > 0 ? Math.round(attempts / seconds / 1000) : 0;
      // Chance of having found an answer after this many attempts.
      setProgress(1 - Math.exp(-attempts / expected));
      let line = `${t("calculating")} ${t("calculating_difficulty")} ${difficulty}, ${t("speed")} ${rate} kH/s`;
      if (attempts > expected * 3) {
        if (!slowShown) slowShown = true;
        line += ` — ${t("verification_longer")}`;
      }
      status.textContent = line;
    });
  } catch (_) {
    fail(t("calculation_error"), t("calculation_error_msg"));
    return;
  }

  const elapsed = performance.now() - started;
  bar.style.width = "100%";
  progress.setAttribute("aria-valuenow", "100");
  mark.classList.add("done");
  const target = passURL(challenge.challenge.id, result, elapsed);
  const go = () => window.location.replace(target);

  if (why && why.open) {
    // The visitor is reading the explanation: let them finish.
    status.textContent = t("finished_reading");
    const button = document.createElement("button");
    button.type = "button";
    button.textContent = t("continue");
    button.addEventListener("click", go);
    status.after(button);
    button.focus();
    setTimeout(go, 30000);
    return;
  }
  status.textContent = t("success");
  go();
}

main();
