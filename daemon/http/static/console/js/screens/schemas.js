// Schemas: the list (#/schemas), and the editor of one schema (#/schemas/:id; the id "new"
// makes one). The editor has two views of the same definition: a field form (one row per
// field, members of objects and items of arrays indented below their field) and the JSON
// Schema as text. Switching between them goes through POST /api/schema/convert both ways,
// so the form shows exactly what the daemon understands. A saved schema can be tried on a
// file: an ordinary job whose values show here, with a link to its review.

import * as api from "../api.js";
import { badge, field, fill, h, select, setFieldError, table, uid, when } from "../dom.js";
import { confirmButton } from "../widgets.js";

const TYPES = ["string", "number", "integer", "boolean", "date", "object", "array"];
const ITEM_TYPES = ["string", "number", "integer", "boolean", "date"];
const FORMATS = [["", "none"], ["date-time", "date and time"], ["email", "email"], ["uri", "URI"]];
// The keywords of a definition's root that the field form has no place for ($schema, title,
// description, x-docex-provider, x-docex-incomplete): kept aside and put back on the way out.
const FORM_KEYS = new Set(["type", "properties", "required"]);
const ENDED = new Set(["COMPLETED", "FAILED", "CANCELLED"]);
const TRY_POLL_MS = 1000;

export async function render(view, params, ctx) {
  if (params.id === undefined) await renderList(view, ctx);
  else await renderEditor(view, params.id === "new" ? null : params.id, ctx);
}

function problemsOf(error) {
  return error instanceof api.ApiError ? error.messages : [error.message];
}

function showProblems(el, messages) {
  fill(el, messages.length > 1 ? h("ul", {}, messages.map((m) => h("li", {}, m))) : messages[0] ?? "");
  el.hidden = messages.length === 0;
}

// --- the list --------------------------------------------------------------------------

async function renderList(view, ctx) {
  const listArea = h("div", { class: "list" });

  // Throws on failure: the confirm button then shows the message beside itself.
  async function remove(schema) {
    await api.del(`/api/schemas/${encodeURIComponent(schema.id)}`);
    ctx.notify(`Deleted ${schema.name}.`);
    await refresh();
  }

  async function refresh() {
    const schemas = await api.all("/api/schemas");
    if (ctx.signal.aborted) return;
    fill(listArea, table([
      ["Name", (s) => h("a", { href: `#/schemas/${encodeURIComponent(s.id)}` }, s.name)],
      ["Description", (s) => s.description ?? ""],
      ["Fields", (s) => String(Object.keys(s.definition.properties ?? {}).length)],
      ["Updated", (s) => when(s.updatedAt)],
      ["", (s) => confirmButton("Delete", `Delete “${s.name}”? Jobs already queued on it will fail.`,
        () => remove(s), { danger: true, label: `Delete ${s.name}` })],
    ], schemas, { caption: "Your schemas, newest first", empty: "No schemas yet. Make one with “New schema”." }));
  }

  fill(view,
    h("div", { class: "schemas-head" },
      h("h1", {}, "Schemas"),
      h("button", { type: "button", class: "primary", onclick: () => ctx.navigate("#/schemas/new") }, "New schema")),
    h("p", { class: "muted" }, "A schema says which values to extract from a document: their names, types and hints."),
    listArea);
  await refresh();
}

// --- the editor ------------------------------------------------------------------------

/** The fields as the convert route takes them: empty optional inputs left out. */
function cleanFields(fields) {
  return fields.map((f) => {
    const out = { name: f.name, type: f.type, required: Boolean(f.required) };
    if (f.title) out.title = f.title;
    if (f.description) out.description = f.description;
    if (f.format) out.format = f.format;
    if (f.enum && f.enum.length) out.enum = f.enum;
    if (f.itemType) out.itemType = f.itemType;
    if (f.fields) out.fields = cleanFields(f.fields);
    return out;
  });
}

/** Where a convert problem points: "fields[3].fields[0].name …" or "fields.3.type …"
 * (validation) → {indices: [3, 0], key: "name", rest: " …"}; null if it names no field. */
