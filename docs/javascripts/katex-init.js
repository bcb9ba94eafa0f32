// Render the math that pymdownx.arithmatex (generic mode) leaves in the page:
//   inline:  <span class="arithmatex">\( ... \)</span>
//   display: <div class="arithmatex">\[ ... \]</div>
// KaTeX is bundled under docs/javascripts/katex/, so no network access is needed.
// `document$` is mkdocs-material's observable: it fires on the first load and after every
// instant-navigation page switch, so math on pages reached by a link is rendered too.
(function () {
  function renderArithmatex(root) {
    if (typeof katex === "undefined") return;
    root.querySelectorAll(".arithmatex").forEach(function (el) {
      if (el.dataset.katexDone) return;
      var tex = el.textContent.trim();
      var display = el.tagName === "DIV";
      if (tex.startsWith("\\(") && tex.endsWith("\\)")) {
        tex = tex.slice(2, -2);
      } else if (tex.startsWith("\\[") && tex.endsWith("\\]")) {
        tex = tex.slice(2, -2);
        display = true;
      }
      try {
        katex.render(tex, el, { displayMode: display, throwOnError: true });
      } catch (err) {
        // Leave the source visible and mark it, so a broken formula is easy to spot.
        el.classList.add("katex-failed");
        el.title = String(err);
        console.error("KaTeX:", err);
      }
      el.dataset.katexDone = "1";
    });
  }
  if (typeof document$ !== "undefined") {
    document$.subscribe(function () {
      renderArithmatex(document);
    });
  } else {
    document.addEventListener("DOMContentLoaded", function () {
      renderArithmatex(document);
    });
  }
})();
