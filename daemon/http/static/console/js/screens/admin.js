// Administration (#/admin, ADMIN only; the router sends others away and the API answers
// them 403): the installation's figures, and every user with their role and whether
// they may sign in.

import * as api from "../api.js";
import { badge, fill, h, select, table, uid, when } from "../dom.js";
import { confirmButton } from "../widgets.js";

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
    const question = h("span", { class: "confirm" });
    const control = select([["USER", "User"], ["ADMIN", "Admin"]], {
      id: uid("role"),
      value: user.role,
      // The API refuses an admin demoting themselves (409): offer no such choice.
      disabled: self,
      title: self ? "You cannot change your own role" : null,
      // Asked first: an arrow key on a focused select changes it (and made an admin at once).
      onchange: () => {
        const role = control.value;
        const cancel = () => { control.value = user.role; fill(question); control.focus(); };
        fill(question,
          h("span", { class: "question", role: "alert" }, role === "ADMIN"
            ? `Make ${user.name} an admin? Admins manage every account.` : `Make ${user.name} a user?`),
          h("button", { type: "button", class: "primary", onclick: () => change(user, { role }) }, "Yes, change the role"),
          h("button", { type: "button", onclick: cancel }, "Cancel"));
      },
    });
    // The column heading says "Role" to the eye; the label names the user for a screen reader.
    return [h("label", { for: control.id, class: "visually-hidden" }, `Role of ${user.name}`), control, question];
  }

  function accessButton(user) {
    if (user.id === ctx.user.id) return h("span", { class: "muted" }, "you");
    if (user.disabled) {
      return h("button", {
        type: "button", "aria-label": `Enable ${user.name}`,
        onclick: (event) => { event.target.disabled = true; change(user, { disabled: false }); },
      }, "Enable");
    }
    return confirmButton("Disable", `Disable ${user.name}? Their sessions and API keys stop working at once.`,
      () => change(user, { disabled: true }), { danger: true, label: `Disable ${user.name}` });
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
