"""The documentation holds together: every setting is documented, every page is reachable
from docs/index.md, every relative link and anchor resolves, pages say how things are now,
and README.md stays a front door. No servers."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from chatgql.settings import Settings

from .conftest import REPO

DOCS = REPO / "docs"
INDEX = DOCS / "index.md"
README = REPO / "README.md"
CONFIGURATION = DOCS / "operating" / "configuration.md"
LINK = re.compile(r"\]\(([^)\s]+)\)")
# How a branch got somewhere belongs to git, not to a page (docs say how things are now).
HISTORY_WORDING = re.compile(r"\bissue \d+|\bbranch(es)?\b|\bmerger\b|notes for the merge", re.IGNORECASE)


@pytest.fixture(autouse=True)
def clean_database() -> None:
    """No database here: the suite's autouse truncation is not needed."""


def pages() -> list[Path]:
    return [README, *sorted(DOCS.rglob("*.md"))]


def prose_lines(path: Path) -> list[tuple[int, str]]:
    """The lines of a markdown file outside fenced code blocks, numbered from 1."""
    lines, fenced = [], False
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced:
            lines.append((number, line))
    return lines


def anchors(path: Path) -> set[str]:
    """GitHub's heading anchors of a markdown file."""
    found = set()
    for _, line in prose_lines(path):
        if line.startswith("#"):
            heading = line.lstrip("#").strip().lower()
            found.add(re.sub(r"[^\w\- ]", "", heading).replace(" ", "-"))
    return found


def links(path: Path) -> list[tuple[int, str, Path, str]]:
    """(line, link, target path, fragment) of every relative link of a page."""
    found = []
    for number, line in prose_lines(path):
        for match in LINK.finditer(line):
            url = match.group(1)
            if re.match(r"[a-z]+:", url):
                continue
            target, _, fragment = url.partition("#")
            found.append((number, url, (path.parent / target).resolve() if target else path, fragment))
    return found


def test_every_setting_is_documented_on_the_configuration_page():
    documented = set(re.findall(r"CHATGQL_[A-Z0-9_]*[A-Z0-9]\b", CONFIGURATION.read_text()))
    names = {f"CHATGQL_{name.upper()}" for name in Settings.model_fields}
    assert names, "no settings found"
    missing = sorted(names - documented)
    assert not missing, f"settings missing from {CONFIGURATION.relative_to(REPO)}: {missing}"
    unknown = sorted(documented - names)
    assert not unknown, f"{CONFIGURATION.relative_to(REPO)} documents settings that do not exist: {unknown}"


def test_every_relative_link_and_anchor_resolves():
    broken = []
    for page in pages():
        for number, url, target, fragment in links(page):
            where = f"{page.relative_to(REPO)}:{number}: {url}"
            if not target.exists():
                broken.append(f"{where} (no such file)")
            elif fragment and target.suffix == ".md" and fragment not in anchors(target):
                broken.append(f"{where} (no such heading)")
    assert not broken, "\n".join(broken)


def test_every_docs_page_is_reachable_from_the_index():
    seen, todo = {INDEX.resolve()}, [INDEX]
    while todo:
        page = todo.pop()
        for _, _, target, _ in links(page):
            if target.suffix == ".md" and DOCS.resolve() in target.parents and target.exists() and target not in seen:
                seen.add(target)
                todo.append(target)
    unreachable = sorted(str(p.relative_to(REPO)) for p in DOCS.rglob("*.md") if p.resolve() not in seen)
    assert not unreachable, f"docs pages no path from docs/index.md reaches: {unreachable}"
    assert "docs/index.md" in README.read_text()


def test_pages_say_how_things_are_now():
    found = [
        f"{page.relative_to(REPO)}:{number}: {line.strip()}"
        for page in pages()
        for number, line in prose_lines(page)
        if HISTORY_WORDING.search(line)
    ]
    assert not found, "history wording (it belongs in git):\n" + "\n".join(found)


def test_the_readme_is_a_front_door():
    text = README.read_text()
    assert len(text.splitlines()) <= 200
    # the two quick-start commands, unchanged
    assert "./scripts/serve    # install and run chatgql" in text
    assert "./scripts/test     # install and run the whole test suite" in text
    long_lines = [n for n, line in enumerate(text.splitlines(), 1) if len(line) > 1000]
    assert not long_lines, f"README.md lines over 1,000 characters: {long_lines}"


def test_the_development_layout_names_every_package_and_module_of_the_tree():
    """docs/development/index.md's layout follows the tree: each package of src/chatgql and each
    module at its top, each folder of the repository's top, and each script is named there."""
    text = (DOCS / "development" / "index.md").read_text()
    layout = text[text.index("## Layout") :]
    src = REPO / "src" / "chatgql"
    names = [f"{path.name}/" for path in src.iterdir() if path.is_dir() and not path.name.startswith("__")]
    names += [path.name for path in src.glob("*.py") if path.name != "__init__.py"]
    names += [f"{path.name}/" for path in REPO.iterdir() if path.is_dir() and not path.name.startswith(".")]
    names += [path.name for path in (REPO / "scripts").iterdir() if path.is_file()]
    missing = [name for name in names if name.rstrip("/") not in layout]
    assert not missing, f"docs/development/index.md's layout does not name: {missing}"
