// Review a job: its document's pages beside its result as a form. Selecting a value shows
// where the document says it (a box over the page's picture, or the line of a text
// document marked); values the extractor was unsure of are marked with their confidence.
// A correction is checked by the API against the schema (PATCH /result: its messages are
// shown at the values they name), and "Approve" records that a person checked the job.
//
// Everything read from the document (values, the text the extractor read, lines of a text
// file) goes into the page as text nodes or input values, never as HTML.

import * as api from "../api.js";
import { badge, field, fill, h, select, setFieldError, shortId, uid, when } from "../dom.js";
import { poll } from "../widgets.js";
import { statusBadges } from "./jobs.js";

const MOVING = new Set(["PENDING", "QUEUED", "RUNNING"]);
const POLL_MS = 2000;
const KEYS = [
  [["Alt+↓", "j"], "next value"],
  [["Alt+↑", "k"], "previous value"],
  [["Esc"], "leave the value being typed (then j, k and n work)"],
  [["Alt+N", "n"], "next job to review"],
  [["Enter"], "save (in a value)"],
];

// --- JSON pointers (RFC 6901), as in resultMeta.fields and the API's error messages ---

const child = (pointer, token) => `${pointer}/${String(token).replace(/~/g, "~0").replace(/\//g, "~1")}`;

function valueAt(document, pointer) {
  if (pointer === "") return document;
  for (const raw of pointer.split("/").slice(1)) {
    const token = raw.replace(/~1/g, "/").replace(/~0/g, "~");
    if (document === null || typeof document !== "object" || !Object.hasOwn(document, token)) return undefined;
    document = document[token];
  }
  return document;
}

const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);
const isObject = (value) => value !== null && typeof value === "object" && !Array.isArray(value);
// A member of a value, own only: a result may have a member named "constructor" or "__proto__".
const memberOf = (object, key) => (isObject(object) && Object.hasOwn(object, key) ? object[key] : undefined);
/** An object from [key, value] pairs, leaving out undefined values (every key its own member). */
const objectOf = (pairs) => Object.fromEntries(pairs.filter(([, v]) => v !== undefined));

// --- the schema as a form ---

const FORMAT_HINTS = new Map([["date", "A date: YYYY-MM-DD."], ["date-time", "A date and time (ISO 8601)."],
  ["email", "An e-mail address."], ["uri", "A URI."]]);

/** A schema for a value the definition does not describe (a deleted schema, or a member
 * the result has beyond the schema's properties): its members are kept, not dropped on save. */
function inferSchema(value) {
  if (Array.isArray(value)) {
    const rows = value.filter(isObject);
    return { type: "array", items: rows.length ? inferSchema(Object.fromEntries(rows.flatMap((row) => Object.entries(row)))) : { type: "string" } };
  }
  if (isObject(value)) {
    return { type: "object", properties: Object.fromEntries(Object.entries(value).map(([k, v]) => [k, inferSchema(v)])) };
  }
  if (typeof value === "number") return { type: "number" };
  if (typeof value === "boolean") return { type: "boolean" };
  return { type: "string" };
}

function typeOf(schema, value) {
  let type = schema.type;
  if (Array.isArray(type)) type = type.find((t) => t !== "null");
  if (!type && schema.properties) type = "object";
  if (!type && schema.items) type = "array";
  if (!type && !schema.enum) return typeOf(inferSchema(value));
  return type ?? "string";
}

/** An object's members as [key, schema]: the schema's, then any others the value has. */
function members(schema, value) {
  const properties = new Map(Object.entries(schema.properties ?? {}));
  const values = Array.isArray(value) ? value.filter(isObject) : [value].filter(isObject);
  for (const row of values) {
    for (const [key, v] of Object.entries(row)) if (!properties.has(key)) properties.set(key, inferSchema(v));
  }
  return [...properties];
}

/** Read a number the way a person types it; anything else goes to the API as typed, which
 * names the problem at the field. */
function parseNumber(text) {
  return /^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$/.test(text) ? Number(text) : text;
}

/** What a value's evidence says: its confidence, and whether it is doubtful (under the
 * threshold and not changed by a person: a corrected value is certain, as for the queue). */
/** A value read with what corrections of its issuer taught (README "Learning from
 * corrections"): it may differ from what the page reads, as a person confirmed it. */
