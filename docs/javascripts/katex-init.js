// Render the math that pymdownx.arithmatex (generic mode) leaves in the page:
//   inline:  <span class="arithmatex">\( ... \)</span>
//   display: <div class="arithmatex">\[ ... \]</div>
// KaTeX is bundled under docs/javascripts/katex/, so no network access is needed.
// Two triggers, both always armed (a formula is rendered once; the second trigger skips it):
// - the page's own load (DOMContentLoaded, or at once when the page has already loaded): a page
//   opened from disk (file://) gets no event from mkdocs-material's instant navigation, which
//   does not run there, so this is what renders its math;
// - `document$`, mkdocs-material's observable, which fires after every instant-navigation page
//   switch, so math on pages reached by a link is rendered too.
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
  function renderPage() {
    renderArithmatex(document);
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", renderPage);
  } else {
    renderPage();
  }
  if (typeof document$ !== "undefined") {
    document$.subscribe(renderPage);
  }
})();
