"""The documentation site builds with warnings as errors, and its links hold.

Theory of operation: ``mkdocs build --strict`` with the repository's mkdocs.yml is the
check CI runs. Its ``validation:`` settings make a link to a missing page, a link to a
missing anchor of a page, and a page left out of the navigation warnings, which
``--strict`` turns into a failed build; mkdocstrings fails it the same way for a
``::: name`` it cannot import or a docstring it cannot read. Links to other sites are
not checked: the suite runs where only package registries can be reached.

The build writes to a temporary directory, never to ``site/`` in the checkout.
"""

import os
import re
import subprocess
import sys

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _mkdocs_build(config, site_dir):
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(config),
         "--site-dir", str(site_dir)],
        cwd=os.path.dirname(str(config)), capture_output=True, text=True, timeout=300)


def _config():
    # mkdocs.yml uses no !!python tags, so the safe loader reads all of it.
    with open(os.path.join(ROOT, "mkdocs.yml"), encoding="utf-8") as f:
        return yaml.safe_load(f)


def _api_names():
    """{page under docs/api: [the names its ``::: name`` lines document]}."""
    out = {}
    api = os.path.join(ROOT, "docs", "api")
    for name in sorted(os.listdir(api)):
        with open(os.path.join(api, name), encoding="utf-8") as f:
            out[name] = re.findall(r"^::: (\S+)$", f.read(), flags=re.M)
    return out


def test_the_site_builds_strictly_with_every_api_page(tmp_path):
    site = tmp_path / "site"
    built = _mkdocs_build(os.path.join(ROOT, "mkdocs.yml"), site)
    assert built.returncode == 0, built.stderr[-4000:]
    for page, names in _api_names().items():
        with open(site / "api" / page[:-3] / "index.html", encoding="utf-8") as f:
            html = f.read()
        for name in names:
            assert f'id="{name}"' in html, f"docs/api/{page}: nothing rendered for {name}"


def test_every_page_of_docs_is_in_the_navigation():
    def listed(nav):
        for entry in nav:
            for value in (entry.values() if isinstance(entry, dict) else [entry]):
                yield from (listed(value) if isinstance(value, list) else [value])
    pages = {os.path.relpath(os.path.join(d, f), os.path.join(ROOT, "docs"))
             for d, _dirs, files in os.walk(os.path.join(ROOT, "docs"))
             for f in files if f.endswith(".md")}
    assert pages - set(listed(_config()["nav"])) == set()


def _small_site(tmp_path, page_b):
    """A two-page site under the repository's validation settings, without the
    docstring plugins (a build of a few hundred milliseconds)."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# A\n\nSee [B](b.md#b-section).\n")
    (docs / "b.md").write_text(page_b)
    config = {"site_name": "t", "docs_dir": "docs", "strict": True,
              "validation": _config()["validation"],
              "nav": ["index.md", "b.md"]}
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(config))
    return _mkdocs_build(tmp_path / "mkdocs.yml", tmp_path / "site")


def test_the_validation_settings_pass_a_site_whose_links_hold(tmp_path):
    built = _small_site(tmp_path, "# B\n\n## B section\n")
    assert built.returncode == 0, built.stderr


def test_a_link_to_a_missing_anchor_or_page_fails_the_build(tmp_path):
    built = _small_site(tmp_path, "# B\n\n## Another section\n\nSee [C](c.md).\n")
    assert built.returncode != 0
    assert "'b.md#b-section'" in built.stderr and "'c.md'" in built.stderr, built.stderr