function fieldPath(message) {
  const found = /^fields((?:(?:\[\d+\]|\.\d+)(?:\.fields)?)+)(?:\.([A-Za-z]+))?/.exec(message);
  if (!found) return null;
  return { indices: found[1].match(/\d+/g).map(Number), key: found[2] ?? null, rest: message.slice(found[0].length) };
}

/** Values typed one per line, as the field's type reads them. */
function parseEnum(text, kind) {
  const lines = text.split("\n").map((line) => line.trim()).filter((line) => line !== "");
  if (!lines.length) return undefined;
  if (kind === "number" || kind === "integer") return lines.map((line) => (Number.isNaN(Number(line)) ? line : Number(line)));
  if (kind === "boolean") return lines.map((line) => (line === "true" ? true : line === "false" ? false : line));
  return lines;
}

function blankField() {
  return { name: "", type: "string", required: false };
}

async function renderEditor(view, id, ctx) {
  const saved = id ? await api.get(`/api/schemas/${encodeURIComponent(id)}`) : null;
  let fields = [blankField()];
  let extras = {}; // root keywords the field form cannot show
  if (saved) {
    ({ fields, extras } = await toFields(saved.definition));
  }
  let mode = "fields";

  async function toFields(definition) {
    const converted = await api.post("/api/schema/convert", { jsonSchema: definition });
    const kept = Object.fromEntries(Object.entries(definition).filter(([key]) => !FORM_KEYS.has(key)));
    return { fields: converted.fields, extras: kept };
  }

  // --- name and description ---
  const heading = h("h1", {}, saved ? `Schema: ${saved.name}` : "New schema");
  const nameInput = h("input", { type: "text", name: "name", required: true, maxlength: 200, value: saved?.name ?? "" });
  const descriptionInput = h("input", {
    type: "text", name: "description", maxlength: 2000, value: saved?.description ?? "",
  });
  const problem = h("div", { class: "error", role: "alert", hidden: true });

  // --- the field form ---
  const rowsArea = h("div", { class: "schema-fields" });
  const fieldsProblem = h("div", { class: "error", role: "alert", hidden: true });
  const rowErrors = new Map(); // "3.0" (indices) → {slot, controls}

  // Nested rows are labelled with their parent's name ("line_items field 1 name"): the
  // labels are computed by these functions, run again when a name is typed.
  let labelers = [];
  const relabel = () => labelers.forEach((labeler) => labeler());

  /** Draw the rows again (after adding, removing, moving, or a change of type), keeping
   * the focus on the control of the same place: ids are made from the field's position. */
  function redraw(focusId) {
    const active = focusId ?? document.activeElement?.id;
    rowErrors.clear();
    labelers = [];
    fill(rowsArea, fieldList(fields, [], null));
    relabel();
    const again = active ? document.getElementById(active) : null;
    if (again) again.focus();
  }

  /** The rows of `list` (at `indices`), with a button to add one; `parent` (the object or
   * array field that holds them, and its label) for nested lists. */
  function fieldList(list, indices, parent) {
    const addButton = h("button", {
      type: "button", id: `sf-${indices.join("-")}-add`,
      onclick: () => { list.push(blankField()); redraw(`sf-${[...indices, list.length - 1].join("-")}-name`); },
    }, "Add field");
    const rows = h("ol", { class: "schema-field-list" }, list.map((f, i) => {
      const label = parent ? () => `${parent.label()} field ${i + 1}` : () => `Field ${i + 1}`;
      return fieldRow(list, i, [...indices, i], label, parent);
    }));
    if (!parent) return h("div", {}, rows, h("div", { class: "actions" }, addButton));
    const legend = h("legend", {});
    labelers.push(() => {
      legend.textContent = parent.field.type === "object" ? `Members of ${parent.label()}` : `Each item of ${parent.label()}`;
      addButton.textContent = `Add field to ${parent.label()}`;
    });
    return h("fieldset", { class: "schema-fields-nested" }, legend, rows, h("div", { class: "actions" }, addButton));
  }

  function fieldRow(list, i, indices, label, parent) {
    const f = list[i];
    const key = indices.join("-");
    const controls = {};
    const labelled = (part, control, extra = {}) => {
      control.id = `sf-${key}-${part}`;
      controls[part] = control;
      const prefix = h("span", { class: "visually-hidden" });
      labelers.push(() => { prefix.textContent = `${label()} `; });
      return field([prefix, extra.text ?? part], control, { hint: extra.hint });
    };

    const name = h("input", {
      type: "text", required: true, maxlength: 200, value: f.name, autocomplete: "off",
      oninput: (e) => { f.name = e.target.value; if (f.fields) relabel(); },
    });
    const type = select(TYPES.map((t) => [t, t]), {
      value: f.type,
      onchange: (e) => { setType(f, e.target.value); redraw(); },
    });
    const description = h("input", {
      type: "text", maxlength: 2000, value: f.description ?? "",
      oninput: (e) => { f.description = e.target.value; },
    });
    const required = h("input", {
      type: "checkbox", checked: Boolean(f.required),
      onchange: (e) => { f.required = e.target.checked; },
    });

    const parts = [labelled("name", name), labelled("type", type)];
    if (f.type === "array") {
      const items = select([["object", "objects (a table)"], ...ITEM_TYPES.map((t) => [t, t])], {
        value: f.fields ? "object" : f.itemType,
        onchange: (e) => { setItems(f, e.target.value); redraw(); },
      });
      parts.push(labelled("items", items));
    }
    const valueType = f.type === "array" ? f.itemType : f.type;
    if (valueType === "string") {
      const format = select(FORMATS, { value: f.format ?? "", onchange: (e) => { f.format = e.target.value || undefined; } });
      parts.push(labelled("format", format));
    }
    parts.push(h("div", { class: "grow" }, labelled("description", description)));
    const requiredField = labelled("required", required);
    requiredField.classList.add("checkbox");
    parts.push(requiredField);
    if (valueType && valueType !== "object" && valueType !== "array") {
      const values = h("textarea", { rows: 2, oninput: (e) => { f.enum = parseEnum(e.target.value, valueType); } });
      values.value = (f.enum ?? []).map(String).join("\n");
      parts.push(labelled("enum", values, { text: "allowed values (one per line)" }));
    }

    const move = (to) => {
      [list[i], list[to]] = [list[to], list[i]];
      const place = [...indices.slice(0, -1), to].join("-");
      const target = `sf-${place}-${to < i ? "up" : "down"}`;
      // At the top or bottom that button is disabled: keep the focus in the moved row.
      const edge = (to === 0 && to < i) || (to === list.length - 1 && to > i);
      redraw(edge ? `sf-${place}-name` : target);
    };
    const up = h("button", { type: "button", id: `sf-${key}-up`, disabled: i === 0, onclick: () => move(i - 1) }, "Up");
    const down = h("button", { type: "button", id: `sf-${key}-down`, disabled: i === list.length - 1,
      onclick: () => move(i + 1) }, "Down");
    const remove = h("button", { type: "button", class: "danger",
      onclick: () => { list.splice(i, 1); redraw(`sf-${indices.slice(0, -1).join("-")}-add`); } }, "Remove");
    labelers.push(() => {
      const named = label().replace(/^Field/, "field");
      up.setAttribute("aria-label", `Move ${named} up`);
      down.setAttribute("aria-label", `Move ${named} down`);
      remove.setAttribute("aria-label", `Remove ${named}`);
    });

    const slot = h("p", { class: "field-error row-error", hidden: true });
    rowErrors.set(indices.join("."), { slot, controls, label });
    const nested = f.fields
      // Named by its path of names ("lines.buyer"), so rows of two nested lists never share a label.
      ? fieldList(f.fields, indices, {
        field: f, label: () => (f.name ? (parent ? `${parent.label()}.${f.name}` : f.name) : label()),
      })
      : null;
    return h("li", { class: "schema-field" },
      h("div", { class: "schema-field-row" }, parts, h("div", { class: "row-buttons" }, up, down, remove)), slot, nested);
  }

  function setType(f, type) {
    f.type = type;
    delete f.itemType;
    if (type === "object" || type === "array") {
      f.fields = f.fields ?? [blankField()];
      delete f.enum;
      delete f.format;
    } else {
      delete f.fields;
      if (type !== "string") delete f.format;
      if (f.enum) f.enum = parseEnum(f.enum.map(String).join("\n"), type);
    }
  }

  function setItems(f, kind) {
    if (kind === "object") {
      delete f.itemType;
      f.fields = f.fields ?? [blankField()];
    } else {
      delete f.fields;
      f.itemType = kind;
      if (kind !== "string") delete f.format;
    }
  }

  function clearFieldErrors() {
    showProblems(fieldsProblem, []);
    for (const { slot, controls } of rowErrors.values()) {
      slot.hidden = true;
      Object.values(controls).forEach((control) => setFieldError(control, null));
    }
  }

  /** Show each problem of a conversion of the fields at the row (and control) it names. */
  function showFieldErrors(messages) {
    const elsewhere = [];
    for (const message of messages) {
      const path = fieldPath(message);
      const row = path && rowErrors.get(path.indices.join("."));
      if (!row) { elsewhere.push(message); continue; }
      const control = row.controls[path.key === "itemType" ? "items" : path.key];
      // Said with the row's label ("Field 2 name should not be empty"), not the API's path.
      const said = `${row.label()}${path.key ? ` ${path.key}` : ""}${path.rest}`;
      if (control) setFieldError(control, said);
      else { row.slot.textContent = said; row.slot.hidden = false; }
    }
    showProblems(fieldsProblem, elsewhere);
    const first = rowsArea.querySelector("[aria-invalid='true']");
    if (first) first.focus();
  }

  /** The definition the field form describes, through the convert route; null (with the
   * problems shown at their rows) if it cannot be converted. */
  async function fieldsToDefinition() {
    clearFieldErrors();
    if (!fields.length) {
      showProblems(fieldsProblem, ["Add at least one field."]);
      return null;
    }
    try {
      const { jsonSchema } = await api.post("/api/schema/convert", { fields: cleanFields(fields) });
      return { ...extras, ...jsonSchema };
    } catch (error) {
      if (!(error instanceof api.ApiError) || error.status !== 400) throw error;
      showFieldErrors(error.messages);
      return null;
    }
  }

  // --- the JSON Schema ---
  const jsonInput = h("textarea", { name: "definition", rows: 22, spellcheck: "false", class: "schema-json" });

  function parsedJson() {
    setFieldError(jsonInput, null);
    try {
      const parsed = JSON.parse(jsonInput.value);
      if (parsed !== null && typeof parsed === "object" && !Array.isArray(parsed)) return parsed;
      setFieldError(jsonInput, `The definition must be a JSON object: {"type": "object", "properties": {…}}.`);
    } catch (error) {
      setFieldError(jsonInput, `This is not valid JSON: ${error.message}`);
    }
    jsonInput.focus();
    return undefined;
  }

  // --- switching views ---
  const fieldsTab = h("button", { type: "button", role: "tab", id: "tab-fields", "aria-controls": "panel-fields" }, "Fields");
  const jsonTab = h("button", { type: "button", role: "tab", id: "tab-json", "aria-controls": "panel-json" }, "JSON Schema");
  const fieldsPanel = h("div", { role: "tabpanel", id: "panel-fields", "aria-labelledby": "tab-fields" },
    fieldsProblem, rowsArea);
  const jsonPanel = h("div", { role: "tabpanel", id: "panel-json", "aria-labelledby": "tab-json" },
    field("JSON Schema definition", jsonInput, {
      hint: "Draft 2020-12, an object at the root. Switch back to Fields to edit it as a form.",
    }));

  function showMode(next) {
    mode = next;
    fieldsTab.setAttribute("aria-selected", String(mode === "fields"));
    jsonTab.setAttribute("aria-selected", String(mode === "json"));
    fieldsTab.tabIndex = mode === "fields" ? 0 : -1;
    jsonTab.tabIndex = mode === "json" ? 0 : -1;
    fieldsPanel.hidden = mode !== "fields";
    jsonPanel.hidden = mode !== "json";
  }

  async function switchTo(next) {
    if (next === mode) return;
    showProblems(problem, []);
    try {
      if (next === "json") {
        // A form with no field named yet (a new schema) is nothing to convert: an empty
        // definition to paste one over (it was refused: "Field 1 name should not be empty").
        const untouched = fields.every((f) => !String(f.name ?? "").trim() && !f.fields);
        const definition = untouched ? { type: "object", properties: {} } : await fieldsToDefinition();
        if (!definition) return;
        jsonInput.value = JSON.stringify(definition, null, 2);
        setFieldError(jsonInput, null);
      } else {
        const definition = parsedJson();
        if (definition === undefined) return;
        try {
          ({ fields, extras } = await toFields(definition));
        } catch (error) {
          if (!(error instanceof api.ApiError) || error.status !== 400) throw error;
          setFieldError(jsonInput, error.messages.join("\n"));
          jsonInput.focus();
          return;
        }
        redraw();
      }
      showMode(next);
    } catch (error) {
      showProblems(problem, problemsOf(error));
    }
  }
  fieldsTab.addEventListener("click", () => switchTo("fields"));
  jsonTab.addEventListener("click", () => switchTo("json"));
  // The tabs pattern: arrow keys move between the two tabs.
  const tabKeys = async (event) => {
    if (event.key !== "ArrowLeft" && event.key !== "ArrowRight") return;
    event.preventDefault();
    await switchTo(mode === "fields" ? "json" : "fields");
    (mode === "fields" ? fieldsTab : jsonTab).focus();
  };
  fieldsTab.addEventListener("keydown", tabKeys);
  jsonTab.addEventListener("keydown", tabKeys);

  // --- start from an example ---
  const exampleInput = h("textarea", { rows: 6, spellcheck: "false" });
  const exampleButton = h("button", { type: "button" }, "Make fields from the example");
  exampleButton.addEventListener("click", async () => {
    setFieldError(exampleInput, null);
    let example;
    try {
      example = JSON.parse(exampleInput.value);
    } catch (error) {
      setFieldError(exampleInput, `This is not valid JSON: ${error.message}`);
      return;
    }
    exampleButton.disabled = true;
    try {
      const { jsonSchema } = await api.post("/api/schema/convert", { example });
      ({ fields } = await toFields(jsonSchema));
      redraw();
      if (mode === "json") jsonInput.value = JSON.stringify({ ...extras, ...jsonSchema }, null, 2);
      ctx.notify(`Made ${fields.length} fields from the example.`);
    } catch (error) {
      setFieldError(exampleInput, problemsOf(error).join("\n"));
    } finally {
      exampleButton.disabled = false;
    }
  });

  // --- save ---
  const saveButton = h("button", { type: "submit", class: "primary" }, "Save");

  async function save(event) {
    event.preventDefault();
    showProblems(problem, []);
    setFieldError(nameInput, null);
    setFieldError(descriptionInput, null);
    saveButton.disabled = true;
    try {
      const definition = mode === "fields" ? await fieldsToDefinition() : parsedJson();
      if (!definition) return;
      const body = { name: nameInput.value, description: descriptionInput.value || null, definition };
      let result;
      try {
        result = saved
          ? await api.patch(`/api/schemas/${encodeURIComponent(saved.id)}`, body)
          : await api.post("/api/schemas", body);
      } catch (error) {
        if (!(error instanceof api.ApiError) || error.status !== 400) throw error;
        showSaveErrors(error.messages);
        return;
      }
      ctx.notify(`Saved ${result.name}.`);
      dirty = false;
      if (!saved) { ctx.navigate(`#/schemas/${encodeURIComponent(result.id)}`); return; }
      Object.assign(saved, result);
      heading.textContent = `Schema: ${result.name}`;
      updated.replaceChildren("Last saved ", when(result.updatedAt), ".");
    } catch (error) {
      showProblems(problem, problemsOf(error));
    } finally {
      saveButton.disabled = false;
    }
  }

  /** Problems of a save at the input they name: name, description, the definition (the
   * JSON text, or above the form when the form made it). */
  function showSaveErrors(messages) {
    const elsewhere = [];
    const definitionProblems = [];
    for (const message of messages) {
      if (/^name\b/.test(message)) setFieldError(nameInput, message);
      else if (/^description\b/.test(message)) setFieldError(descriptionInput, message);
      else if (/^definition\b/.test(message) && mode === "json") definitionProblems.push(message);
      else elsewhere.push(message);
    }
    if (definitionProblems.length) { setFieldError(jsonInput, definitionProblems.join("\n")); jsonInput.focus(); }
    showProblems(problem, elsewhere);
  }

  const updated = h("p", { class: "muted" }, saved ? ["Last saved ", when(saved.updatedAt), "."] : null);

  fill(view,
    h("p", {}, h("a", { href: "#/schemas" }, "← All schemas")),
    heading,
    updated,
    h("form", { class: "schema-editor", onsubmit: save, novalidate: true },
      problem,
      h("section", { class: "card" },
        field("Name", nameInput),
        field("Description", descriptionInput, { hint: "For people; the fields' descriptions guide the extractor." })),
      h("section", { class: "card", "aria-labelledby": "definition-heading" },
        h("h2", { id: "definition-heading" }, "Definition"),
        h("div", { role: "tablist", "aria-label": "Edit the definition as", class: "tabs" }, fieldsTab, jsonTab),
        fieldsPanel, jsonPanel),
      h("details", { class: "card" },
        h("summary", {}, "Start from an example result"),
        h("p", { class: "muted" }, "Paste a result you would like to get, as JSON: its fields replace the form's."),
        field("Example result (JSON)", exampleInput),
        h("div", { class: "actions" }, exampleButton)),
      h("div", { class: "actions" }, saveButton)),
    saved ? tryPanel(saved, ctx) : null,
    saved ? examplesPanel(saved, ctx) : null);
  redraw();
  showMode("fields");
  // Leaving with changes not saved asks first (a link in the bar dropped them silently).
  let dirty = false;
  for (const kind of ["input", "change"]) view.querySelector("form.schema-editor").addEventListener(kind, () => { dirty = true; });
  ctx.onLeave(() => (dirty ? "Your changes to this schema are not saved. Leave anyway?" : null));
  window.addEventListener("beforeunload", (event) => { if (dirty) event.preventDefault(); }, { signal: ctx.signal });
}

