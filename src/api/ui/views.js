// The explorer's views: trace search, one turn, a turn's replay, a handle's operations.
// Each takes the element to fill and the route's parameters, and reads the API.

import { handleTrace, replayTurn, searchTraces, turnTrace } from "./api.js";
import { badge, code, facts, h, ms, replace, table, yesNo } from "./dom.js";

const PROVIDER_STATUSES = [
  "OK", "NOT_FOUND", "TIMEOUT", "UNAVAILABLE", "LIMIT_EXCEEDED", "INVALID_RESPONSE",
  "SECRET_DETECTED", "INCOMPATIBLE", "NOT_BOUND", "INVALID_REQUEST", "NOT_EVALUATED",
];
const LAYER_STATUSES = ["INCLUDED", "EMPTY", "UNKNOWN", "UNAVAILABLE", "NOT_REQUESTED", "EXCLUDED"];
const FILTERS = ["provider", "providerStatus", "layer", "status", "since", "until", "limit"];

function heading(text) {
  return h("h2", { id: "view-heading", tabindex: "-1" }, text);
}

function turnLink(turnId) {
  return h("a", { class: "turn-id", href: `#/turn/${encodeURIComponent(turnId)}` }, turnId);
}

function textField(name, label, value, placeholder) {
  const id = `filter-${name}`;
  return h(
    "div",
    { class: "field" },
    h("label", { for: id }, label),
    h("input", { id, name, type: "text", value: value || "", placeholder, autocomplete: "off", spellcheck: "false" }),
  );
}

function selectField(name, label, value, options) {
  const id = `filter-${name}`;
  return h(
    "div",
    { class: "field" },
    h("label", { for: id }, label),
    h(
      "select",
      { id, name },
      options.map(([optionValue, text]) =>
        h("option", { value: optionValue, selected: optionValue === (value || "") }, text),
      ),
    ),
  );
}

// ---- search -------------------------------------------------------------------------

export async function searchView(view, query, navigate) {
  const form = h(
    "form",
    { id: "search-form", class: "filters", role: "search", "aria-label": "Trace search" },
    textField("provider", "Provider", query.get("provider"), "e.g. orders"),
    selectField("providerStatus", "Provider status", query.get("providerStatus"), [
      ["", "any"],
      ...PROVIDER_STATUSES.map((s) => [s, s]),
    ]),
    textField("layer", "Layer", query.get("layer"), "e.g. customer-profile"),
    selectField("status", "Layer status", query.get("status"), [["", "any"], ...LAYER_STATUSES.map((s) => [s, s])]),
    textField("since", "Since (UTC)", query.get("since"), "2026-11-30T10:00:00Z"),
    textField("until", "Until (UTC)", query.get("until"), "epoch ms or RFC 3339"),
    selectField("limit", "Per page", query.get("limit"), [["10", "10"], ["", "20"], ["50", "50"], ["100", "100"]]),
    h(
      "div",
      { class: "actions" },
      h("button", { type: "submit" }, "Search"),
      h("button", { type: "reset", class: "secondary" }, "Clear"),
    ),
  );
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const parameters = new URLSearchParams();
    for (const name of FILTERS) {
      const value = form.elements[name].value.trim();
      if (value) parameters.set(name, value);
    }
    navigate(`#/search?${parameters.toString()}`);
  });
  form.addEventListener("reset", (event) => {
    event.preventDefault();
    navigate("#/search");
  });
  const results = h("div", { id: "results", "aria-busy": "true" }, "Searching…");
  replace(view, heading("Trace search"), form, results);

  const parameters = new URLSearchParams();
  for (const name of [...FILTERS, "cursor"]) {
    const value = query.get(name);
    if (value) parameters.set(name, value);
  }
  const page = await searchTraces(parameters);
  results.removeAttribute("aria-busy");
  const rows = page.traces.map(({ turn, providers }) => [
    turnLink(turn.turnId),
    turn.startedAt,
    `${turn.project} ${turn.projectVersion}`,
    [turn.objective || "—", " · ", turn.consumer || "—"],
    h("ul", { class: "chips" }, (turn.layers || []).map((l) => h("li", {}, l.id, " ", badge(l.status)))),
    h("ul", { class: "chips" }, (providers || []).map((p) => h("li", {}, p.provider, " ", badge(p.status)))),
    turn.blocked ? badge("BLOCKED") : "no",
    ms(turn.durationMs),
  ]);
  const paging = h("div", { class: "paging" });
  if (query.get("cursor")) {
    const first = new URLSearchParams(parameters);
    first.delete("cursor");
    paging.append(h("a", { class: "button secondary", href: `#/search?${first.toString()}` }, "First page"));
  }
  if (page.nextCursor) {
    const next = new URLSearchParams(parameters);
    next.set("cursor", page.nextCursor);
    paging.append(h("a", { class: "button", href: `#/search?${next.toString()}`, rel: "next" }, "Next page"));
  }
  replace(
    results,
    rows.length === 0
      ? h("p", { class: "empty" }, "No turn matches these filters.")
      : table(
          `${rows.length} turn${rows.length === 1 ? "" : "s"}, newest first`,
          ["Turn", "Started (UTC)", "Project", "Objective · consumer", "Layers", "Providers", "Blocked", "Duration"],
          rows,
        ),
    paging,
  );
}

