// API keys and sessions (#/account): create a key (shown once), revoke one; see where
// this account is signed in, end a session, or sign out everywhere; change the password.

import * as api from "../api.js";
import { badge, field, fill, h, select, table, when } from "../dom.js";
import { confirmButton, secretBox, showProblems } from "../widgets.js";

/** The end of the chosen day in the browser's time zone, as the API's ISO instant. */
function endOfDay(date) {
  return new Date(`${date}T23:59:59`).toISOString();
}

export async function render(view, params, ctx) {
  const isAdmin = ctx.user.role === "ADMIN";
  const keysArea = h("div", {});
  const sessionsArea = h("div", {});
  const secretArea = h("div", { "aria-live": "polite" });

  // --- API keys ---
  const name = h("input", { type: "text", name: "name", required: true, maxlength: 100, autocomplete: "off" });
  // A USER can only make USER keys (the API answers 403 above the owner's role): no choice to offer.
  const role = isAdmin ? select([["USER", "User"], ["ADMIN", "Admin"]], { name: "role", value: "USER" }) : null;
  const expires = h("input", { type: "date", name: "expiresAt" });
  const problem = h("div", { class: "error", role: "alert", hidden: true });
  const create = h("button", { type: "submit", class: "primary" }, "Create API key");

  async function onCreate(event) {
    event.preventDefault();
    problem.hidden = true;
    create.disabled = true;
    try {
      const body = { name: name.value.trim() };
      if (role) body.role = role.value;
      if (expires.value) body.expiresAt = endOfDay(expires.value);
      const made = await api.post("/api/auth/api-keys", body);
      fill(secretArea, secretBox(made.apiKey, {
        what: "API key", copyLabel: "Copy API key", heading: `API key “${made.name}”`,
      }));
      name.value = "";
      expires.value = "";
      await refreshKeys();
    } catch (error) {
      showProblems(problem, error);
    } finally {
      create.disabled = false;
    }
  }

  async function refreshKeys() {
    const keys = await api.all("/api/auth/api-keys");
    if (ctx.signal.aborted) return;
    fill(keysArea, table([
      ["Name", (k) => k.name],
      ["Key", (k) => h("code", {}, `${k.prefix}…${k.last4}`)],
      ["Role", (k) => k.role.toLowerCase()],
      ["Created", (k) => when(k.createdAt)],
      ["Last used", (k) => (k.lastUsedAt ? when(k.lastUsedAt) : "never")],
      ["Expires", (k) => (k.expiresAt ? when(k.expiresAt) : "never")],
      ["", (k) => confirmButton("Revoke", `Revoke “${k.name}”? Programs using it are refused at once.`,
        async () => {
          await api.del(`/api/auth/api-keys/${encodeURIComponent(k.id)}`);
          ctx.notify(`API key “${k.name}” revoked.`);
          await refreshKeys();
        }, { danger: true, yes: "Yes, revoke it", label: `Revoke API key ${k.name}` })],
    ], keys, { caption: "Your API keys", empty: "No API keys yet." }));
  }

  // --- sessions ---
  async function refreshSessions() {
    const sessions = await api.all("/api/auth/sessions");
    if (ctx.signal.aborted) return;
    fill(sessionsArea, table([
      ["Browser or program", (s) => [s.current ? [badge("This session", "ok"), " "] : null, s.userAgent ?? "unknown"]],
      ["IP address", (s) => s.ip ?? "—"],
      ["Signed in", (s) => when(s.createdAt)],
      ["Last used", (s) => when(s.lastUsedAt)],
      ["Expires", (s) => when(s.expiresAt)],
      // The current session ends with "Sign out" in the bar.
      ["", (s) => (s.current ? null : confirmButton("End session", "End this session? It must sign in again.",
        async () => {
          await api.del(`/api/auth/sessions/${encodeURIComponent(s.id)}`);
          ctx.notify("Session ended.");
          await refreshSessions();
        }, { danger: true, yes: "Yes, end it", label: `End session of ${s.userAgent ?? "an unknown program"} at ${s.ip ?? "an unknown address"}` }))],
    ], sessions, { caption: "Where you are signed in, newest first", empty: "No active sessions." }));
  }

  // --- password ---
  const current = h("input", { type: "password", name: "current-password", required: true,
    autocomplete: "current-password" });
  const fresh = h("input", { type: "password", name: "new-password", required: true, minlength: 6,
    autocomplete: "new-password" });
  const again = h("input", { type: "password", name: "repeat-password", required: true, minlength: 6,
    autocomplete: "new-password" });
  const passwordProblem = h("div", { class: "error", role: "alert", hidden: true });
  const change = h("button", { type: "submit", class: "primary" }, "Change password");

  async function onChangePassword(event) {
    event.preventDefault();
    passwordProblem.hidden = true;
    if (fresh.value !== again.value) {
      fill(passwordProblem, "The new password and its repetition differ.");
      passwordProblem.hidden = false;
      return;
    }
    change.disabled = true;
    try {
      await api.post("/api/auth/password", { currentPassword: current.value, newPassword: fresh.value });
      current.value = fresh.value = again.value = "";
      ctx.notify("Password changed. Every other session of this account was ended.");
      await refreshSessions();
    } catch (error) {
      showProblems(passwordProblem, error);
    } finally {
      change.disabled = false;
    }
  }

  async function signOutEverywhere() {
    await api.post("/api/auth/logout-all");
    // This session is among those ended: forget it here too (its cookie is refused now).
    await api.signOut().catch(() => null);
    ctx.navigate("#/signin");
  }

  fill(view,
    h("h1", {}, "API keys and sessions"),
    h("section", { class: "card", "aria-labelledby": "keys-heading" },
      h("h2", { id: "keys-heading" }, "API keys"),
      h("p", { class: "muted" }, "A program sends its key as ", h("code", {}, "Authorization: Bearer <key>"),
        ". Keys do not expire unless you say so; revoke one you no longer need."),
      secretArea,
      keysArea,
      h("form", { class: "row key-form", onsubmit: onCreate },
        field("Key name", name),
        role ? field("Key role", role) : null,
        field("Expires on (optional)", expires),
        h("div", { class: "field" }, create)),
      problem),
    h("section", { class: "card", "aria-labelledby": "sessions-heading" },
      h("h2", { id: "sessions-heading" }, "Sessions"),
      sessionsArea,
      h("div", { class: "actions" },
        confirmButton("Sign out everywhere", "End every session of this account, this one too? API keys keep working.",
          signOutEverywhere, { danger: true, yes: "Yes, sign out everywhere" }))),
    h("section", { class: "card", "aria-labelledby": "password-heading" },
      h("h2", { id: "password-heading" }, "Password"),
      h("p", { class: "muted" }, "A password is 6 to 72 bytes. Changing it ends every other session of this "
        + "account; API keys keep working."),
      h("form", { class: "row key-form", onsubmit: onChangePassword },
        field("Current password", current),
        field("New password", fresh),
        field("New password again", again),
        h("div", { class: "field" }, change)),
      passwordProblem));
  await Promise.all([refreshKeys(), refreshSessions()]);
}
