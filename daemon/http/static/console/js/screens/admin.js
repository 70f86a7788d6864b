// Administration (#/admin, ADMIN only; the router sends others away and the API answers
// them 403): the installation's figures, and every user with their role and whether
// they may sign in.

import * as api from "../api.js";
import { badge, fill, h, select, table, uid, when } from "../dom.js";

// Names for the figures /api/admin/stats gives; a figure added later shows under its key.
const FIGURES = {
  users: "Users",
  admins: "Admins",
  disabledUsers: "Disabled users",
  activeSessions: "Active sessions",
  activeApiKeys: "Active API keys",
};

function figureName(key) {
  return FIGURES[key] ?? key.replace(/([A-Z])/g, " $1").replace(/^./, (c) => c.toUpperCase());
}

export async function render(view, params, ctx) {
  const statsArea = h("div", { "aria-live": "polite" });
  const usersArea = h("div", {});

  async function refreshStats() {
    const stats = await api.get("/api/admin/stats");
    if (ctx.signal.aborted) return;
    fill(statsArea, h("dl", { class: "figures" }, Object.entries(stats).map(([key, value]) =>
      h("div", { class: "figure" }, h("dt", {}, figureName(key)), h("dd", {}, String(value))))));
  }

  async function change(user, changes) {
    try {
      const updated = await api.patch(`/api/admin/users/${encodeURIComponent(user.id)}`, changes);
      ctx.notify(changes.role
        ? `${updated.name} is now ${updated.role.toLowerCase()}.`
        : `${updated.name} is ${updated.disabled ? "disabled" : "enabled"}.`);
    } catch (error) {
      ctx.notify(error.message, "error");
    }
    await Promise.all([refreshUsers(), refreshStats()]);
  }

  function roleControl(user) {
    const self = user.id === ctx.user.id;
    const control = select([["USER", "User"], ["ADMIN", "Admin"]], {
      id: uid("role"),
      value: user.role,
      // The API refuses an admin demoting themselves (409): offer no such choice.
      disabled: self,
      title: self ? "You cannot change your own role" : null,
      onchange: (event) => change(user, { role: event.target.value }),
    });
    // The column heading says "Role" to the eye; the label names the user for a screen reader.
    return [h("label", { for: control.id, class: "visually-hidden" }, `Role of ${user.name}`), control];
  }

  function accessButton(user) {
    if (user.id === ctx.user.id) return h("span", { class: "muted" }, "you");
    const disable = !user.disabled;
    return h("button", {
      type: "button", class: disable ? "danger" : null,
      "aria-label": `${disable ? "Disable" : "Enable"} ${user.name}`,
      onclick: (event) => { event.target.disabled = true; change(user, { disabled: disable }); },
    }, disable ? "Disable" : "Enable");
  }

  async function refreshUsers() {
    const users = await api.all("/api/admin/users");
    if (ctx.signal.aborted) return;
    fill(usersArea, table([
      ["Name", (u) => u.name],
      ["Email", (u) => u.email],
      ["Role", (u) => roleControl(u)],
      ["Status", (u) => (u.disabled ? badge("disabled", "bad") : badge("active", "ok"))],
      ["Registered", (u) => when(u.createdAt)],
      ["", (u) => accessButton(u)],
    ], users, { caption: "Every user", empty: "No users." }));
  }

  fill(view,
    h("h1", {}, "Administration"),
    h("section", { class: "card", "aria-labelledby": "stats-heading" },
      h("h2", { id: "stats-heading" }, "Figures"),
      statsArea),
    h("section", { "aria-labelledby": "users-heading" },
      h("h2", { id: "users-heading" }, "Users"),
      h("p", { class: "muted" }, "A disabled user's sessions and API keys stop working at once."),
      usersArea));
  await Promise.all([refreshStats(), refreshUsers()]);
}