// ---- one turn -------------------------------------------------------------------------

// Provider calls on a line from the turn's start to its deadline: each bar starts when
// the call started (its observation time less its duration) and is as long as the call.
// A button rescales the line to the turn's own length, where short calls are visible.
function timeline(turn, providers) {
  const invoked = providers.filter((p) => p.invoked && typeof p.durationMs === "number");
  if (invoked.length === 0) return h("p", { class: "empty" }, "No provider was called.");
  const calls = invoked.map((p) => {
    const end = typeof p.observedAtMs === "number" ? p.observedAtMs - turn.startedAtMs : p.durationMs;
    const start = Math.max(0, end - p.durationMs);
    return { provider: p.provider, status: p.status, start, duration: p.durationMs };
  });
  const deadline = Math.max(turn.deadlineMs || 1, 1);
  const turnLength = Math.max(turn.durationMs || 0, ...calls.map((c) => c.start + c.duration), 1);
  const holder = h("figure", { class: "timeline" });
  const draw = (toDeadline) => {
    const scale = toDeadline ? deadline : turnLength;
    const percent = (value) => `${Math.min(100, Math.max(0, (value / scale) * 100))}%`;
    const lanes = calls.map((call) => {
      const bar = h("span", { class: `bar bar-${call.status === "OK" ? "good" : "bad"}` });
      bar.style.left = percent(call.start);
      bar.style.width = percent(call.duration);
      return h(
        "li",
        { class: "lane" },
        h("span", { class: "lane-label" }, call.provider, " ", badge(call.status), ` ${call.start}–${call.start + call.duration} ms`),
        h("span", { class: "track", "aria-hidden": "true" }, bar),
      );
    });
    const turnEnd = h("span", { class: "turn-end" });
    turnEnd.style.left = percent(turn.durationMs || 0);
    const toggle = h(
      "button",
      { type: "button", class: "secondary", "aria-pressed": toDeadline ? "false" : "true" },
      toDeadline ? "Scale to the turn" : "Scale to the deadline",
    );
    toggle.addEventListener("click", () => {
      draw(!toDeadline);
      holder.querySelector("button").focus();
    });
    replace(
      holder,
      h("ol", { class: "lanes" }, lanes),
      h(
        "div",
        { class: "axis", "aria-hidden": "true" },
        turnEnd,
        h("span", { class: "axis-start" }, "0 ms"),
        h("span", { class: "axis-end" }, toDeadline ? `deadline ${deadline} ms` : `turn ${turnLength} ms`),
      ),
      h(
        "figcaption",
        {},
        `Provider calls from the turn's start (${turn.startedAt}), against its ${turn.deadlineMs} ms deadline; the turn took ${turn.durationMs} ms. `,
        toggle,
      ),
    );
  };
  draw(true);
  return holder;
}

