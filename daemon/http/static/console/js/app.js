// The console's shell: the bar with the navigation, the router over `#/…` addresses, and
// notices. A screen is a module with `render(view, params, ctx)`: it fills `view` (the
// <main> element) and stops its timers when `ctx.signal` aborts (the user went elsewhere).

import * as api from "./api.js";
import { fill, h } from "./dom.js";
import * as account from "./screens/account.js";
import * as admin from "./screens/admin.js";
import * as jobs from "./screens/jobs.js";
import * as queue from "./screens/queue.js";
import * as review from "./screens/review.js";
import * as schemas from "./screens/schemas.js";
import * as signin from "./screens/signin.js";
import * as webhooks from "./screens/webhooks.js";

// [pattern, screen, title, needs a signed-in user, admin only]
const ROUTES = [
  ["/signin", signin, "Sign in", false],
  ["/register", signin, "Register", false],
  ["/jobs", jobs, "Jobs", true],
  ["/jobs/:id", review, "Review", true],
  ["/review", queue, "Review queue", true],
  ["/schemas", schemas, "Schemas", true],
  ["/schemas/:id", schemas, "Schema", true],
  ["/webhooks", webhooks, "Webhooks", true],
  ["/webhooks/:id", webhooks, "Webhook", true],
  ["/account", account, "API keys and sessions", true],
  ["/admin", admin, "Administration", true, true],
];
const NAV = [
  ["#/jobs", "Jobs"],
  ["#/review", "Review queue"],
  ["#/schemas", "Schemas"],
  ["#/webhooks", "Webhooks"],
  ["#/account", "API keys"],
];

const main = document.getElementById("main");
const bar = document.getElementById("bar");
const notices = document.getElementById("notices");
let current = null; // {controller} of the screen on show
// The screen's question before it is left with work not saved (`ctx.onLeave`), or null; and
// the address it is shown at, put back when the person stays.
let leaving = null;
let shownHash = location.hash;
let shownAt = 0; // when the entry on show was first shown: history entries are in that order

function match(path) {
  for (const [pattern, screen, title, needsUser, adminOnly] of ROUTES) {
    const names = [];
    const regex = new RegExp(`^${pattern.replace(/:(\w+)/g, (_, name) => { names.push(name); return "([^/]+)"; })}$`);
    const found = regex.exec(path);
    if (found) {
      const params = Object.fromEntries(names.map((name, i) => [name, decoded(found[i + 1])]));
      // A part that is no URI (a link cut inside a %-escape) names nothing: "Not found".
      if (Object.values(params).includes(null)) return null;
      return { screen, title, needsUser, adminOnly, params, pattern };
    }
  }
  return null;
}

/** A part of the address, %-decoded; null for one decodeURIComponent refuses (`%E0%A4%A`,
 * `%ZZ`), whose URIError would otherwise escape the router and leave the old screen shown. */
function decoded(part) {
  try {
    return decodeURIComponent(part);
  } catch {
    return null;
  }
}

export function navigate(hash) {
  if (location.hash === hash) route();
  else location.hash = hash;
}

/** A short message in the notice area (read out by screen readers). */
export function notify(message, kind = "info") {
  if (kind === "error") {
    // Said at once (an alert), and kept until read: it vanished after 8 s, over the form.
    const notice = h("p", { class: "notice notice-error", role: "alert" }, message, " ",
      h("button", { type: "button", class: "link", onclick: () => notice.remove() }, "Dismiss"));
    notices.append(notice);
    return;
  }
  const notice = h("p", { class: `notice notice-${kind}` }, message);
  notices.append(notice);
  setTimeout(() => notice.remove(), 4000);
}

function drawBar(user, pattern) {
  if (!user) {
    bar.hidden = true;
    return;
  }
  const links = [...NAV];
  if (user.role === "ADMIN") links.push(["#/admin", "Admin"]);
  const here = `#${pattern.split("/:")[0]}`;
  fill(bar,
    h("a", { class: "brand", href: "#/jobs" }, "docex"),
    h("nav", { "aria-label": "Main" }, h("ul", {}, links.map(([href, label]) =>
      h("li", {}, h("a", { href, "aria-current": href === here ? "page" : null }, label))))),
    h("div", { class: "who" },
      h("span", { title: user.email }, `${user.name} (${user.role.toLowerCase()})`),
      h("button", { type: "button", class: "link", onclick: signOut }, "Sign out")));
  bar.hidden = false;
}

async function signOut() {
  try {
    await api.signOut();
  } catch (error) {
    notify(`Sign-out failed: ${error.message}`, "error");
  }
  navigate("#/signin");
}

/** A move to another address (a link, Back, a screen's own): the screen on show may ask to stay. */
function onHashChange() {
  if (location.hash === shownHash) return;
  const question = leaving && leaving();
  if (question && !window.confirm(question)) {
    // Stay: undo the move in the history (a link or Forward made a later entry, Back an
    // earlier one); the hashchange that brings shownHash back is then ignored.
    const at = history.state && history.state.at;
    if (typeof at === "number" && at < shownAt) history.forward();
    else history.back();
    return;
  }
  route();
}

/** When this history entry was first shown (stamped in its state on the first visit). */
function entryTime() {
  if (!history.state || typeof history.state.at !== "number") {
    history.replaceState({ ...(history.state || {}), at: performance.timeOrigin + performance.now() }, "");
  }
  return history.state.at;
}

async function route() {
  const [path, search] = (location.hash.replace(/^#/, "") || "/jobs").split("?");
  const found = match(path);
  if (current) current.controller.abort();
  const controller = new AbortController();
  current = { controller };
  leaving = null;
  shownHash = location.hash;
  shownAt = entryTime();
  if (!found) {
    drawBar(api.user(), "/");
    fill(main, h("h1", {}, "Not found"), h("p", {}, "There is no such page. ", h("a", { href: "#/jobs" }, "Go to the jobs.")));
    return;
  }
  // Clear the old screen at once: nothing of it may be used while the session is restored.
  fill(main, h("p", { class: "muted" }, "Loading…"));
  let user = api.user();
  if (!user && found.needsUser) user = await api.restore().catch(() => null);
  if (controller.signal.aborted) return;
  if (found.needsUser && !user) {
    sessionStorage.setItem("docex.after-signin", location.hash);
    navigate("#/signin");
    return;
  }
  if (found.adminOnly && user.role !== "ADMIN") {
    navigate("#/jobs");
    return;
  }
  document.title = `${found.title} · docex`;
  drawBar(user, found.pattern);
  const ctx = {
    user, signal: controller.signal, navigate, notify, path, pattern: found.pattern,
    query: new URLSearchParams(search ?? ""),
    // `question()`: what to ask before the screen is left (its work not saved), or null to go.
    onLeave: (question) => { if (!controller.signal.aborted) leaving = question; },
  };
  try {
    await found.screen.render(main, found.params, ctx);
    // Where the new screen starts, for the keyboard and a screen reader (focus fell to the
    // page's body when the bar was drawn again); unless the screen put it somewhere itself.
    const heading = main.querySelector("h1");
    if (heading && !controller.signal.aborted && (!document.activeElement || document.activeElement === document.body)) {
      heading.tabIndex = -1;
      heading.focus({ preventScroll: true });
    }
  } catch (error) {
    if (controller.signal.aborted) return;
    fill(main, h("h1", {}, found.title), h("p", { class: "error", role: "alert" }, error.message));
  }
}

api.onSignedOut(() => {
  if (location.hash !== "#/signin" && location.hash !== "#/register") navigate("#/signin");
});
window.addEventListener("hashchange", onHashChange);
route();
