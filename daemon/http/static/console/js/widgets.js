// Pieces the screens share: a secret shown once, a confirmation asked in place (no
// window.confirm: a modal the page cannot style, that screen readers announce poorly and
// that blocks every other tab of the browser), and the poll that keeps a screen current.

import { ApiError } from "./api.js";
import { fill, h, uid } from "./dom.js";

/** A once-shown secret (an endpoint's signing secret, an API key) with a copy button.
 *
 * `what` names it in the sentence ("signing secret"); `copyLabel` is the button's text. */
export function secretBox(secret, { what, copyLabel, heading }) {
  const code = h("code", { id: uid("secret") }, secret);
  const status = h("span", { class: "muted", role: "status" });
  async function copy() {
    try {
      await navigator.clipboard.writeText(secret);
      status.textContent = "Copied.";
    } catch {
      // No clipboard permission (an insecure origin, a locked-down browser): select the
      // text so a keyboard copy takes it.
      const range = document.createRange();
      range.selectNodeContents(code);
      const selection = window.getSelection();
      selection.removeAllRanges();
      selection.addRange(range);
      status.textContent = "Selected: press Ctrl+C (⌘C) to copy it.";
    }
  }
  const box = h("div", { class: "secret", "aria-labelledby": `${code.id}-heading` },
    h("h3", { id: `${code.id}-heading` }, heading),
    h("p", {}, `Copy the ${what} now: it will not be shown again.`),
    h("p", {}, code),
    h("div", { class: "actions" },
      h("button", { type: "button", class: "primary", onclick: copy }, copyLabel),
      h("button", { type: "button", onclick: () => box.remove() }, "I have stored it"),
      status));
  return box;
}

/** A button that asks before it acts: the question and "Yes, …"/"Cancel" take its place.
 *
 * `action` is awaited; if it throws, its message shows beside the button again. Options:
 * `yes` (the confirming button's text), `danger` (red buttons), `label` (an accessible name
 * naming the thing acted on, e.g. "Revoke API key ci"). */
export function confirmButton(text, question, action, { yes, danger = false, label } = {}) {
  const box = h("span", { class: "confirm" });
  const trigger = h("button", { type: "button", class: danger ? "danger" : null, "aria-label": label, onclick: ask },
    text);
  const problem = h("span", { class: "error", role: "alert" });

  function idle(message) {
    problem.textContent = message ?? "";
    fill(box, trigger, message ? [" ", problem] : null);
  }

  function ask() {
    const go = h("button", { type: "button", class: danger ? "danger" : "primary", onclick: run },
      yes ?? `Yes, ${text.toLowerCase()}`);
    const cancel = h("button", { type: "button", onclick: () => { idle(); trigger.focus(); } }, "Cancel");
    fill(box, h("span", { class: "question", role: "alert" }, question), go, cancel);
    go.focus();

    async function run() {
      go.disabled = true;
      cancel.disabled = true;
      try {
        await action();
        if (box.isConnected) idle();
      } catch (error) {
        idle(error.message);
      }
    }
  }

  idle();
  return box;
}

/** Call `tick` while the screen is shown (not while its tab is hidden), `delayMs()` apart,
 * asked afresh before each wait; a tick that answers false ends the polling.
 *
 * Returns `retime`: call it when the person set something moving (a test event sent, a
 * file uploaded), so a slow wait begun while all was still is cut to the fast one now due. */
export function poll(ctx, delayMs, tick) {
  let retime = () => {};
  (async () => {
    while (!ctx.signal.aborted) {
      await new Promise((resolve) => {
        let timer = setTimeout(resolve, delayMs());
        retime = () => { clearTimeout(timer); timer = setTimeout(resolve, delayMs()); };
      });
      if (ctx.signal.aborted) return;
      if (document.hidden) continue;
      try {
        if (await tick() === false) return;
      } catch { /* the next round tries again; a 401 already sent us to sign-in */ }
    }
  })();
  return () => retime();
}

/** The problems of a failed call as text, or a list, in `box` (an error region), shown. */
export function showProblems(box, error) {
  const messages = error instanceof ApiError ? error.messages : [error.message];
  fill(box, messages.length > 1 ? h("ul", {}, messages.map((m) => h("li", {}, m))) : messages[0]);
  box.hidden = false;
}
