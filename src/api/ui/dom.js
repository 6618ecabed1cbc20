// Builds elements. Every value becomes a text node or an attribute value: data from the
// trace store is never parsed as HTML.

export function h(tag, attributes = {}, ...children) {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on") && typeof value === "function") {
      element.addEventListener(name.slice(2), value);
    } else if (name === "class") {
      element.className = value;
    } else {
      element.setAttribute(name, value === true ? "" : String(value));
    }
  }
  append(element, children);
  return element;
}

function append(element, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    element.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

export function replace(element, ...children) {
  element.replaceChildren();
  append(element, children);
}

const GOOD = new Set(["INCLUDED", "OK", "EXACT", "LIVE"]);
const QUIET = new Set(["EMPTY", "NOT_FOUND", "NOT_REQUESTED", "EXCLUDED", "NOT_EVALUATED", "CACHE"]);

// A status as a badge; its class comes from a fixed set, never from the data.
export function badge(status) {
  const text = status === undefined || status === null ? "—" : String(status);
  const tone = GOOD.has(text) ? "good" : QUIET.has(text) ? "quiet" : text === "—" ? "none" : "bad";
  return h("span", { class: `badge badge-${tone}` }, text);
}

// A table whose rows become labelled cards on narrow screens.
export function table(caption, columns, rows) {
  return h(
    "div",
    { class: "table-wrap" },
    h(
      "table",
      { class: "cards" },
      h("caption", {}, caption),
      h("thead", {}, h("tr", {}, columns.map((column) => h("th", { scope: "col" }, column)))),
      h(
        "tbody",
        {},
        rows.map((cells) =>
          h("tr", {}, cells.map((cell, i) => h("td", { "data-label": columns[i] }, cell))),
        ),
      ),
    ),
  );
}

// Label/value pairs.
export function facts(pairs) {
  return h(
    "dl",
    { class: "facts" },
    pairs
      .filter(([, value]) => value !== undefined && value !== null && value !== "")
      .map(([label, value]) => h("div", {}, h("dt", {}, label), h("dd", {}, value))),
  );
}

export function code(text) {
  return h("code", {}, text === undefined || text === null ? "—" : String(text));
}

export function yesNo(value) {
  return value ? "yes" : "no";
}

export function ms(value) {
  return value === undefined || value === null ? "—" : `${value} ms`;
}
