// The explorer's shell: the key form, the hash router (#/search?…, #/turn/ID,
// #/turn/ID/replay, #/handle/ID) and error display. The key is handed to api.js and
// kept nowhere else.

import { hasKey, setKey, searchTraces } from "./api.js";
import { handleView, replayView, searchView, turnView } from "./views.js";

const keySection = document.getElementById("key-section");
const keyForm = document.getElementById("key-form");
const keyInput = document.getElementById("api-key");
const nav = document.getElementById("nav");
const view = document.getElementById("view");
const errorBox = document.getElementById("error");
const status = document.getElementById("status");

function showError(error) {
  const code = error && error.code ? error.code : "ERROR";
  const message = error && error.message ? error.message : String(error);
  errorBox.textContent =
    error && error.status === 401
      ? `The key was refused (${code}): ${message}`
      : `${code}: ${message}`;
  errorBox.hidden = false;
}

function clearError() {
  errorBox.textContent = "";
  errorBox.hidden = true;
}

function showKeyForm() {
  setKey(null);
  nav.hidden = true;
  keySection.hidden = false;
  view.replaceChildren();
  keyInput.value = "";
  keyInput.focus();
}

function navigate(hash) {
  if (location.hash === hash) {
    route();
  } else {
    location.hash = hash;
  }
}

function failed(error) {
  showError(error);
  if (error && error.status === 401) showKeyForm();
}

async function route() {
  if (!hasKey()) {
    showKeyForm();
    return;
  }
  clearError();
  const hash = location.hash.replace(/^#/, "") || "/search";
  const [path, queryText = ""] = hash.split("?", 2);
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  try {
    if (parts[0] === "turn" && parts.length === 2) {
      await turnView(view, parts[1]);
    } else if (parts[0] === "turn" && parts.length === 3 && parts[2] === "replay") {
      await replayView(view, parts[1]);
    } else if (parts[0] === "handle" && parts.length === 2) {
      await handleView(view, parts[1]);
    } else {
      await searchView(view, new URLSearchParams(queryText), navigate);
    }
    const heading = document.getElementById("view-heading");
    if (heading) heading.focus();
    status.textContent = heading ? `Showing: ${heading.textContent}` : "";
  } catch (error) {
    failed(error);
  }
}

keyForm.addEventListener("submit", async (event) => {
  event.preventDefault();
  clearError();
  const key = keyInput.value;
  keyInput.value = "";
  setKey(key);
  try {
    // One cheap authenticated read tells a good key from a refused one.
    await searchTraces(new URLSearchParams({ limit: "1" }));
  } catch (error) {
    setKey(null);
    showError(error);
    keyInput.focus();
    return;
  }
  keySection.hidden = true;
  nav.hidden = false;
  status.textContent = "Key accepted.";
  route();
});

document.getElementById("forget-key").addEventListener("click", () => {
  clearError();
  status.textContent = "Key forgotten.";
  showKeyForm();
});

document.getElementById("handle-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const input = document.getElementById("handle-id");
  const id = input.value.trim();
  if (id) navigate(`#/handle/${encodeURIComponent(id)}`);
});

view.addEventListener("failed", (event) => failed(event.detail));
window.addEventListener("hashchange", route);
showKeyForm();