export async function turnView(view, turnId) {
  replace(view, heading(`Turn ${turnId}`), h("p", { "aria-busy": "true" }, "Loading…"));
  const { turn, providers = [] } = await turnTrace(turnId);
  const layers = turn.layers || [];
  const selections = turn.selections || [];
  const cuts = turn.cuts || [];
  replace(
    view,
    heading(`Turn ${turn.turnId}`),
    h(
      "div",
      { class: "actions" },
      h("a", { class: "button", href: `#/turn/${encodeURIComponent(turn.turnId)}/replay` }, "Replay this turn"),
      h("a", { class: "button secondary", href: "#/search" }, "Back to search"),
    ),
    facts([
      ["Tenant", turn.tenant],
      ["Project", `${turn.project} ${turn.projectVersion}`],
      ["Profile", turn.profile],
      ["Objective", turn.objective],
      ["Consumer", turn.consumer],
      ["Mode", turn.mode],
      ["Started (UTC)", turn.startedAt],
      ["Duration", ms(turn.durationMs)],
      ["Deadline", ms(turn.deadlineMs)],
      ["Budget", `${turn.budgetMaxBytes} bytes`],
      ["Blocked", turn.blocked ? [badge("BLOCKED"), " by ", (turn.blockingLayers || []).join(", ")] : "no"],
      ["Inputs (names; values are never stored)", (turn.inputs || []).map((i) => i.key).join(", ") || "none"],
      ["Build", code(turn.buildDigest)],
      ["Binding", [turn.bindingRevision, " ", code(turn.bindingDigest)]],
    ]),
    h("h3", {}, "Layers"),
    table(
      "Every layer's decision",
      ["Layer", "Status", "Reason", "Required", "Providers", "Currentness", "Missing inputs"],
      layers.map((l) => [
        l.id,
        badge(l.status),
        l.reason || "—",
        yesNo(l.required),
        (l.providers || []).join(", ") || "—",
        l.currentness || "—",
        (l.missingInputs || []).join(", ") || "—",
      ]),
    ),
    h("h3", {}, "Providers"),
    providers.length === 0
      ? h("p", { class: "empty" }, "The turn reached no provider.")
      : table(
          "Every provider the turn reached",
          ["Provider", "Status", "Source", "Type", "Version", "Duration", "Items", "Currentness", "Retention", "Detail"],
          providers.map((p) => [
            p.provider,
            badge(p.status),
            p.source ? [badge(p.source), p.ageMs !== undefined ? ` age ${p.ageMs} ms` : ""] : "—",
            p.providerType || "—",
            p.version ? `${p.version} (${p.versionSource || "?"})` : "—",
            p.invoked ? ms(p.durationMs) : "not invoked",
            p.itemCount ?? "—",
            p.currentness || "—",
            p.retention ? `${p.retention.policy}${p.retention.contentRetained ? ", content kept" : ""}` : "—",
            p.detail || "—",
          ]),
        ),
    h("h3", {}, "Timeline"),
    timeline(turn, providers),
    h("h3", {}, "Selections"),
    selections.length === 0
      ? h("p", { class: "empty" }, "Nothing was rendered.")
      : table(
          "What was rendered",
          ["Layer", "Provider", "Locator", "Fingerprint", "Bytes", "Truncated", "Handle"],
          selections.map((s) => [
            s.layer,
            s.provider || "static",
            s.locator ? code(s.locator) : "—",
            s.fingerprint ? code(s.fingerprint) : "—",
            s.bytes,
            yesNo(s.truncated),
            s.handle
              ? h("a", { href: `#/handle/${encodeURIComponent(s.handle.id)}` }, `${s.handle.id} v${s.handle.version}`)
              : "—",
          ]),
        ),
    h("h3", {}, "Budget cuts"),
    cuts.length === 0
      ? h("p", { class: "empty" }, "No budget cuts.")
      : table(
          "What the budget cut",
          ["Layer", "Provider", "Locator", "Action", "Bytes before", "Bytes after"],
          cuts.map((c) => [c.layer, c.provider || "—", c.locator ? code(c.locator) : "—", c.action, c.bytesBefore, c.bytesAfter]),
        ),
    h("h3", {}, "Rendered"),
    facts([
      ["Rendered digest", code(turn.renderedDigest)],
      ["Rendered bytes", turn.renderedBytes],
    ]),
    h("p", { class: "note" }, "The rendered text is not stored; a replay renders it again from the trace."),
  );
}

// ---- replay ---------------------------------------------------------------------------

