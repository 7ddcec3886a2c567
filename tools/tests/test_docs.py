"""The documentation names only things that exist: every repository path written in
README.md, docs/ and the experiment READMEs, and every Markdown page named anywhere in the
tree, is there."""

import re
import subprocess

from helpers import REPO

TOP = ("gr-oppsched", "host", "tools", "experiments", "flowgraphs", "docs", "firmware", ".ci")
PATH_RE = re.compile(r"(?<![\w/.-])((?:%s)/[A-Za-z0-9_./<>*{}-]*)" % "|".join(re.escape(t) for t in TOP))
MD_RE = re.compile(r"(?<![\w/-])([A-Za-z0-9_./-]*[A-Za-z0-9_-]\.md)\b")


def _doc_pages():
    pages = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
    return pages + sorted((REPO / "experiments").rglob("*.md"))


def _tracked_text_files():
    out = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True)
    for name in out.stdout.split():
        p = REPO / name
        if p.suffix in {".md", ".py", ".h", ".cc", ".yaml", ".yml", ".txt", ".sh", ".cmake"} \
                or p.name in {"Makefile", "CMakeLists.txt"}:
            yield p


def _exists(path: str) -> bool:
    if any(c in path for c in "<>{}"):
        return True  # a pattern such as experiments/<paper>/README.md names no one file
    if "*" in path:
        return any(REPO.glob(path))
    return (REPO / path).exists()


def test_every_repository_path_in_the_docs_exists():
    missing = []
    for page in _doc_pages():
        for n, line in enumerate(page.read_text().splitlines(), 1):
            for m in PATH_RE.finditer(line):
                path = m.group(1).rstrip(".,:;)'`")
                if not _exists(path):
                    missing.append(f"{page.relative_to(REPO)}:{n}: {path}")
    assert missing == []


def test_every_markdown_page_named_in_the_tree_exists():
    missing = []
    for f in _tracked_text_files():
        try:
            text = f.read_text()
        except UnicodeDecodeError:
            continue
        for n, line in enumerate(text.splitlines(), 1):
            for m in MD_RE.finditer(line):
                name = m.group(1).lstrip("./")
                if name.startswith(("http", "www")):
                    continue
                candidates = (REPO / name, REPO / "docs" / name, f.parent / name)
                if not any(c.exists() for c in candidates):
                    missing.append(f"{f.relative_to(REPO)}:{n}: {m.group(1)}")
    assert missing == []
