// The review queue: COMPLETED jobs nobody has approved whose result has a value under the
// confidence threshold or lacks a required value (GET /api/jobs?review=pending), oldest
// first. Each job links to its review, which then offers the next job of the queue.

import * as api from "../api.js";
import { badge, fill, h, shortId, table, when } from "../dom.js";
import { poll } from "../widgets.js";

const PAGE_SIZE = 20;
const POLL_MS = 10000; // other clients and workers add jobs; a person approving removes them

/** The values under the threshold, least sure first. A value a person changed is certain
 * (as for the queue itself). */
function doubtful(job, threshold) {
  const fields = (job.resultMeta && job.resultMeta.fields) || {};
  const changed = (pointer) => job.originalResult
    && JSON.stringify(valueAt(job.result, pointer)) !== JSON.stringify(valueAt(job.originalResult, pointer));
  return Object.entries(fields)
    .filter(([pointer, evidence]) => typeof evidence.confidence === "number" && evidence.confidence < threshold
      && !changed(pointer))
    .map(([pointer, evidence]) => [pointer, evidence.confidence])
    .sort((a, b) => a[1] - b[1]);
}

function valueAt(document, pointer) {
  for (const raw of pointer.split("/").slice(1)) {
    const token = raw.replace(/~1/g, "/").replace(/~0/g, "~");
    if (document === null || typeof document !== "object" || !Object.hasOwn(document, token)) return undefined;
    document = document[token];
  }
  return document;
}

const reviewLink = (job) => `#/jobs/${encodeURIComponent(job.id)}?from=queue`;

export async function render(view, params, ctx) {
  const [settings, schemaList] = await Promise.all([api.get("/api/settings"), api.all("/api/schemas")]);
  const threshold = settings.review.confidenceThreshold;
  const schemaNames = new Map(schemaList.map((s) => [s.id, s.name]));
  const cursors = [undefined];
  const listArea = h("div", { class: "list", "aria-live": "polite" });
  const pager = h("div", { class: "pager" });
  const start = h("p", {});

  function why(job) {
    const missing = (job.resultMeta && job.resultMeta.missing) || [];
    const doubts = doubtful(job, threshold);
    return [
      missing.length ? badge(`${missing.length} missing`, "bad") : null,
      doubts.map(([pointer, confidence]) => badge(`${pointer.slice(1) || "result"} ${confidence.toFixed(2)}`, "low")),
      !missing.length && !doubts.length ? h("span", { class: "muted" }, "no evidence for its values") : null,
    ];
  }

  function draw(page) {
    fill(listArea, table([
      ["File", (job) => h("a", { href: reviewLink(job) }, job.fileName ?? job.id)],
      ["Needs a look at", why],
      ["Schema", (job) => schemaNames.get(job.schemaId) ?? shortId(job.schemaId)],
      ["Completed", (job) => when(job.finishedAt)],
    ], page.data, {
      caption: "Jobs waiting for review, oldest first",
      empty: "Nothing waits for review: every doubtful or incomplete result has been approved.",
    }));
    fill(start, page.data.length && cursors.length === 1
      ? h("a", { href: reviewLink(page.data[0]), class: "button-link" }, "Review the oldest job")
      : null);
    const pageNumber = cursors.length;
    fill(pager, pageNumber === 1 && !page.nextCursor ? null : [
      h("button", { type: "button", disabled: pageNumber === 1, onclick: () => { cursors.pop(); refresh(); } }, "Previous page"),
      h("span", { class: "muted" }, `Page ${pageNumber}`),
      h("button", {
        type: "button", disabled: !page.nextCursor,
        onclick: () => { cursors.push(page.nextCursor); refresh(); },
      }, "Next page")]);
  }

  async function refresh() {
    const page = await api.get("/api/jobs", { review: "pending", limit: PAGE_SIZE, cursor: cursors[cursors.length - 1] });
    if (!ctx.signal.aborted) draw(page);
  }

  fill(view,
    h("h1", {}, "Review queue"),
    h("p", { class: "muted" },
      `Completed jobs that nobody has approved yet, with a value read with a confidence under ${threshold.toFixed(2)} `
      + "or a required value missing. Open one to check its values against the document, correct them and approve it."),
    start,
    listArea,
    pager);
  await refresh();

  poll(ctx, () => POLL_MS, refresh);
}
