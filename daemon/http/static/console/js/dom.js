// Building the page. Every element of the console is made by `h`, and every piece of
// text goes in as a text node: nothing read from a document or the API is ever parsed
// as HTML, so a value such as `<img src=x onerror=…>` shows its characters.

/** An element: `h("button", {class: "primary", onclick: save}, "Save")`.
 *
 * props: `class`; `on<event>` handlers; booleans and non-string values set as
 * properties (`disabled`, `checked`, `value` of a select); strings as attributes.
 * children: nodes, strings (as text), arrays of them; null/false/undefined skipped. */
export function h(tag, props = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(props ?? {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on") && typeof value === "function") {
      el.addEventListener(key.slice(2).toLowerCase(), value);
    } else if (key === "class") {
      el.className = value;
    } else if (key === "dataset") {
      Object.assign(el.dataset, value);
    } else if (typeof value === "string" || typeof value === "number") {
      el.setAttribute(key, String(value));
    } else if (value === true) {
      el.setAttribute(key, "");
    } else {
      el[key] = value;
    }
  }
  append(el, children);
  return el;
}

export function append(el, children) {
  for (const child of [children].flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : String(child));
  }
  return el;
}

/** Replace an element's children. */
export function fill(el, ...children) {
  el.replaceChildren();
  return append(el, children);
}

let lastId = 0;
/** A unique id for tying a label to its input. */
export function uid(prefix = "f") {
  lastId += 1;
  return `${prefix}-${lastId}`;
}

/** A labelled control: `<label for>` + the control + a slot for its error message. */
export function field(label, control, { hint, error } = {}) {
  if (!control.id) control.id = uid();
  const errorEl = h("p", { class: "field-error", id: `${control.id}-error`, hidden: !error }, error ?? "");
  control.setAttribute("aria-describedby", errorEl.id);
  return h("div", { class: "field" },
    h("label", { for: control.id }, label),
    control,
    hint ? h("p", { class: "hint" }, hint) : null,
    errorEl);
}

/** Show (or clear, with null) the error under a control made by `field`. */
export function setFieldError(control, message) {
  const errorEl = document.getElementById(`${control.id}-error`);
  if (!errorEl) return;
  errorEl.textContent = message ?? "";
  errorEl.hidden = !message;
  if (message) control.setAttribute("aria-invalid", "true");
  else control.removeAttribute("aria-invalid");
}

/** `<select>` of `[value, label]` pairs. */
export function select(options, { value, ...props } = {}) {
  const el = h("select", props,
    options.map(([v, label]) => h("option", { value: v }, label)));
  if (value !== undefined) el.value = value;
  return el;
}

/** A table: `columns` of `[heading, (row) => cell content]`. */
export function table(columns, rows, { caption, empty = "Nothing here yet.", rowProps } = {}) {
  if (!rows.length) return h("p", { class: "muted empty" }, empty);
  return h("table", { class: "grid" },
    caption ? h("caption", {}, caption) : null,
    h("thead", {}, h("tr", {}, columns.map(([heading]) => h("th", { scope: "col" }, heading)))),
    h("tbody", {}, rows.map((row) =>
      h("tr", rowProps ? rowProps(row) : {}, columns.map(([, cell]) => h("td", {}, cell(row)))))));
}

const dateFormat = new Intl.DateTimeFormat(undefined, { dateStyle: "medium", timeStyle: "short" });
/** A time element: the local date and time, the ISO instant as its machine value. */
export function when(iso) {
  if (!iso) return "—";
  return h("time", { datetime: iso, title: iso }, dateFormat.format(new Date(iso)));
}

export function badge(text, kind = text.toLowerCase()) {
  return h("span", { class: `badge badge-${kind}` }, text);
}

/** A short id for tables; the whole id as the title. */
export function shortId(id) {
  return id ? h("code", { title: id }, id.slice(-8)) : "—";
}

export function bytes(n) {
  if (n === null || n === undefined) return "—";
  const units = ["B", "KiB", "MiB", "GiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i += 1; }
  return `${i ? n.toFixed(1) : n} ${units[i]}`;
}