// --- what corrections taught ------------------------------------------------------------

/** The learned examples of the schema (README "Learning from corrections"), each with the
 * values it confirmed and a way to forget it: a wrong correction otherwise kept teaching. */
function examplesPanel(schema, ctx) {
  const base = `/api/schemas/${encodeURIComponent(schema.id)}/examples`;
  const area = h("div", {}, h("p", { class: "muted" }, "Loading…"));

  function confirmed(example) {
    return h("dl", { class: "values" }, Object.entries(example.fields).map(([pointer, lesson]) => [
      h("dt", {}, pointer.slice(1)),
      h("dd", {}, String(lesson.value), lesson.constant ? [" ", badge("printed the same on each")] : null),
    ]));
  }

  async function refresh() {
    const examples = await api.all(base);
    if (ctx.signal.aborted) return;
    fill(area, table([
      ["Job", (e) => h("a", { href: `#/jobs/${encodeURIComponent(e.jobId)}` }, shortJob(e.jobId))],
      ["Values it confirmed", (e) => confirmed(e)],
      ["Learned", (e) => when(e.createdAt)],
      ["", (e) => confirmButton("Forget", "Forget this example? Later documents are read without it.", async () => {
        await api.del(`${base}/${encodeURIComponent(e.id)}`);
        ctx.notify("Forgotten.");
        await refresh();
      }, { danger: true, label: `Forget the example of job ${e.jobId}` })],
    ], examples, { caption: "Examples, newest first", empty: "Nothing learned yet: correct or approve a job of this schema." }));
  }
  refresh().catch((error) => fill(area, h("p", { class: "error", role: "alert" }, error.message)));

  return h("section", { class: "card", "aria-labelledby": "examples-heading" },
    h("h2", { id: "examples-heading" }, "Learned from corrections"),
    h("p", { class: "muted" }, "Each corrected or approved job teaches how its issuer's documents read; the "
      + "next document of that issuer is read with it first (its values are marked “learned”)."),
    area);
}

