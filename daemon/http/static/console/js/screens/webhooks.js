// Webhooks: the caller's endpoints and a form for a new one (#/webhooks); one endpoint
// (#/webhooks/:id) with its settings, enable/disable, secret rotation, a test event,
// deletion, and its delivery log with each delivery's attempts and a replay; after an
// outage, every failed delivery since a time sent again in one go (recover).
//
// A signing secret is in the create and rotate answers only: it shows once, in a box
// that is gone after a reload (the API never gives it again).

import * as api from "../api.js";
import { badge, field, fill, h, select, shortId, table, uid, when } from "../dom.js";
import { confirmButton, poll, secretBox, showProblems } from "../widgets.js";

const MODES = [["AUTOMATIC", "Automatic: the events subscribed to"], ["MANUAL", "Manual: only sends and tests"]];
const FORMATS = [["JSON", "JSON"], ["XML", "XML"], ["FORM_URLENCODED", "Form (URL-encoded)"]];
const DELIVERY_STATUSES = ["PENDING", "RETRYING", "SUCCEEDED", "DEAD"];
const MOVING = new Set(["PENDING", "RETRYING"]);
const PAGE_SIZE = 20;
const FAST_POLL_MS = 1500; // while a delivery on show is still being attempted
const SLOW_POLL_MS = 10000; // for deliveries other events queue meanwhile

export async function render(view, params, ctx) {
  const catalog = (await api.get("/api/webhooks/event-catalog")).data;
  if (params.id) return renderEndpoint(view, params.id, catalog, ctx);
  return renderList(view, catalog, ctx);
}

function statusBadges(endpoint) {
  return endpoint.enabled
    ? badge("enabled", "ok")
    : [badge("disabled", "bad"),
      endpoint.disabledReason ? h("span", { class: "muted disabled-reason" }, endpoint.disabledReason) : null];
}

function eventsText(endpoint) {
  if (endpoint.events.length) return endpoint.events.join(", ");
  return endpoint.deliveryMode === "MANUAL" ? "sends and tests only" : "—";
}

// --- the settings form (create and edit) ---------------------------------------------------

/** The fields of an endpoint; `read()` gives the API body, or throws a message to show. */
function endpointFields(catalog, endpoint) {
  const url = h("input", { type: "url", name: "url", required: true, maxlength: 2048, value: endpoint?.url ?? "",
    placeholder: "https://example.com/hooks/docex", autocomplete: "off" });
  const description = h("input", { type: "text", name: "description", maxlength: 500,
    value: endpoint?.description ?? "" });
  const mode = select(MODES, { name: "deliveryMode", value: endpoint?.deliveryMode ?? "AUTOMATIC" });
  const format = select(FORMATS, { name: "bodyFormat", value: endpoint?.bodyFormat ?? "JSON" });

  const known = new Set(catalog.map((entry) => entry.type));
  const chosen = new Set(endpoint?.events ?? []);
  const boxes = catalog.map((entry) => {
    const id = uid("event");
    const box = h("input", { type: "checkbox", id, value: entry.type, checked: chosen.has(entry.type),
      "aria-describedby": `${id}-about` });
    return { box, item: h("li", {},
      box, " ", h("label", { for: id }, entry.type),
      h("span", { class: "muted", id: `${id}-about` }, ` ${entry.description}`)) };
  });
  const patterns = h("input", { type: "text", name: "patterns", autocomplete: "off",
    value: (endpoint?.events ?? []).filter((e) => !known.has(e)).join(", ") });

  const headerRows = h("div", { class: "header-rows" });
  let headerCount = 0;
  function addHeader(name = "", value = "") {
    headerCount += 1;
    const n = headerCount;
    const nameInput = h("input", { type: "text", class: "header-name", value: name, autocomplete: "off" });
    const valueInput = h("input", { type: "text", class: "header-value", value, autocomplete: "off" });
    const row = h("div", { class: "row header-row" },
      field(`Header ${n} name`, nameInput), field(`Header ${n} value`, valueInput),
      h("button", { type: "button", class: "remove-header", onclick: () => row.remove() }, `Remove header ${n}`));
    headerRows.append(row);
    return nameInput;
  }
  Object.entries(endpoint?.customHeaders ?? {}).forEach(([name, value]) => addHeader(name, value));

  const element = [
    field("URL", url, { hint: "Where docex POSTs each event." }),
    field("Description", description),
    h("div", { class: "row" }, field("Mode", mode), field("Body format", format)),
    h("fieldset", { class: "events" },
      h("legend", {}, "Events"),
      h("ul", { class: "checks" }, boxes.map((b) => b.item)),
      field("Other patterns", patterns,
        { hint: "Comma-separated: job.* for every job event, * for everything." })),
    h("fieldset", { class: "headers" },
      h("legend", {}, "Custom headers"),
      h("p", { class: "hint" }, "A header that carries a credential (Authorization, a token, a key…) shows " +
        "******** once saved: leave it to keep the value, or type a new one."),
      headerRows,
      h("button", { type: "button", onclick: () => addHeader().focus() }, "Add header")),
  ];

  function read() {
    const events = boxes.filter((b) => b.box.checked).map((b) => b.box.value);
    for (const pattern of patterns.value.split(/[\s,]+/)) {
      if (pattern && !events.includes(pattern)) events.push(pattern);
    }
    const customHeaders = {};
    for (const row of headerRows.querySelectorAll(".header-row")) {
      const name = row.querySelector(".header-name").value.trim();
      const value = row.querySelector(".header-value").value;
      if (!name && !value) continue;
      if (!name) throw new Error("A custom header needs a name.");
      customHeaders[name] = value;
    }
    return {
      url: url.value.trim(),
      description: description.value.trim() || null,
      deliveryMode: mode.value,
      events,
      bodyFormat: format.value,
      customHeaders,
    };
  }

  return { element, read };
}