function learnedMark(evidence) {
  const n = evidence.learnedExamples ?? 1;
  const mark = badge("learned", "ok");
  mark.title = `Read as ${n === 1 ? "a confirmed result" : `${n} confirmed results`} of this issuer taught `
    + `(example ${evidence.learnedFrom}; the schema's screen lists and forgets them)`;
  return mark;
}

function doubtOf(look, evidencePointer) {
  const evidence = look.evidence[evidencePointer];
  if (!evidence || typeof evidence.confidence !== "number") return null;
  const corrected = look.original !== null
    && !same(valueAt(look.result, evidencePointer), valueAt(look.original, evidencePointer));
  return { confidence: evidence.confidence, low: !corrected && evidence.confidence < look.threshold };
}

function formatConfidence(confidence) {
  return confidence.toFixed(2);
}

/** The text input (or select) of one value; `read()` gives the value to save, or undefined
 * for "no value". */
// A string value longer than this (or with a line break) is edited in a box of several lines.
const LONG_TEXT = 60;

function control(schema, pointer, value, props) {
  const type = typeOf(schema, value);
  let el;
  let read;
  if (Array.isArray(schema.enum)) {
    const options = schema.enum.map((v, i) => [String(i), String(v)]);
    const known = schema.enum.findIndex((v) => same(v, value));
    if (value !== undefined && value !== null && known < 0) options.push(["other", `${value} (not allowed)`]);
    el = select([["", "—"], ...options], { ...props, value: known >= 0 ? String(known) : value == null ? "" : "other" });
    read = () => (el.value === "" ? undefined : el.value === "other" ? value : schema.enum[Number(el.value)]);
  } else if (type === "boolean") {
    el = select([["", "—"], ["true", "yes"], ["false", "no"]],
      { ...props, value: value === true ? "true" : value === false ? "false" : "" });
    read = () => (el.value === "" ? undefined : el.value === "true");
  } else if (type === "object" || type === "array") {
    // A nested value inside a table cell: edited as JSON.
    el = h("textarea", { ...props, rows: 2, spellcheck: "false" });
    el.value = value === undefined ? "" : JSON.stringify(value);
    read = () => {
      const text = el.value.trim();
      if (!text) return undefined;
      try { return JSON.parse(text); } catch { return text; }
    };
  } else if (type === "string" && typeof value === "string" && (value.length > LONG_TEXT || value.includes("\n"))) {
    // An address, a note: shown whole in a box that grows with it, not cut to one line.
    el = h("textarea", { ...props, rows: Math.min(8, Math.ceil(value.length / LONG_TEXT) + value.split("\n").length - 1),
      spellcheck: "false", class: "long-value" });
    el.value = value;
    read = () => (el.value === "" ? (value === "" ? value : undefined) : el.value);
  } else {
    const numeric = type === "number" || type === "integer";
    el = h("input", {
      ...props, type: "text", autocomplete: "off", spellcheck: "false",
      inputmode: numeric ? (type === "integer" ? "numeric" : "decimal") : schema.format === "email" ? "email" : null,
      placeholder: schema.format === "date" ? "YYYY-MM-DD" : null,
    });
    el.value = value === undefined || value === null ? "" : String(value);
    read = () => {
      const text = numeric ? el.value.trim() : el.value;
      if (text === "") return value === "" || value === null ? value : undefined;
      return numeric ? parseNumber(text) : text;
    };
  }
  el.name = pointer;
  el.dataset.pointer = pointer;
  return { el, read };
}

function hintOf(schema) {
  const format = FORMAT_HINTS.get(schema.format);
  const type = typeOf(schema);
  const kind = format ?? (type === "integer" ? "A whole number." : type === "number" ? "A number." : null);
  const description = schema.description ? schema.description.replace(/([^.!?])$/, "$1.") : null;
  return [description, kind].filter(Boolean).join(" ") || undefined;
}

/** Builds the form's nodes: each `{el, read}`. `look` holds what marks a value: the result,
 * the original, the evidence per pointer, the threshold and the missing pointers. */