export async function replayView(view, turnId) {
  replace(view, heading(`Replay of turn ${turnId}`), h("p", { "aria-busy": "true" }, "Loading…"));
  const { turn } = await turnTrace(turnId);
  const keys = (turn.inputs || []).map((i) => i.key);
  const result = h("div", { id: "replay-result" });
  const problem = h("p", { class: "error", role: "alert", hidden: true });
  const form = h(
    "form",
    { id: "replay-form", class: "filters", "aria-label": "Replay inputs" },
    keys.map((key, index) =>
      h(
        "div",
        { class: "field" },
        h("label", { for: `replay-input-${index}` }, key),
        h("input", { id: `replay-input-${index}`, name: key, type: "text", autocomplete: "off", spellcheck: "false", required: true }),
      ),
    ),
    h("div", { class: "actions" }, h("button", { type: "submit" }, "Replay")),
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const inputs = {};
    for (const key of keys) inputs[key] = form.elements[key].value;
    problem.hidden = true;
    replace(result, h("p", { "aria-busy": "true" }, "Replaying…"));
    try {
      showReplay(result, await replayTurn(turn.turnId, inputs));
    } catch (error) {
      replace(result);
      if (error.status === 401) {
        view.dispatchEvent(new CustomEvent("failed", { detail: error }));
        return;
      }
      problem.textContent = `Replay refused (${error.code}): ${error.message}`;
      problem.hidden = false;
    }
  });
  replace(
    view,
    heading(`Replay of turn ${turn.turnId}`),
    h(
      "p",
      {},
      "A replay renders the turn again from its trace without contacting any provider. It needs the turn's original inputs, which are checked against their recorded digests and not kept. ",
      h("a", { href: `#/turn/${encodeURIComponent(turn.turnId)}` }, "Back to the turn"),
    ),
    keys.length === 0 ? h("p", {}, "The turn recorded no inputs.") : null,
    form,
    problem,
    result,
  );
}

function sameness(original, replayed) {
  return original === replayed ? "same" : h("strong", { class: "changed" }, "changed");
}

function showReplay(element, replay) {
  replace(
    element,
    h("h3", { tabindex: "-1", id: "replay-heading" }, "Replay result"),
    facts([
      ["Exact", replay.exact ? badge("EXACT") : [badge("NOT_EXACT"), " some provider could not be reproduced"]],
      ["Rendered digest matches", yesNo(replay.renderedDigestMatches)],
      ["Replayed digest", code(replay.renderedDigest)],
      ["Original digest", code(replay.originalRenderedDigest)],
      ["Blocked", `${yesNo(replay.blocked)} (original: ${yesNo(replay.originalBlocked)})`],
    ]),
    table(
      "Layers: original and replayed",
      ["Layer", "Original", "Replayed", "Change"],
      (replay.layers || []).map((l) => [
        l.id,
        [badge(l.originalStatus), " ", l.originalReason || ""],
        [badge(l.status), " ", l.reason || ""],
        sameness(`${l.originalStatus}/${l.originalReason}`, `${l.status}/${l.reason}`),
      ]),
    ),
    table(
      "Providers: original and replayed",
      ["Provider", "Original", "Replayed", "Replay", "Detail"],
      (replay.providers || []).map((p) => [
        p.id,
        badge(p.originalStatus),
        badge(p.status),
        badge(p.replay),
        p.detail || "—",
      ]),
    ),
    h("h4", {}, "Rendered again"),
    replay.rendered === null || replay.rendered === undefined
      ? h("p", { class: "empty" }, "Nothing rendered (the turn is blocked).")
      : h("pre", { class: "rendered", tabindex: "0" }, replay.rendered),
  );
  element.querySelector("#replay-heading").focus();
}

// ---- a handle's operations ----------------------------------------------------------------

export async function handleView(view, handleId) {
  replace(view, heading(`Handle ${handleId}`), h("p", { "aria-busy": "true" }, "Loading…"));
  const rows = [];
  const holder = h("div", {});
  const more = h("button", { type: "button", class: "secondary", hidden: true }, "More operations");
  const operationRow = (op) => [
    op.sequence,
    op.at,
    op.operation,
    badge(op.result === "ok" ? "OK" : op.result),
    op.bytesInspected ?? "—",
    op.itemsInspected ?? "—",
    op.bytesReturned ?? "—",
    op.entries ?? "—",
    yesNo(op.truncated),
    ms(op.elapsedMs),
  ];
  let after = null;
  const load = async () => {
    const page = await handleTrace(handleId, after);
    rows.push(...(page.operations || []).map(operationRow));
    after = page.nextAfter;
    more.hidden = after === null || after === undefined;
    replace(
      holder,
      rows.length === 0
        ? h("p", { class: "empty" }, "No operation recorded yet.")
        : table(
            "Operations in sequence order",
            ["Seq", "At (UTC)", "Operation", "Result", "Bytes inspected", "Items inspected", "Bytes returned", "Entries", "Truncated", "Elapsed"],
            rows,
          ),
    );
  };
  more.addEventListener("click", () => load().catch((error) => view.dispatchEvent(new CustomEvent("failed", { detail: error }))));
  await load();
  replace(
    view,
    heading(`Handle ${handleId}`),
    h("p", {}, "Each operation's counts; a record never holds the material, the arguments or the returned text."),
    holder,
    more,
  );
}