// --- #/webhooks ------------------------------------------------------------------------------

async function renderList(view, catalog, ctx) {
  const listArea = h("div", { class: "list" });
  const secretArea = h("div", { "aria-live": "polite" });
  const problem = h("div", { class: "error", role: "alert", hidden: true });
  const submit = h("button", { type: "submit", class: "primary" }, "Create endpoint");
  let form = newForm();

  function newForm() {
    const fields = endpointFields(catalog, null);
    const element = h("form", { class: "endpoint-form", onsubmit: (event) => create(event, fields) },
      fields.element, problem, h("div", { class: "actions" }, submit));
    return element;
  }

  async function create(event, fields) {
    event.preventDefault();
    problem.hidden = true;
    submit.disabled = true;
    try {
      const created = await api.post("/api/webhooks", fields.read());
      fill(secretArea, secretBox(created.signingSecret, {
        what: "signing secret", copyLabel: "Copy secret",
        heading: "Signing secret of the new endpoint",
      }), h("p", {}, "Endpoint created: ", h("a", { href: `#/webhooks/${encodeURIComponent(created.id)}` }, created.url)));
      const fresh = newForm();
      form.replaceWith(fresh);
      form = fresh;
      await refresh();
      secretArea.scrollIntoView({ block: "nearest" });
    } catch (error) {
      showProblems(problem, error);
    } finally {
      submit.disabled = false;
    }
  }

  async function refresh() {
    const endpoints = await api.all("/api/webhooks");
    if (ctx.signal.aborted) return;
    fill(listArea, table([
      ["URL", (e) => [h("a", { href: `#/webhooks/${encodeURIComponent(e.id)}` }, e.url),
        e.description ? h("div", { class: "muted" }, e.description) : null]],
      ["Mode", (e) => e.deliveryMode.toLowerCase()],
      ["Events", (e) => eventsText(e)],
      ["Status", (e) => statusBadges(e)],
      ["Dead in a row", (e) => String(e.consecutiveDeadDeliveries)],
      ["Created", (e) => when(e.createdAt)],
    ], endpoints, { caption: "Your endpoints, newest first", empty: "No endpoints yet." }));
  }

  fill(view,
    h("h1", {}, "Webhooks"),
    secretArea,
    h("section", { class: "endpoints", "aria-label": "Endpoints" }, listArea),
    h("section", { class: "card", "aria-labelledby": "new-endpoint" },
      h("h2", { id: "new-endpoint" }, "New endpoint"),
      form));
  await refresh();
}