function buildNode(schema, pointer, label, value, required, look, evidencePointer = pointer) {
  const type = typeOf(schema, value);
  if (type === "object" && !schema.enum) return objectNode(schema, pointer, label, value, look);
  if (type === "array" && !schema.enum) return arrayNode(schema, pointer, label, value, look);

  const { el, read } = control(schema, pointer, value, {});
  el.dataset.evidence = evidencePointer;
  el.dataset.label = label;
  const wrapper = field(label, el, { hint: hintOf(schema) });
  const doubt = doubtOf(look, evidencePointer);
  const evidence = look.evidence[evidencePointer];
  const marks = [
    required ? h("span", { class: "muted" }, "required") : null,
    look.missing.has(pointer) ? badge("missing", "bad") : null,
    doubt && doubt.low ? badge(`low confidence ${formatConfidence(doubt.confidence)}`, "low") : null,
    doubt && !doubt.low ? h("span", { class: "muted" }, `confidence ${formatConfidence(doubt.confidence)}`) : null,
    evidence && evidence.learnedFrom ? learnedMark(evidence) : null,
    evidence && evidence.text ? h("span", { class: "muted evidence" },
      evidence.learnedFrom ? `page ${evidence.page ?? "?"} reads: “` : `read on page ${evidence.page ?? "?"}: “`,
      h("span", { class: "read" }, evidence.text), "”") : null,
  ];
  wrapper.insertBefore(h("div", { class: "field-meta" }, marks), el);
  if (look.original !== null) {
    const original = valueAt(look.original, pointer);
    if (!same(original, valueAt(look.result, pointer))) {
      wrapper.insertBefore(h("p", { class: "original" }, "Extracted: ",
        h("span", { class: "read" }, original === undefined ? "(no value)" : String(original))), el.nextSibling);
      wrapper.classList.add("corrected");
    }
  }
  if (doubt && doubt.low) wrapper.classList.add("low");
  if (look.missing.has(pointer)) wrapper.classList.add("missing");
  return { el: wrapper, read };
}

function objectNode(schema, pointer, label, value, look) {
  const required = new Set(schema.required ?? []);
  const value_ = isObject(value) ? value : {};
  const children = members(schema, value_).map(([key, sub]) =>
    [key, buildNode(sub, child(pointer, key), sub.title ?? key, memberOf(value_, key), required.has(key), look)]);
  const read = () => {
    const out = objectOf(children.map(([key, node]) => [key, node.read()]));
    return pointer === "" || Object.keys(out).length || isObject(value) ? out : undefined;
  };
  const body = children.map(([, node]) => node.el);
  const el = pointer === ""
    ? h("div", { class: "fields" }, body)
    : h("fieldset", { class: "group", "data-group": pointer },
      h("legend", {}, label, look.missing.has(pointer) ? [" ", badge("missing", "bad")] : null), body);
  return { el, read };
}

/** An array as a table: a row per item, a column per member of the items (or one column
 * of values), with buttons to add and remove rows. */
