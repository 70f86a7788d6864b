// Placeholder: this screen is being built.
import { fill, h } from "../dom.js";

export async function render(view) {
  fill(view, h("h1", {}, "admin"), h("p", {}, "Not built yet."));
}