function shortJob(id) {
  return `…${String(id).slice(-8)}`;
}

// --- try on a file ---------------------------------------------------------------------

function tryPanel(schema, ctx) {
  const fileInput = h("input", { type: "file", id: uid("try") });
  const tryButton = h("button", { type: "submit" }, "Try");
  const status = h("div", { class: "try-status", "aria-live": "polite" });
  const outcome = h("div", { class: "try-outcome" });

  async function tryFile(event) {
    event.preventDefault();
    fill(outcome);
    const file = fileInput.files[0];
    if (!file) { fill(status, h("p", { class: "error" }, "Choose a file first.")); return; }
    const form = new FormData();
    form.set("type", "EXTRACTION");
    form.set("schemaId", schema.id);
    form.set("file", file);
    tryButton.disabled = true;
    try {
      let job = await api.request("POST", "/api/jobs", { form });
      const review = h("a", { href: `#/jobs/${encodeURIComponent(job.id)}` }, `Review the job for ${job.fileName}`);
      while (!ENDED.has(job.status)) {
        fill(status, h("p", {}, badge(job.status), ` ${job.fileName}`));
        await new Promise((resolve) => setTimeout(resolve, TRY_POLL_MS));
        if (ctx.signal.aborted) return;
        job = await api.get(`/api/jobs/${encodeURIComponent(job.id)}`);
      }
      fill(status, h("p", {}, badge(job.status), ` ${job.fileName} `, review));
      if (job.status === "COMPLETED") {
        fill(outcome, h("h3", {}, "Extracted values"), valueView(job.result ?? {}, "Extracted values"));
      } else if (job.errorMessage) {
        fill(outcome, h("p", { class: "error" }, `${job.errorCode ?? "Failed"}: ${job.errorMessage}`));
      }
    } catch (error) {
      fill(status, h("p", { class: "error", role: "alert" }, problemsOf(error).join("; ")));
    } finally {
      tryButton.disabled = false;
    }
  }

  return h("section", { class: "card", "aria-labelledby": "try-heading" },
    h("h2", { id: "try-heading" }, "Try this schema"),
    h("p", { class: "muted" }, "Runs an ordinary job with the saved schema (save your changes first)."),
    h("form", { onsubmit: tryFile },
      field("Try on a file", fileInput),
      h("div", { class: "actions" }, tryButton)),
    status, outcome);
}

/** A result as text: objects as name/value lists, arrays of objects as tables. */
function valueView(value, name) {
  if (value === null || value === undefined) return h("span", { class: "muted" }, "—");
  if (Array.isArray(value)) {
    if (value.length && value.every((v) => v && typeof v === "object" && !Array.isArray(v))) {
      const columns = [...new Set(value.flatMap((v) => Object.keys(v)))];
      return table(columns.map((c) => [c, (row) => valueView(row[c], c)]), value, { caption: name });
    }
    return value.length ? value.map((v) => (v !== null && typeof v === "object" ? JSON.stringify(v) : String(v))).join(", ") : "—";
  }
  if (typeof value === "object") {
    return h("dl", { class: "values" }, Object.entries(value).map(([key, v]) => [
      h("dt", {}, key), h("dd", {}, valueView(v, key)),
    ]));
  }
  return String(value);
}