function arrayNode(schema, pointer, label, value, look) {
  const itemSchema = schema.items ?? inferSchema(Array.isArray(value) ? value[0] : undefined);
  const ofObjects = typeOf(itemSchema) === "object";
  const columns = ofObjects ? members(itemSchema, value) : [[null, itemSchema]];
  const requiredMembers = new Set(ofObjects ? itemSchema.required ?? [] : []);
  const headIds = columns.map(() => uid("col"));
  const body = h("tbody");
  // Each row remembers which extracted item it shows, so that its evidence follows it when
  // rows above are removed.
  let rows = [];

  function cell(sub, cellPointer, cellValue, evidencePointer, labelledBy, name) {
    const { el, read } = control(sub, cellPointer, cellValue, {});
    el.id = uid();
    el.dataset.evidence = evidencePointer;
    el.dataset.label = name;
    // Named by its column's and its row's headings ("amount row 2"), which are on screen.
    el.setAttribute("aria-labelledby", labelledBy.join(" "));
    const error = h("p", { class: "field-error", id: `${el.id}-error`, hidden: true });
    el.setAttribute("aria-describedby", error.id);
    const doubt = doubtOf(look, evidencePointer);
    const missing = look.missing.has(evidencePointer);
    const original = look.original !== null && evidencePointer !== "" ? valueAt(look.original, evidencePointer) : undefined;
    const corrected = look.original !== null && evidencePointer !== ""
      && !same(original, valueAt(look.result, evidencePointer));
    const td = h("td", { class: [doubt && doubt.low ? "low" : "", missing ? "missing" : ""].join(" ").trim() || null },
      el, doubt && doubt.low ? badge(formatConfidence(doubt.confidence), "low") : null,
      missing ? badge("missing", "bad") : null,
      corrected ? h("p", { class: "original" }, "was ", h("span", { class: "read" },
        original === undefined ? "(no value)" : String(original))) : null,
      error);
    if (doubt) td.title = `confidence ${formatConfidence(doubt.confidence)}`;
    return { td, read };
  }

  function draw(items) {
    rows = items.map((item, i) => {
      const rowPointer = child(pointer, i);
      const evidenceRow = item.origin === null ? null : child(pointer, item.origin);
      const head = h("th", { scope: "row", id: uid("row"), "aria-label": `row ${i + 1}` }, String(i + 1));
      const cells = columns.map(([key, sub], c) => cell(
        sub,
        key === null ? rowPointer : child(rowPointer, key),
        key === null ? item.value : memberOf(item.value, key),
        evidenceRow === null ? "" : key === null ? evidenceRow : child(evidenceRow, key),
        [headIds[c], head.id],
        `${label} row ${i + 1}${key === null ? "" : ` ${key}`}`));
      const remove = h("button", {
        type: "button", class: "link", "aria-label": `Remove row ${i + 1} of ${label}`,
        onclick: () => { const now = current(); now.splice(i, 1); draw(now); },
      }, "Remove");
      return { origin: item.origin, cells, tr: h("tr", {}, head, cells.map((c) => c.td), h("td", {}, remove)) };
    });
    fill(body, rows.map((row) => row.tr));
  }

  function rowValue(row) {
    if (!ofObjects) return row.cells[0].read();
    return objectOf(columns.map(([key], c) => [key, row.cells[c].read()]));
  }

  const current = () => rows.map((row) => ({ value: rowValue(row), origin: row.origin }));
  draw((Array.isArray(value) ? value : []).map((item, i) => ({ value: item, origin: i })));

  const add = h("button", {
    type: "button",
    onclick: () => {
      draw([...current(), { value: ofObjects ? {} : undefined, origin: null }]);
      const last = body.lastElementChild && body.lastElementChild.querySelector("[data-pointer]");
      if (last) last.focus();
    },
  }, `Add a row to ${label}`);
  const el = h("div", { class: "items", "data-group": pointer },
    h("table", { class: "grid" },
      h("caption", {}, label, look.missing.has(pointer) ? [" ", badge("missing", "bad")] : null),
      h("thead", {}, h("tr", {},
        h("th", { scope: "col" }, "#"),
        columns.map(([key, sub], c) => h("th", { scope: "col", id: headIds[c] },
          key === null ? "Value" : sub.title ?? key,
          requiredMembers.has(key) ? h("span", { class: "muted", title: "required", "aria-hidden": "true" }, " *") : null)),
        h("th", { scope: "col" }, h("span", { class: "visually-hidden" }, "Remove")))),
      body),
    h("div", { class: "actions" }, add));
  const read = () => {
    const items = rows.map(rowValue);
    return items.length || Array.isArray(value) ? items : undefined;
  };
  return { el, read };
}

// --- the document beside the form ---

/** The pages as pictures, fetched as they come near the view. `show(evidence, label)`
 * draws the box of a value and scrolls to it. */
function pictures(job, scroller, signal) {
  const urls = [];
  const count = Math.max(job.pageCount ?? 1, 1);
  const pages = [];
  const observer = new IntersectionObserver((entries) => {
    for (const entry of entries) {
      if (!entry.isIntersecting) continue;
      observer.unobserve(entry.target);
      load(pages[Number(entry.target.dataset.page) - 1]);
    }
  }, { root: scroller, rootMargin: "800px 0px" });
  let shown = null; // the page and box on show, to scroll to again once its picture is in

  async function load(page) {
    try {
      const url = await api.imageUrl(`/api/jobs/${encodeURIComponent(job.id)}/pages/${page.number}`);
      if (signal.aborted) { URL.revokeObjectURL(url); return; }
      urls.push(url);
      page.img.addEventListener("load", () => {
        page.frame.classList.remove("loading");
        if (shown === page) scrollTo(page.box);
      }, { once: true });
      page.img.src = url;
    } catch (error) {
      if (signal.aborted) return;
      page.frame.classList.remove("loading");
      fill(page.frame, h("p", { class: "error" }, `Page ${page.number} cannot be shown: ${error.message}`));
    }
  }

  function scrollTo(target) {
    const area = scroller.getBoundingClientRect();
    const box = target.getBoundingClientRect();
    scroller.scrollBy({
      top: box.top - area.top - (area.height - box.height) / 2,
      left: box.left - area.left - (area.width - box.width) / 2,
    });
  }

  for (let number = 1; number <= count; number += 1) {
    const img = h("img", { alt: `Page ${number} of ${job.fileName ?? "the document"}` });
    const label = h("span", { class: "field-box-label" });
    const box = h("div", { class: "field-box", hidden: true }, label);
    const frame = h("div", { class: "page-frame loading", dataset: { page: String(number) } }, img, box);
    pages.push({ number, img, box, label, frame });
    observer.observe(frame);
  }
  signal.addEventListener("abort", () => {
    observer.disconnect();
    urls.forEach((url) => URL.revokeObjectURL(url));
  });

  function show(evidence, label) {
    for (const page of pages) page.box.hidden = true;
    shown = null;
    const page = evidence && evidence.bbox ? pages[(evidence.page ?? 1) - 1] : null;
    if (!page) return false;
    const [x0, y0, x1, y1] = evidence.bbox;
    Object.assign(page.box.style, {
      left: `${x0 * 100}%`, top: `${y0 * 100}%`, width: `${(x1 - x0) * 100}%`, height: `${(y1 - y0) * 100}%`,
    });
    page.label.textContent = label;
    page.box.hidden = false;
    shown = page;
    scrollTo(page.box);
    return true;
  }

  return { el: pages.map((page) => page.frame), show };
}

