"""asv's published history site, made to open on a machine without internet.

``asv publish`` writes a site whose page loads jQuery, flot, bootstrap, stupidtable and blueimp-md5 from
CDNs; offline it shows only asv's "Can not determine continental origin of swallow" error. ``offline``
copies those files from npm's packages (``reports/history_js``: package.json pins the versions asv names;
``bash scripts/setup.sh --history`` runs ``npm ci`` there) into the site's ``vendor/`` folder and points
the page at them, so that ``asv preview`` (or any static web server) shows the graphs offline.

    attention-bench site           the paired histories into asv's results (``asv_paired``), asv publish, then
                                   offline(); prints the site's index.html
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import sys

from benchmarks.core import records

from . import asv_paired

#: where ``npm ci`` puts the packages (package.json next to it pins them)
MODULES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "history_js", "node_modules")

#: the file a CDN address names (its last part) -> the same library in npm's package, and where it goes
#: under the site's vendor/ folder (bootstrap's CSS finds its fonts at ../fonts/)
LIBRARIES = {
    "jquery-3.3.1.min.js": ("jquery/dist/jquery.min.js", "jquery.min.js"),
    "jquery.flot.min.js": ("flot/jquery.flot.js", "jquery.flot.js"),
    "jquery.flot.time.min.js": ("flot/jquery.flot.time.js", "jquery.flot.time.js"),
    "jquery.flot.selection.min.js": ("flot/jquery.flot.selection.js", "jquery.flot.selection.js"),
    "jquery.flot.categories.min.js": ("flot/jquery.flot.categories.js", "jquery.flot.categories.js"),
    "jquery.flot.orderBars.js": ("flot-orderbars/js/jquery.flot.orderBars.js", "jquery.flot.orderBars.js"),
    "stupidtable.min.js": ("stupid-table-plugin/stupidtable.min.js", "stupidtable.min.js"),
    "md5.min.js": ("blueimp-md5/js/md5.min.js", "md5.min.js"),
    "bootstrap.min.js": ("bootstrap/dist/js/bootstrap.min.js", "bootstrap.min.js"),
    "bootstrap.min.css": ("bootstrap/dist/css/bootstrap.min.css", "css/bootstrap.min.css"),
}
FONTS = ("bootstrap/dist/fonts", "fonts")
VENDOR = "vendor"

#: a <script src=...> or <link href=...> tag that loads from another host
_REMOTE = re.compile(r'<(script|link)\b[^>]*?\b(?:src|href)="(https?://[^"]+)"[^>]*>')
#: attributes that tie a tag to the CDN's copy (a local copy from npm is not byte for byte the CDN's)
_CDN_ATTRIBUTES = re.compile(r'\s(?:integrity|crossorigin|referrerpolicy)="[^"]*"')


def _local_tag(match: re.Match, modules: str, vendor: str) -> str:
    tag, url = match.group(0), match.group(2)
    name = url.rsplit("/", 1)[-1]
    if name not in LIBRARIES:
        raise ValueError(f"asv's page loads {url!r}, which reports.asv_site does not know how to serve locally; "
                         f"known: {', '.join(sorted(LIBRARIES))}")
    source, target = LIBRARIES[name]
    if not os.path.isfile(os.path.join(modules, source)):
        raise FileNotFoundError(f"{os.path.join(modules, source)} is missing: run `bash scripts/setup.sh "
                                "--history` (npm ci in reports/history_js) first")
    os.makedirs(os.path.dirname(os.path.join(vendor, target)), exist_ok=True)
    shutil.copyfile(os.path.join(modules, source), os.path.join(vendor, target))
    return _CDN_ATTRIBUTES.sub("", tag.replace(url, f"{VENDOR}/{target}"))


def offline(html_dir: str, modules: str = MODULES) -> list[str]:
    """Point every page of asv's site in ``html_dir`` at local copies of its libraries; returns the pages
    changed. A library it does not know gets an error naming its address (and no page is changed)."""
    pages = [os.path.join(html_dir, f) for f in sorted(os.listdir(html_dir)) if f.endswith(".html")]
    if not any(os.path.basename(p) == "index.html" for p in pages):
        raise FileNotFoundError(f"{html_dir!r} holds no index.html: run `asv publish` first")
    vendor = os.path.join(html_dir, VENDOR)
    rewritten = {}
    for page in pages:
        with open(page, encoding="utf-8") as f:
            text = f.read()
        local = _REMOTE.sub(lambda m: _local_tag(m, modules, vendor), text)
        if local != text:
            rewritten[page] = local
    if rewritten:
        shutil.copytree(os.path.join(modules, FONTS[0]), os.path.join(vendor, FONTS[1]), dirs_exist_ok=True)
    for page, text in rewritten.items():
        records.write_text_atomic(page, text)
    return sorted(rewritten)


def _config(config: str):
    from asv import config as asv_config  # optional: a GPU machine that only runs the runner has no asv

    if not os.path.isfile(config):
        raise FileNotFoundError(f"no asv configuration at {os.path.abspath(config)!r}: run this in the project's "
                                "root, or pass --config")
    return asv_config.Config.load(config)


def html_dir(config: str = "asv.conf.json") -> str:
    """The ``html_dir`` of an asv configuration (asv's own reader: comments allowed, relative to it)."""
    return os.path.join(os.path.dirname(os.path.abspath(config)), _config(config).html_dir)


def results_dir(config: str = "asv.conf.json") -> str:
    """The ``results_dir`` of an asv configuration."""
    return os.path.join(os.path.dirname(os.path.abspath(config)), _config(config).results_dir)


def asv_machine() -> str:
    """asv's name for this machine: the one machine in ``~/.asv-machine.json`` (``asv machine``), else the
    hostname (asv's default)."""
    try:
        with open(os.path.expanduser("~/.asv-machine.json")) as f:
            names = [k for k in json.load(f) if k != "version"]
    except (OSError, ValueError):
        names = []
    return names[0] if len(names) == 1 else platform.node()


class PublishFailed(RuntimeError):
    """``asv publish`` exited with an error (it has said why)."""


def publish(config: str = "asv.conf.json", modules: str = MODULES, histories: list[str] | None = None,
            machine: str | None = None) -> str:
    """The paired histories in ``histories`` (default: ``asv_paired.folders()``) written as asv results of
    ``machine`` (default: asv's name for this machine), ``asv publish`` with ``config``, then ``offline``;
    returns the site's index.html. ValueError naming a history folder that does not exist."""
    for folder in asv_paired.folders() if histories is None else histories:
        if not os.path.isdir(folder):
            raise ValueError(f"history {folder!r}: no such folder (attention-bench history makes one)")
        asv_paired.write(asv_paired.load_history(folder), results_dir(config), machine or asv_machine())
    site = html_dir(config)
    done = subprocess.run([sys.executable, "-m", "asv", "publish", "--config", config], stdout=sys.stderr)  # progress
    if done.returncode:
        raise PublishFailed(f"asv publish --config {config} exited {done.returncode}")
    offline(site, modules)
    return os.path.join(site, "index.html")
