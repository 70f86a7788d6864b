// Jobs: newest first, filtered by status, schema and run, a page at a time; statuses
// refresh without a reload while anything on the page is still moving. Upload one file
// (a job) or several (a batch run, whose progress shows here).

import * as api from "../api.js";
import { badge, bytes, field, fill, h, select, shortId, table, when } from "../dom.js";
import { poll } from "../widgets.js";

const STATUSES = ["PENDING", "QUEUED", "RUNNING", "COMPLETED", "FAILED", "CANCELLED"];
const MOVING = new Set(["PENDING", "QUEUED", "RUNNING"]);
const PAGE_SIZE = 20;
const FAST_POLL_MS = 2000; // while a job on the page or a run being watched is still moving
const SLOW_POLL_MS = 10000; // on the first page, for jobs other clients create

export function statusBadges(job) {
  return [
    badge(job.status),
    job.status === "COMPLETED" && job.resultMeta && job.resultMeta.complete === false
      ? badge("incomplete", "warn") : null,
    job.reviewedAt ? badge("approved", "ok") : null,
  ];
}

export async function render(view, params, ctx) {
  const [schemaList, runList] = await Promise.all([
    api.all("/api/schemas"),
    api.get("/api/job-runs", { limit: 20 }),
  ]);
  const schemaNames = new Map(schemaList.map((s) => [s.id, s.name]));
  const filters = {
    status: ctx.query.get("status") ?? "",
    schemaId: ctx.query.get("schemaId") ?? "",
    jobRunId: ctx.query.get("jobRunId") ?? "",
  };
  const cursors = [undefined]; // the cursor of each page shown so far; the last is the current page
  let lastPage = null;
  let watchedRun = null;
  let retimePoll = () => {}; // set once the poll below starts

  // --- upload ---
  const schemaPicker = select([["", "Choose a schema…"], ...schemaList.map((s) => [s.id, s.name])],
    { name: "schemaId", required: true, value: schemaList.length === 1 ? schemaList[0].id : "" });
  const filePicker = h("input", { type: "file", name: "files", multiple: true, required: true });
  const dropZone = h("div", { class: "drop" },
    field("Files", filePicker, { hint: "Or drop files here. Several files make a batch run." }));
  const uploadProblem = h("p", { class: "error", role: "alert", hidden: true });
  const uploadButton = h("button", { type: "submit", class: "primary" }, "Upload");
  const runPanel = h("div", { class: "run-progress", "aria-live": "polite" });

  for (const name of ["dragenter", "dragover"]) {
    dropZone.addEventListener(name, (event) => { event.preventDefault(); dropZone.classList.add("over"); });
  }
  for (const name of ["dragleave", "drop"]) {
    dropZone.addEventListener(name, () => dropZone.classList.remove("over"));
  }
  dropZone.addEventListener("drop", (event) => {
    event.preventDefault();
    if (event.dataTransfer && event.dataTransfer.files.length) filePicker.files = event.dataTransfer.files;
  });

  async function upload(event) {
    event.preventDefault();
    uploadProblem.hidden = true;
    const files = [...filePicker.files];
    if (!schemaPicker.value || !files.length) {
      uploadProblem.textContent = !schemaPicker.value ? "Choose a schema." : "Choose at least one file.";
      uploadProblem.hidden = false;
      return;
    }
    const form = new FormData();
    form.set("type", "EXTRACTION");
    form.set("schemaId", schemaPicker.value);
    uploadButton.disabled = true;
    try {
      if (files.length === 1) {
        form.set("file", files[0]);
        const job = await api.request("POST", "/api/jobs", { form });
        ctx.notify(`Uploaded ${job.fileName}.`);
      } else {
        files.forEach((file) => form.append("files", file));
        watchedRun = await api.request("POST", "/api/job-runs", { form });
        ctx.notify(`Uploaded ${files.length} files as a batch run.`);
        drawRun();
      }
      filePicker.value = "";
      cursors.splice(0, cursors.length, undefined);
      await refresh();
      retimePoll();
    } catch (error) {
      uploadProblem.textContent = error.message;
      uploadProblem.hidden = false;
    } finally {
      uploadButton.disabled = false;
    }
  }

  function drawRun() {
    if (!watchedRun) { fill(runPanel); return; }
    const run = watchedRun;
    const ended = run.counts.completed + run.counts.failed + run.counts.cancelled;
    fill(runPanel, h("div", { class: "card" },
      h("h2", {}, "Batch run ", shortId(run.id), " ", badge(run.status)),
      h("label", { for: "run-progress" }, `${ended} of ${run.total} ended`),
      h("progress", { id: "run-progress", max: run.total, value: ended }),
      h("p", { class: "muted" },
        `${run.counts.completed} completed, ${run.counts.failed} failed, ${run.counts.cancelled} cancelled, `
        + `${run.counts.running} running, ${run.counts.queued} queued.`),
      h("button", { type: "button", onclick: () => setFilter("jobRunId", run.id) }, "Show this run's jobs")));
  }

  // --- the list ---
  const statusFilter = select([["", "Any status"], ...STATUSES.map((s) => [s, s.toLowerCase()])],
    { name: "status", value: filters.status, onchange: (e) => setFilter("status", e.target.value) });
  const schemaFilter = select([["", "Any schema"], ...schemaList.map((s) => [s.id, s.name])],
    { name: "schemaId", value: filters.schemaId, onchange: (e) => setFilter("schemaId", e.target.value) });
  const runOptions = runList.data.map((r) => [r.id, `${r.id.slice(-8)} · ${r.total} files · ${r.status.toLowerCase()}`]);
  if (filters.jobRunId && !runList.data.some((r) => r.id === filters.jobRunId)) {
    runOptions.unshift([filters.jobRunId, filters.jobRunId.slice(-8)]);
  }
  const runFilter = select([["", "Any run"], ...runOptions],
    { name: "jobRunId", value: filters.jobRunId, onchange: (e) => setFilter("jobRunId", e.target.value) });
  const listArea = h("div", { class: "list" });
  const pager = h("div", { class: "pager" });

  function setFilter(name, value) {
    filters[name] = value;
    if (name === "jobRunId" && value && ![...runFilter.options].some((o) => o.value === value)) {
      runFilter.append(h("option", { value }, value.slice(-8)));
    }
    if (name === "jobRunId") runFilter.value = value;
    const query = new URLSearchParams(Object.entries(filters).filter(([, v]) => v)).toString();
    // Keep the address shareable without re-entering the screen (replaceState fires no hashchange).
    history.replaceState(null, "", `#/jobs${query ? `?${query}` : ""}`);
    cursors.splice(0, cursors.length, undefined);
    refresh();
  }

  function drawList(page) {
    fill(listArea, table([
      ["File", (job) => h("a", { href: `#/jobs/${encodeURIComponent(job.id)}` }, job.fileName ?? job.id)],
      ["Status", (job) => [statusBadges(job), job.errorCode ? h("span", { class: "muted" }, ` ${job.errorCode}`) : null]],
      ["Schema", (job) => schemaNames.get(job.schemaId) ?? shortId(job.schemaId)],
      ["Run", (job) => (job.jobRunId
        ? h("button", { type: "button", class: "link", onclick: () => setFilter("jobRunId", job.jobRunId),
          "aria-label": `Show the jobs of run ${job.jobRunId}` }, job.jobRunId.slice(-8))
        : "—")],
      ["Size", (job) => bytes(job.fileSize)],
      ["Created", (job) => when(job.createdAt)],
    ], page.data, { caption: "Jobs, newest first", empty: "No jobs match." }));
    const pageNumber = cursors.length;
    fill(pager,
      h("button", { type: "button", disabled: pageNumber === 1, onclick: () => { cursors.pop(); refresh(); } }, "Previous page"),
      h("span", { class: "muted" }, `Page ${pageNumber}`),
      h("button", {
        type: "button", disabled: !page.nextCursor,
        onclick: () => { cursors.push(page.nextCursor); refresh(); },
      }, "Next page"));
  }

  // The jobs the filters show, as a spreadsheet (its columns are the schema's fields).
  const exportArea = h("p", { class: "actions export" });
  function drawExport() {
    if (!filters.schemaId) {
      fill(exportArea, h("span", { class: "muted" }, "Filter by a schema to export its jobs as CSV or XLSX."));
      return;
    }
    const save = (format) => h("button", {
      type: "button",
      onclick: async (event) => {
        event.target.disabled = true;
        try {
          const query = { ...filters, format };
          await api.download("/api/jobs/export", query, `docex-jobs.${format}`);
        } catch (error) {
          ctx.notify(error.message, "error");
        } finally {
          event.target.disabled = false;
        }
      },
    }, `Export ${format.toUpperCase()}`);
    fill(exportArea, save("csv"), save("xlsx"), h("span", { class: "muted" }, "every job the filters show"));
  }

  let asked = 0; // the latest list asked for: an older answer that comes later is dropped
  async function refresh() {
    const cursor = cursors[cursors.length - 1];
    const mine = ++asked;
    const [page, run] = await Promise.all([
      api.get("/api/jobs", { ...filters, limit: PAGE_SIZE, cursor }),
      watchedRun && watchedRun.status === "RUNNING" ? api.get(`/api/job-runs/${watchedRun.id}`) : null,
    ]);
    if (ctx.signal.aborted || mine !== asked) return;
    drawExport();
    lastPage = page;
    if (run) { watchedRun = run; drawRun(); }
    drawList(page);
  }

  fill(view,
    h("h1", {}, "Jobs"),
    h("section", { class: "card", "aria-labelledby": "upload-heading" },
      h("h2", { id: "upload-heading" }, "Upload documents"),
      schemaList.length
        ? h("form", { class: "upload", onsubmit: upload },
          field("Schema", schemaPicker), dropZone, uploadProblem, h("div", { class: "actions" }, uploadButton))
        : h("p", {}, "Create a schema first: ", h("a", { href: "#/schemas" }, "Schemas"), ".")),
    runPanel,
    h("section", { "aria-label": "Job list" },
      h("div", { class: "filters" },
        field("Filter by status", statusFilter), field("Filter by schema", schemaFilter),
        field("Filter by run", runFilter)),
      exportArea,
      listArea, pager));
  await refresh();

  // Poll while the screen is shown: fast while something moves, slowly on the first page.
  const moving = () => (lastPage && lastPage.data.some((job) => MOVING.has(job.status)))
    || (watchedRun && watchedRun.status === "RUNNING");
  retimePoll = poll(ctx, () => (moving() ? FAST_POLL_MS : SLOW_POLL_MS), async () => {
    if (!moving() && cursors.length > 1) return; // a later page the person is reading stays put
    await refresh();
  });
}