/** A document without pictures (TXT, CSV, DOCX, XLSX, HTML): its lines as docex read them;
 * a value's lines are marked, and in them the text the value was read from. */
async function lines(job, scroller) {
  const text = await api.get(`/api/jobs/${encodeURIComponent(job.id)}/text`);
  const pages = text.pages.map((page) => ({
    number: page.number,
    lines: page.lines.map((line) => ({ ...line, el: h("p", { class: "line" }, line.text || " ") })),
  }));
  let marked = [];

  function overlaps(a, b) {
    return a[0] < b[2] && b[0] < a[2] && a[1] < b[3] && b[1] < a[3];
  }

  function show(evidence) {
    for (const line of marked) {
      fill(line.el, line.text || " ");
      line.el.classList.remove("hit");
    }
    marked = [];
    const page = evidence ? pages.find((p) => p.number === (evidence.page ?? 1)) : null;
    if (!page) return false;
    const needle = evidence.text ?? "";
    marked = page.lines.filter((line) => (evidence.bbox
      ? overlaps(line.bbox, evidence.bbox)
      : needle && line.text.toLowerCase().includes(needle.toLowerCase())));
    for (const line of marked) {
      line.el.classList.add("hit");
      let at = needle ? line.text.indexOf(needle) : -1;
      if (at < 0 && needle) at = line.text.toLowerCase().indexOf(needle.toLowerCase());
      if (at >= 0) {
        fill(line.el, line.text.slice(0, at), h("mark", {}, line.text.slice(at, at + needle.length)),
          line.text.slice(at + needle.length));
      }
    }
    if (!marked.length) return false;
    const area = scroller.getBoundingClientRect();
    const first = marked[0].el.getBoundingClientRect();
    scroller.scrollBy({ top: first.top - area.top - area.height / 3 });
    return true;
  }

  const el = pages.map((page) => h("section", { class: "text-page", "aria-label": `Page ${page.number}` },
    pages.length > 1 ? h("h3", {}, `Page ${page.number}`) : null,
    page.lines.length ? page.lines.map((line) => line.el) : h("p", { class: "muted" }, "(no text)")));
  if (text.truncated) {
    // The API answers the first lines of a long document only (a tab cannot lay out millions).
    const shown = pages.reduce((n, page) => n + page.lines.length, 0);
    el.unshift(h("p", { class: "muted" }, `The first ${shown.toLocaleString()} of `,
      `${text.lineCount.toLocaleString()} lines are shown: a value read further down is not marked here.`));
  }
  return { el, show };
}

// --- the screen ---

function notFound(view, id) {
  fill(view,
    h("h1", {}, "Job not found"),
    h("p", {}, "There is no job ", h("code", {}, id), " among your jobs. ", h("a", { href: "#/jobs" }, "Go to the jobs.")));
}

/** The next job in the review queue after `job` (the queue is oldest first, by id); the
 * first other one when none comes after it. */
async function goToNextJob(job, ctx) {
  const queue = await api.get("/api/jobs", { review: "pending", limit: 100 });
  const others = queue.data.filter((j) => j.id !== job.id);
  const next = others.find((j) => j.id > job.id) ?? others[0];
  if (!next) {
    ctx.notify("No other job waits for review.");
    ctx.navigate("#/review");
    return;
  }
  ctx.navigate(`#/jobs/${encodeURIComponent(next.id)}?from=queue`);
}

