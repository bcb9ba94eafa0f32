"""Screenshot the built documentation site in headless Chromium, with no network (manual check).

Builds the site (``mkdocs build --strict``) into a temporary folder unless ``--site`` is given,
serves it on 127.0.0.1 from a thread, and for each page

* writes a PNG (``<out>/<name>.png``) with Chromium's ``--screenshot``, and
* dumps the rendered DOM (``--dump-dom``) and reports how many ``.arithmatex`` elements KaTeX
  rendered, how many failed, and whether raw ``$$`` / ``\\(`` / ``\\[`` are left in the page text;
* fetches every ``<img>`` of the page from the local server (the benchmark figures) and reports
  how many load.

Chromium's host resolver maps every name except 127.0.0.1 to "not found", so a page that needs a
CDN shows it. Look at the PNGs afterwards: math typeset, navigation tabs and sidebar visible.

Install Chromium on Debian with ``apt-get install chromium``. Usage::

    python scripts/docs_screenshot.py --out outputs/screenshots
    python scripts/docs_screenshot.py --out /tmp/shots --pages "" concepts.html notation.html --dark

Exit status 1 if any page has unrendered or failed math, or an image that does not load. Not
part of CI.
"""

from __future__ import annotations

import argparse
import functools
import html
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import urllib.error
import urllib.parse
import urllib.request
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_PAGES = ["", "concepts.html"]


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


def build_site(dest: Path) -> Path:
    """Run ``mkdocs build --strict`` into ``dest`` and return it."""
    subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(dest)],
        cwd=ROOT,
        check=True,
    )
    return dest


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: object, client_address: object) -> None:
        # Chromium closes connections it no longer needs (a broken pipe); that is not an error.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


def serve(site: Path) -> tuple[ThreadingHTTPServer, str]:
    """Serve ``site`` on 127.0.0.1 (a free port) from a daemon thread; return server and base URL."""
    handler = functools.partial(_QuietHandler, directory=str(site))
    server = _QuietServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/"


def find_chromium(explicit: str | None) -> str:
    """The Chromium executable: ``explicit`` or the first of chromium / chromium-browser / chrome."""
    for name in [explicit] if explicit else ["chromium", "chromium-browser", "google-chrome"]:
        path = shutil.which(name)
        if path:
            return path
    raise SystemExit("Chromium not found: install it (apt-get install chromium) or pass --chromium")


def chromium_args(binary: str, profile: Path, width: int, height: int, dark: bool) -> list[str]:
    """The headless, offline, reproducible Chromium command line (without the action and URL)."""
    args = [
        binary,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
        f"--user-data-dir={profile}",
        f"--window-size={width},{height}",
        "--virtual-time-budget=5000",
        # Offline: every host name except the local server fails to resolve.
        "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
    ]
    if dark:
        args.append("--force-dark-mode")  # prefers-color-scheme: dark -> the slate palette
    return args


def check_dom(dom: str) -> dict[str, int | bool]:
    """Counts of rendered / failed / left-over math elements in a dumped DOM."""
    total = len(re.findall(r'class="arithmatex[" ]', dom))
    failed = dom.count("katex-failed")
    rendered = len(re.findall(r'class="arithmatex[^"]*"[^>]*data-katex-done="1"', dom)) - failed
    # Page text outside <script>/<style>/<annotation> (KaTeX keeps the TeX source in <annotation>).
    text = re.sub(r"<(script|style|annotation)\b.*?</\1>", "", dom, flags=re.S)
    text = html.unescape(re.sub(r"<[^>]+>", "", text))
    raw = any(s in text for s in ("$$", "\\(", "\\["))
    nav = 'class="md-tabs' in dom and 'class="md-nav' in dom
    return {"arithmatex": total, "rendered": rendered, "failed": failed, "raw_tex": raw, "nav": nav}


def check_images(dom: str, page_url: str) -> dict[str, int]:
    """Fetch every ``<img>`` of the page from the local server: how many there are and load."""
    sources = re.findall(r"<img\b[^>]*\bsrc=\"([^\"]+)\"", dom)
    loaded = 0
    for src in sources:
        try:
            with urllib.request.urlopen(urllib.parse.urljoin(page_url, html.unescape(src))) as r:
                loaded += r.status == 200 and r.headers.get_content_type().startswith("image/")
        except (urllib.error.URLError, ValueError):
            pass
    return {"images": len(sources), "images_loaded": loaded}


def main(argv: list[str] | None = None) -> int:
    """Build, serve, screenshot and check the pages; return the exit status."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--out", type=Path, default=ROOT / "outputs" / "screenshots", help="folder for the PNGs"
    )
    parser.add_argument("--site", type=Path, help="an already built site (default: build one now)")
    parser.add_argument(
        "--pages", nargs="+", default=DEFAULT_PAGES, help='page paths ("" is the home page)'
    )
    parser.add_argument("--chromium", help="Chromium executable (default: found on PATH)")
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=2000)
    parser.add_argument("--dark", action="store_true", help="screenshot the dark palette")
    args = parser.parse_args(argv)

    binary = find_chromium(args.chromium)
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="docs-shot-") as tmp:
        tmp_path = Path(tmp)
        site = args.site.resolve() if args.site else build_site(tmp_path / "site")
        server, base = serve(site)
        ok = True
        try:
            for page in args.pages:
                name = (page.strip("/").replace("/", "_") or "home") + (
                    "_dark" if args.dark else ""
                )
                png = (args.out / f"{name}.png").resolve()
                url = base + page
                for i, action in enumerate([f"--screenshot={png}", "--dump-dom"]):
                    profile = tmp_path / f"profile-{name}-{i}"  # a fresh profile every run
                    cmd = [
                        *chromium_args(binary, profile, args.width, args.height, args.dark),
                        action,
                        url,
                    ]
                    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
                    if proc.returncode != 0:
                        print(proc.stderr[-2000:], file=sys.stderr)
                        raise SystemExit(f"chromium failed on {url} ({action})")
                dom_stats = {**check_dom(proc.stdout), **check_images(proc.stdout, url)}
                good = (
                    dom_stats["rendered"] == dom_stats["arithmatex"]
                    and not dom_stats["failed"]
                    and not dom_stats["raw_tex"]
                    and dom_stats["nav"]
                    and dom_stats["images_loaded"] == dom_stats["images"]
                )
                ok &= good
                print(f"{'ok  ' if good else 'FAIL'} {url} -> {png}  {dom_stats}")
        finally:
            server.shutdown()
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