// --- #/webhooks/:id --------------------------------------------------------------------------

async function renderEndpoint(view, id, catalog, ctx) {
  let endpoint = await api.get(`/api/webhooks/${encodeURIComponent(id)}`);
  const filters = { status: ctx.query.get("status") ?? "", eventType: ctx.query.get("eventType") ?? "" };
  const cursors = [undefined];
  let lastPage = null;
  let selected = null; // the delivery detail on show
  let retimePoll = () => {}; // set once the poll below starts

  const heading = h("h1", {});
  const summary = h("div", {});
  const controls = h("div", { class: "actions endpoint-controls" });
  const secretArea = h("div", { "aria-live": "polite" });
  const editArea = h("div", {});
  const listArea = h("div", { class: "list" });
  const pager = h("div", { class: "pager" });
  const detailArea = h("div", { class: "delivery-detail", "aria-live": "polite" });

  function drawEndpoint() {
    fill(heading, "Webhook endpoint");
    fill(summary, h("p", { class: "endpoint-url" }, h("code", {}, endpoint.url)),
      h("p", {}, statusBadges(endpoint)),
      h("p", { class: "muted" },
        `${endpoint.deliveryMode.toLowerCase()} · ${endpoint.bodyFormat} · events: ${eventsText(endpoint)}`
        + ` · ${endpoint.consecutiveDeadDeliveries} dead in a row`
        + (endpoint.schemaIds.length ? ` · bound to ${endpoint.schemaIds.length} schema(s)` : "")),
      endpoint.description ? h("p", {}, endpoint.description) : null);
    // A disabled endpoint is sent nothing (the API answers 409): say so instead of offering it.
    fill(controls,
      h("button", { type: "button", onclick: sendTest, disabled: !endpoint.enabled,
        "aria-describedby": endpoint.enabled ? null : "send-test-off" }, "Send test"),
      endpoint.enabled
        ? h("button", { type: "button", onclick: () => setEnabled(false) }, "Disable")
        : h("button", { type: "button", class: "primary", onclick: () => setEnabled(true) }, "Enable"),
      confirmButton("Rotate secret",
        "Make a new signing secret? For a day deliveries carry signatures by both the new and the old one.",
        rotate, { yes: "Yes, rotate the secret" }),
      confirmButton("Delete endpoint", "Delete this endpoint and its delivery log? Pending deliveries are dropped.",
        remove, { danger: true, yes: "Yes, delete the endpoint" }),
      endpoint.enabled ? null : h("span", { class: "muted", id: "send-test-off" }, "Enable the endpoint to send a test."));
  }

  async function act(work) {
    try {
      await work();
    } catch (error) {
      ctx.notify(error.message, "error");
    }
  }

  const sendTest = () => act(async () => {
    const delivery = await api.post(`/api/webhooks/${encodeURIComponent(endpoint.id)}/test`);
    ctx.notify("Test event queued.");
    cursors.splice(0, cursors.length, undefined);
    await Promise.all([refreshList(), showDelivery(delivery.id)]);
    retimePoll();
  });

  const setEnabled = (enabled) => act(async () => {
    endpoint = await api.patch(`/api/webhooks/${encodeURIComponent(endpoint.id)}`, { enabled });
    ctx.notify(enabled ? "Endpoint enabled." : "Endpoint disabled.");
    drawEndpoint();
  });

  async function rotate() {
    const { signingSecret } = await api.post(`/api/webhooks/${encodeURIComponent(endpoint.id)}/rotate-secret`);
    fill(secretArea, secretBox(signingSecret, {
      what: "signing secret", copyLabel: "Copy secret", heading: "New signing secret",
    }));
  }

  async function remove() {
    await api.del(`/api/webhooks/${encodeURIComponent(endpoint.id)}`);
    ctx.notify("Endpoint deleted.");
    ctx.navigate("#/webhooks");
  }

  function drawEditForm() {
    const fields = endpointFields(catalog, endpoint);
    const problem = h("div", { class: "error", role: "alert", hidden: true });
    const save = h("button", { type: "submit", class: "primary" }, "Save changes");
    async function onSubmit(event) {
      event.preventDefault();
      problem.hidden = true;
      save.disabled = true;
      try {
        endpoint = await api.patch(`/api/webhooks/${encodeURIComponent(endpoint.id)}`, fields.read());
        ctx.notify("Settings saved.");
        drawEndpoint();
        drawEditForm();
      } catch (error) {
        showProblems(problem, error);
        save.disabled = false;
      }
    }
    fill(editArea, h("details", { class: "card" },
      h("summary", {}, h("h2", {}, "Settings")),
      h("form", { class: "endpoint-form", onsubmit: onSubmit },
        fields.element, problem, h("div", { class: "actions" }, save))));
  }

  // --- deliveries ---
  const statusFilter = select([["", "Any status"], ...DELIVERY_STATUSES.map((s) => [s, s.toLowerCase()])],
    { value: filters.status, onchange: (e) => setFilter("status", e.target.value) });
  const typeFilter = select([["", "Any event type"], ...catalog.map((entry) => [entry.type, entry.type])],
    { value: filters.eventType, onchange: (e) => setFilter("eventType", e.target.value) });

  function setFilter(name, value) {
    filters[name] = value;
    const query = new URLSearchParams(Object.entries(filters).filter(([, v]) => v)).toString();
    history.replaceState(null, "", `#/webhooks/${encodeURIComponent(id)}${query ? `?${query}` : ""}`);
    cursors.splice(0, cursors.length, undefined);
    act(refreshList);
  }

  function drawList(page) {
    fill(listArea, table([
      ["Event", (d) => h("code", {}, d.eventType)],
      ["Status", (d) => badge(d.status)],
      ["Attempts", (d) => String(d.attempts)],
      ["Last answer", (d) => (d.lastStatusCode ?? d.lastError ?? "—")],
      ["Created", (d) => when(d.createdAt)],
      ["", (d) => h("button", { type: "button", class: "link", "aria-pressed": String(selected?.id === d.id),
        "aria-label": `Show attempts of ${d.eventType} delivery ${d.id.slice(-8)}`,
        onclick: () => act(() => showDelivery(d.id)) }, "Show attempts")],
    ], page.data, {
      caption: "Deliveries, newest first", empty: "No deliveries match.",
      rowProps: (d) => ({ class: selected?.id === d.id ? "selected" : null, dataset: { delivery: d.id } }),
    }));
    const pageNumber = cursors.length;
    fill(pager,
      h("button", { type: "button", disabled: pageNumber === 1, onclick: () => { cursors.pop(); act(refreshList); } },
        "Previous page"),
      h("span", { class: "muted" }, `Page ${pageNumber}`),
      h("button", { type: "button", disabled: !page.nextCursor,
        onclick: () => { cursors.push(page.nextCursor); act(refreshList); } }, "Next page"));
  }

  async function refreshList() {
    const page = await api.get(`/api/webhooks/${encodeURIComponent(endpoint.id)}/deliveries`,
      { ...filters, limit: PAGE_SIZE, cursor: cursors[cursors.length - 1] });
    if (ctx.signal.aborted) return;
    lastPage = page;
    drawList(page);
  }

  async function showDelivery(deliveryId) {
    const detail = await api.get(`/api/webhooks/deliveries/${encodeURIComponent(deliveryId)}`);
    if (ctx.signal.aborted) return;
    selected = detail;
    if (lastPage) drawList(lastPage);
    drawDetail();
  }

  const replay = () => act(async () => {
    const delivery = await api.post(`/api/webhooks/deliveries/${encodeURIComponent(selected.id)}/replay`);
    ctx.notify(endpoint.enabled ? "Replay queued." : "Replay queued: it waits until the endpoint is enabled.");
    cursors.splice(0, cursors.length, undefined);
    await Promise.all([refreshList(), showDelivery(delivery.id)]);
    retimePoll();
  });

  function drawDetail() {
    if (!selected) {
      fill(detailArea, h("p", { class: "muted" }, "Choose a delivery to see its attempts."));
      return;
    }
    const d = selected;
    fill(detailArea, h("section", { class: "card", "aria-labelledby": "delivery-heading" },
      h("h2", { id: "delivery-heading" }, "Delivery ", shortId(d.id), " ", badge(d.status)),
      h("dl", { class: "facts" },
        h("dt", {}, "Event"), h("dd", {}, h("code", {}, d.eventType), " ", h("code", { class: "muted" }, d.eventId)),
        h("dt", {}, "Created"), h("dd", {}, when(d.createdAt)),
        d.nextAttemptAt ? [h("dt", {}, "Next attempt"), h("dd", {}, when(d.nextAttemptAt))] : null),
      h("div", { class: "actions" }, h("button", { type: "button", onclick: replay }, "Replay")),
      table([
        ["At", (a) => when(a.at)],
        ["Status code", (a) => (a.statusCode === null ? "—" : String(a.statusCode))],
        ["Duration", (a) => `${a.durationMs} ms`],
        ["Error", (a) => a.error ?? "—"],
        ["Response body", (a) => (a.responseBody ? h("pre", { class: "response" }, a.responseBody) : "—")],
      ], d.attemptLog, { caption: "Attempts, oldest first", empty: "Not attempted yet." })));
  }

  // --- recovery after an outage: every DEAD delivery since a time, once ---
  const since = h("input", { type: "datetime-local", required: true, step: 1 });
  const dayAgo = new Date(Date.now() - 24 * 3600 * 1000 - new Date().getTimezoneOffset() * 60000);
  since.value = dayAgo.toISOString().slice(0, 19);
  const recoverForm = h("form", { class: "recover row", onsubmit: (event) => {
    event.preventDefault();
    act(async () => {
      const answer = await api.post(`/api/webhooks/${encodeURIComponent(endpoint.id)}/recover`,
        { since: new Date(since.value).toISOString() });
      ctx.notify(answer.recovered
        ? `${answer.recovered} failed deliver${answer.recovered === 1 ? "y" : "ies"} sent again`
          + (answer.hasMore ? "; recover again for the rest." : ".")
        : "No failed delivery to recover since then.");
      cursors.splice(0, cursors.length, undefined);
      await refreshList();
      retimePoll();
    });
  } },
  field("Recover failed deliveries since", since,
    { hint: "Each DEAD delivery since then is sent again once, oldest first." }),
  h("div", { class: "actions" }, h("button", { type: "submit" }, "Recover")));

  fill(view,
    h("p", {}, h("a", { href: "#/webhooks" }, "← All endpoints")),
    heading, summary, controls, secretArea, editArea,
    h("section", { "aria-labelledby": "deliveries-heading" },
      h("h2", { id: "deliveries-heading" }, "Deliveries"),
      recoverForm,
      h("div", { class: "filters" }, field("Filter by status", statusFilter), field("Filter by event type", typeFilter)),
      h("div", { class: "split" }, h("div", {}, listArea, pager), detailArea)));
  drawEndpoint();
  drawEditForm();
  drawDetail();
  await refreshList();

  // Poll while shown: fast while a delivery on show is still being attempted.
  const moving = () => (lastPage && lastPage.data.some((d) => MOVING.has(d.status)))
    || (selected && MOVING.has(selected.status));
  retimePoll = poll(ctx, () => (moving() ? FAST_POLL_MS : SLOW_POLL_MS), async () => {
    if (!moving() && cursors.length > 1) return; // a later page the person is reading stays put
    await refreshList();
    if (selected && MOVING.has(selected.status)) await showDelivery(selected.id);
  });
}