function typing(el) {
  return el && (el.isContentEditable || ["INPUT", "TEXTAREA", "SELECT"].includes(el.tagName));
}

/** A job that has no result to review: its status, its error, "Restart" for a FAILED one;
 * polled while it moves, and shown in full once it has completed. */
function notReviewable(view, job, params, ctx) {
  const problem = h("p", { class: "error", role: "alert", hidden: true });
  const restart = async () => {
    try {
      await api.post(`/api/jobs/${encodeURIComponent(job.id)}/restart`);
      // Drawn afresh first: the notice must not stand beside the failure it replaced.
      await render(view, params, ctx);
      ctx.notify("Queued again.");
    } catch (error) {
      problem.textContent = error.message;
      problem.hidden = false;
    }
  };
  const moving = MOVING.has(job.status);
  fill(view,
    h("h1", {}, `Review ${job.fileName ?? job.id}`),
    h("section", { class: "card", "aria-live": "polite" },
      h("p", {}, statusBadges(job), " ",
        moving ? "This job has not been extracted yet; this page follows it."
          : job.status === "FAILED" ? "Extraction failed." : "This job was cancelled: it has no result."),
      job.errorCode || job.errorMessage
        ? h("p", { class: "error" }, job.errorCode ? h("code", {}, job.errorCode) : null, " ", job.errorMessage ?? "")
        : null,
      h("p", { class: "muted" }, `Attempts: ${job.attempts}. Uploaded `, when(job.createdAt), "."),
      problem,
      h("div", { class: "actions" },
        job.status === "FAILED" ? h("button", { type: "button", class: "primary", onclick: restart }, "Restart") : null,
        deleteButton(job, ctx),
        h("a", { href: "#/jobs" }, "Back to the jobs"))));
  if (!moving) return;
  // Until the job ends: then the screen is drawn afresh, with its values, and polls no more.
  poll(ctx, () => POLL_MS, async () => {
    const now = await api.get(`/api/jobs/${encodeURIComponent(job.id)}`);
    if (ctx.signal.aborted || now.status === job.status) return true;
    await render(view, params, ctx);
    return false;
  });
}

function deleteButton(job, ctx) {
  if (job.status === "RUNNING") return null;
  return h("button", {
    type: "button", class: "danger",
    onclick: async () => {
      if (!window.confirm(`Delete the job ${job.fileName ?? job.id} and its file?`)) return;
      try {
        await api.del(`/api/jobs/${encodeURIComponent(job.id)}`);
        ctx.notify("Job deleted.");
        ctx.navigate("#/jobs");
      } catch (error) {
        ctx.notify(error.message, "error");
      }
    },
  }, "Delete job");
}

