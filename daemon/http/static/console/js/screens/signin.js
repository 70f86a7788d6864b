// Sign in, and register (the first account becomes the admin; later ones only while
// `auth.registration` is "open"). /api/settings says whether a registration would be
// taken now; when it would not, neither the link nor the form is offered.

import * as api from "../api.js";
import { field, fill, h } from "../dom.js";
import { showProblems } from "../widgets.js";

const CLOSED = "Registration is closed: an administrator creates accounts (`docex users create` on the server).";

export async function render(view, params, ctx) {
  const settings = await api.get("/api/settings");
  const open = settings.registration === "open";
  const registering = ctx.pattern === "/register";
  if (registering && !open) {
    fill(view, h("section", { class: "card narrow" },
      h("h1", {}, "Create an account"),
      h("p", {}, CLOSED),
      h("p", { class: "muted" }, ["Have an account? ", h("a", { href: "#/signin" }, "Sign in")])));
    return;
  }
  const name = h("input", { type: "text", name: "name", autocomplete: "name", required: true, maxlength: 100 });
  const email = h("input", { type: "email", name: "email", autocomplete: "username", required: true });
  const password = h("input", {
    type: "password", name: "password", required: true, minlength: 6,
    autocomplete: registering ? "new-password" : "current-password",
  });
  const problem = h("div", { class: "error", role: "alert", hidden: true });
  const submit = h("button", { type: "submit", class: "primary" }, registering ? "Register" : "Sign in");

  async function onSubmit(event) {
    event.preventDefault();
    problem.hidden = true;
    submit.disabled = true;
    try {
      if (registering) await api.register(name.value, email.value, password.value);
      else await api.signIn(email.value, password.value);
      const back = sessionStorage.getItem("docex.after-signin");
      sessionStorage.removeItem("docex.after-signin");
      ctx.navigate(back && !back.startsWith("#/signin") && !back.startsWith("#/register") ? back : "#/jobs");
    } catch (error) {
      showProblems(problem, error);
      submit.disabled = false;
    }
  }

  fill(view, h("section", { class: "card narrow" },
    h("h1", {}, registering ? "Create an account" : "Sign in to docex"),
    h("form", { onsubmit: onSubmit, novalidate: false },
      registering ? field("Name", name) : null,
      field("Email", email),
      field("Password", password, registering ? { hint: "6 to 72 bytes." } : {}),
      problem,
      h("div", { class: "actions" }, submit)),
    h("p", { class: "muted" }, registering
      ? ["Have an account? ", h("a", { href: "#/signin" }, "Sign in")]
      : open ? ["New here? ", h("a", { href: "#/register" }, "Create an account"),
        " (the first account administers docex)."] : CLOSED)));
  (registering ? name : email).focus();
}
