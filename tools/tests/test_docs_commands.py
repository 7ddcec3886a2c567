"""Every command the documentation shows can be run as written: each whole experiment in a
```yaml block of README.md, docs/ and the experiment READMEs passes `oppsched check`, and
each `oppsched VERB ...` line in a shell block names a verb (and a sub-command, where the
verb has them) whose `--help` exits 0. Everything runs in-process through the CLI's own
parser (oppsched.cli.main), so the test takes seconds."""

import contextlib
import io
import re
import shlex

import pytest
import yaml

from helpers import REPO
from oppsched import cli

FENCE_RE = re.compile(r"^(\s*)```(\S*)\s*$")
SHELL_LANGS = {"", "sh", "shell", "bash", "console"}
# A command line: an optional prompt, sudo or environment assignments, then the program.
COMMAND_RE = re.compile(r"^(?:\$\s+)?(?:sudo\s+)?(?:[A-Z_]+=\S+\s+)*"
                        r"(?:\S*/)?oppsched\s+(?P<rest>\S.*)$")
CHOICES_RE = re.compile(r"^usage: [^{]*? \{([\w,-]+)\}")


def _doc_pages():
    pages = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
    return pages + sorted((REPO / "experiments").rglob("README.md"))


def _blocks():
    """(page, line number, language, text) of every fenced block."""
    for page in _doc_pages():
        lines = page.read_text().splitlines()
        i = 0
        while i < len(lines):
            m = FENCE_RE.match(lines[i])
            if not m:
                i += 1
                continue
            indent, lang, start = m.group(1), m.group(2).lower(), i + 1
            body = []
            i += 1
            while i < len(lines) and not re.match(r"^\s*```\s*$", lines[i]):
                body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i])
                i += 1
            i += 1
            yield page.relative_to(REPO), start, lang, "\n".join(body)


def _experiment_snippets():
    out = []
    for page, line, lang, text in _blocks():
        if lang not in {"yaml", "yml"}:
            continue
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError:
            continue  # a fragment with placeholders is not a whole experiment
        if isinstance(data, dict) and "experiment" in data and "kind" in data:
            out.append(pytest.param(text, id=f"{page}:{line}"))
    return out


def _command_lines():
    """(where, argv after `oppsched`) of every oppsched command in a shell block; a line
    ending in a backslash continues on the next one."""
    out = []
    for page, line, lang, text in _blocks():
        if lang not in SHELL_LANGS:
            continue
        joined, first = "", None
        for n, raw in enumerate(text.splitlines()):
            first = line + 1 + n if not joined else first
            if raw.rstrip().endswith("\\"):
                joined += raw.rstrip()[:-1] + " "
                continue
            cmd, joined = (joined + raw).strip(), ""
            m = COMMAND_RE.match(cmd)
            if not m:
                continue
            try:
                argv = shlex.split(m.group("rest"), comments=True)
            except ValueError:
                argv = m.group("rest").split()
            if argv and re.fullmatch(r"[a-z][a-z0-9-]*", argv[0]):
                out.append((f"{page}:{first}", argv))
    return out


def _help(argv: list[str]) -> tuple[int, str]:
    """`oppsched ARGV --help` in-process: its exit status and its output."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
        try:
            rc = cli.main([*argv, "--help"])
        except SystemExit as exc:
            rc = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return rc, buf.getvalue()


EXPERIMENTS = _experiment_snippets()
COMMANDS = _command_lines()


def test_the_docs_hold_whole_experiments_and_commands():
    # The collectors find what the pages are known to hold (a regex that stopped matching
    # would otherwise pass the test by checking nothing).
    assert len(EXPERIMENTS) >= 2
    assert {argv[0] for _, argv in COMMANDS} >= {"run", "check", "sweep", "analyze",
                                                  "preflight"}


@pytest.mark.parametrize("text", EXPERIMENTS)
def test_every_experiment_snippet_passes_check(text, tmp_path, monkeypatch, capsys):
    path = tmp_path / "snippet.yaml"
    path.write_text(text + "\n")
    monkeypatch.chdir(REPO)  # relative paths in a snippet are the repository's
    assert cli.main(["check", str(path)]) == 0, capsys.readouterr().err
    assert ": ok (" in capsys.readouterr().out


def test_every_oppsched_command_in_the_docs_names_a_verb_whose_help_runs():
    helps: dict[tuple[str, ...], tuple[int, str]] = {}
    bad = []
    for where, argv in COMMANDS:
        verb = (argv[0],)
        if verb not in helps:
            helps[verb] = _help(list(verb))
        rc, text = helps[verb]
        if rc != 0:
            bad.append(f"{where}: oppsched {argv[0]} --help exits {rc}")
            continue
        # A verb with sub-commands (keys generate, keys cluster): the sub-command too.
        m = CHOICES_RE.match(" ".join(text.split("\n\n")[0].split()))  # the usage only
        if m and len(argv) > 1 and re.fullmatch(r"[a-z][a-z0-9-]*", argv[1]):
            subs = m.group(1).split(",")
            if argv[1] not in subs:
                bad.append(f"{where}: oppsched {argv[0]} {argv[1]}: not one of {subs}")
                continue
            key = (argv[0], argv[1])
            if key not in helps:
                helps[key] = _help(list(key))
            if helps[key][0] != 0:
                bad.append(f"{where}: oppsched {' '.join(key)} --help exits {helps[key][0]}")
    assert bad == []


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_link_to_a_section_of_the_same_page_names_one_of_its_headings():
    # The tables of contents at the top of the long pages: a heading renamed without its
    # entry breaks the link silently.
    bad = []
    for page in _doc_pages():
        anchors, seen, fence = set(), {}, False
        text = page.read_text()
        for line in text.splitlines():
            if line.lstrip().startswith("```"):
                fence = not fence
            m = None if fence else re.match(r"^#{1,6} (.*)$", line)
            if m:
                a = _anchor(m.group(1))
                n = seen.get(a, 0)
                seen[a] = n + 1
                anchors.add(a if n == 0 else f"{a}-{n}")
        for n, line in enumerate(text.splitlines(), 1):
            for link in re.findall(r"\]\(#([^)]+)\)", line):
                if link not in anchors:
                    bad.append(f"{page.relative_to(REPO)}:{n}: #{link}")
    assert bad == []


def test_every_long_page_starts_with_a_table_of_contents():
    # A page over 300 lines is read by its sections: "Contents:" near the top lists them
    # (docs/index.md maps the pages; the test above checks the links).
    bad = []
    for page in _doc_pages():
        lines = page.read_text().splitlines()
        if len(lines) > 300 and not any(line == "Contents:" for line in lines[:12]):
            bad.append(f"{page.relative_to(REPO)} ({len(lines)} lines)")
    assert bad == []