export async function render(view, params, ctx) {
  const path = `/api/jobs/${encodeURIComponent(params.id)}`;
  let job;
  try {
    job = await api.get(path);
  } catch (error) {
    if (error instanceof api.ApiError && error.status === 404) { notFound(view, params.id); return; }
    throw error;
  }
  if (ctx.signal.aborted) return;
  if (job.status !== "COMPLETED") { notReviewable(view, job, params, ctx); return; }

  const [settings, schema] = await Promise.all([
    api.get("/api/settings"),
    api.get(`/api/schemas/${encodeURIComponent(job.schemaId)}`).catch((error) => {
      if (error instanceof api.ApiError && error.status === 404) return null; // deleted: the form follows the result
      throw error;
    }),
  ]);
  if (ctx.signal.aborted) return;
  const threshold = settings.review.confidenceThreshold;
  const fromQueue = ctx.query.get("from") === "queue";

  // The document, drawn once; the summary and the form are drawn again after each change.
  const scroller = h("section", { class: "review-pages", "aria-label": "Document", tabindex: "-1" });
  const whereNote = h("p", { class: "where muted", "aria-live": "polite" }, "Select a value to see where the document says it.");
  let documentView;
  if (String(job.mimeType ?? "").startsWith("image/") || job.mimeType === "application/pdf") {
    documentView = pictures(job, scroller, ctx.signal);
  } else {
    try {
      documentView = await lines(job, scroller);
    } catch (error) {
      documentView = { el: h("p", { class: "error" }, `The document cannot be shown: ${error.message}`), show: () => false };
    }
  }
  fill(scroller, documentView.el);

  const summary = h("div", { class: "review-summary" });
  const formArea = h("section", { class: "card review-form", "aria-labelledby": "values-heading" });
  let form = null;
  let readResult = null;
  let dirty = false;
  let selected = null; // the pointer of the value on show

  function drawSummary() {
    const reviewer = job.reviewedBy === ctx.user.id ? "you" : shortId(job.reviewedBy);
    fill(summary,
      h("p", {}, statusBadges(job),
        job.originalResult ? badge("corrected", "running") : null),
      h("p", { class: "muted" },
        `Read by ${job.resultMeta ? job.resultMeta.provider : "?"} · `,
        `${job.pageCount ?? "?"} page${job.pageCount === 1 ? "" : "s"} · uploaded `, when(job.createdAt)),
      h("p", { class: "reviewed" }, job.reviewedAt
        ? ["Approved by ", reviewer, " on ", when(job.reviewedAt), "."]
        : "Not approved yet."),
      fromQueue ? h("button", { type: "button", onclick: nextJob }, "Next job to review") : null);
  }

  function choose(control) {
    if (form) for (const el of form.querySelectorAll(".selected")) el.classList.remove("selected");
    const holder = control.closest(".field, td");
    if (holder) holder.classList.add("selected");
    selected = control.dataset.pointer;
    const evidence = job.resultMeta && job.resultMeta.fields[control.dataset.evidence];
    const label = control.dataset.label ?? selected;
    const found = documentView.show(evidence, label);
    whereNote.textContent = found ? `“${label}” is marked on page ${evidence.page ?? 1}.`
      : `The document shows no place for “${label}”.`;
  }

  function drawForm() {
    const look = {
      result: job.result ?? {},
      original: job.originalResult ?? null,
      evidence: (job.resultMeta && job.resultMeta.fields) || {},
      threshold,
      missing: new Set((job.resultMeta && job.resultMeta.missing) || []),
    };
    const definition = schema ? schema.definition : inferSchema(look.result);
    const root = buildNode(definition, "", "result", look.result, true, look);
    readResult = root.read;
    const problems = h("div", { class: "error", role: "alert", hidden: true });
    const status = h("p", { class: "muted", "aria-live": "polite" });
    const complete = !job.resultMeta || job.resultMeta.complete !== false;
    const save = h("button", { type: "submit", class: "primary" }, "Save");
    const approve = h("button", { type: "button", onclick: onApprove }, job.reviewedAt ? "Approve again" : "Approve");
    const approveHint = h("p", { class: "hint muted" });
    const discard = h("button", { type: "button", onclick: () => { dirty = false; drawForm(); } }, "Discard changes");
    const lowCount = Object.keys(look.evidence).filter((p) => (doubtOf(look, p) || {}).low).length;

    function updateButtons() {
      approve.disabled = dirty || !complete;
      discard.disabled = !dirty;
      approveHint.textContent = dirty ? "Save or discard your changes before approving."
        : !complete ? "Fill in the missing values and save before approving." : "";
    }

    /** A write of the version on show (If-Match: its ETag is its updatedAt): refused (412) if
     * the job changed since, in another tab or by another person, rather than undo that. One
     * at a time: the buttons wait for the answer (a slow link sent two of each). */
    async function write(method, url, json, done) {
      problems.hidden = true;
      save.disabled = approve.disabled = true;
      try {
        job = await api.request(method, url, { json, headers: { "If-Match": `"${job.updatedAt}"` } });
        dirty = false;
        drawSummary();
        drawForm();
        ctx.notify(done);
      } catch (error) {
        status.textContent = "";
        if (error instanceof api.ApiError && error.status === 412) showStale();
        else showProblems(error);
        save.disabled = false;
        updateButtons();
      }
    }

    async function onSave(event) {
      event.preventDefault();
      for (const el of form.querySelectorAll("[aria-invalid]")) setFieldError(el, null);
      status.textContent = "Saving…";
      await write("PATCH", `${path}/result`, { result: readResult() }, "Saved.");
    }

    async function onApprove() {
      await write("POST", `${path}/approve`, {}, "Approved.");
    }

    function showStale() {
      fill(problems,
        h("p", {}, "Not saved: this job was changed elsewhere (another tab or another person) since you "
          + "opened it. Your edits are still in the form."),
        h("button", {
          type: "button",
          onclick: async () => {
            job = await api.get(path);
            dirty = false;
            drawSummary();
            drawForm();
            ctx.notify("This is the job as it is now.");
          },
        }, "Show the job as it is now (drops your edits)"));
      problems.hidden = false;
    }

    /** Each message that names a value ("result/total: 'x' is not of type 'number'") is
     * shown at that value; all of them are listed above the buttons. */
    function showProblems(error) {
      const messages = error instanceof api.ApiError ? error.messages : [error.message];
      let first = null;
      for (const message of messages) {
        const wrong = /^result(\/[^:]*): (.*)$/.exec(message);
        const lacking = /^result(\/\S*) is required$/.exec(message);
        const [pointer, text] = wrong ? [wrong[1], wrong[2]] : lacking ? [lacking[1], "A value is required."] : [];
        const el = pointer && [...form.querySelectorAll("[data-pointer]")].find((c) => c.dataset.pointer === pointer);
        if (!el) continue;
        setFieldError(el, text);
        first = first ?? el;
      }
      fill(problems, error instanceof api.ApiError && error.status === 400
        ? [h("p", {}, "Not saved:"), h("ul", {}, messages.map((m) => h("li", {}, m)))]
        : messages.join(" "));
      problems.hidden = false;
      if (first) first.focus();
    }

    form = h("form", { novalidate: true, onsubmit: onSave, "aria-labelledby": "values-heading" },
      root.el,
      problems,
      h("div", { class: "actions" }, save, discard, approve, status),
      approveHint);
    form.addEventListener("input", () => { dirty = true; updateButtons(); });
    form.addEventListener("focusin", (event) => { if (event.target.dataset && event.target.dataset.pointer) choose(event.target); });
    updateButtons();
    fill(formArea,
      h("h2", { id: "values-heading" }, "Values"),
      h("p", { class: "muted" }, lowCount
        ? `${lowCount === 1 ? "1 value" : `${lowCount} values`} under the confidence threshold `
          + `(${formatConfidence(threshold)}) ${lowCount === 1 ? "is" : "are"} marked. `
          + "Select a value to see where the document says it."
        : "Select a value to see where the document says it."),
      form);
    if (selected) {
      const again = [...form.querySelectorAll("[data-pointer]")].find((c) => c.dataset.pointer === selected);
      if (again) choose(again);
    }
  }

  /** The next job of the queue (unsaved changes are not dropped without asking: `ctx.onLeave`). */
  function nextJob() {
    goToNextJob(job, ctx).catch((error) => ctx.notify(error.message, "error"));
  }

  function step(by) {
    const controls = [...form.querySelectorAll("[data-pointer]")];
    if (!controls.length) return;
    let at = controls.indexOf(document.activeElement);
    if (at < 0) at = controls.findIndex((c) => c.dataset.pointer === selected);
    const next = controls[at < 0 ? (by > 0 ? 0 : controls.length - 1) : Math.min(Math.max(at + by, 0), controls.length - 1)];
    next.focus();
    choose(next);
  }

  // Going elsewhere in the console, closing the tab or reloading with unsaved changes asks first.
  ctx.onLeave(() => (dirty ? "Your changes to this job are not saved. Leave it anyway?" : null));
  window.addEventListener("beforeunload", (event) => { if (dirty) event.preventDefault(); }, { signal: ctx.signal });

  document.addEventListener("keydown", (event) => {
    if (event.ctrlKey || event.metaKey || event.defaultPrevented) return;
    const plain = !event.altKey && !typing(event.target);
    let action = null;
    if ((event.altKey && event.key === "ArrowDown") || (plain && event.key === "j")) action = () => step(1);
    else if ((event.altKey && event.key === "ArrowUp") || (plain && event.key === "k")) action = () => step(-1);
    else if ((event.altKey && event.code === "KeyN") || (plain && event.key === "n")) action = nextJob;
    else if (event.key === "Escape" && typing(event.target)) action = () => event.target.blur();
    if (!action) return;
    event.preventDefault();
    action();
  }, { signal: ctx.signal });

  drawSummary();
  drawForm();
  document.title = `Review ${job.fileName ?? job.id} · docex`; // tabs of several jobs told apart
  fill(view,
    h("h1", {}, `Review ${job.fileName ?? job.id}`),
    summary,
    h("div", { class: "split" },
      h("div", { class: "review-document" }, whereNote, scroller),
      h("div", {},
        formArea,
        h("details", { class: "card keys", open: true },
          h("summary", {}, "Keyboard"),
          h("dl", {}, KEYS.map(([keys, what]) => [
            h("dt", {}, keys.map((key, i) => [i ? " or " : null, h("kbd", {}, key)])), h("dd", {}, what)]))),
        h("div", { class: "actions" }, deleteButton(job, ctx), h("a", { href: "#/jobs" }, "Back to the jobs")))));
}
