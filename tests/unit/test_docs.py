"""Docs stay true: the configuration reference lists every key the code knows, links and
make targets exist, and pages speak to users: no internal issue numbers, work sessions or
paths outside the repository, and a short performance page."""

import re
from pathlib import Path

from txbroker.broker.config import BROKER_KEYS, markdown_reference
from txbroker.broker.handlers import supported_versions
from txbroker.protocol.messages import api_name
from txbroker.storage.log_config import TOPIC_CONFIGS

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_configuration_reference_is_current():
    text = (DOCS / "configuration.md").read_text()
    assert markdown_reference() in text, (
        "docs/configuration.md is stale: regenerate the key tables with "
        "`make docs-config`"
    )
    for key in list(BROKER_KEYS) + list(TOPIC_CONFIGS):
        assert f"`{key}`" in text


def test_compatibility_lists_every_advertised_api():
    text = (DOCS / "compatibility.md").read_text()
    for api_key, low, high in supported_versions():
        name = "".join(part.capitalize() for part in api_name(api_key).split("_"))
        row = [line for line in text.splitlines() if line.startswith(f"| {name} | {api_key} |")]
        assert row, f"{name} missing from docs/compatibility.md"
        assert f"{low}-{high}" in row[0], f"{name} versions {low}-{high} not in: {row[0]}"


ROOT = DOCS.parent
PAGES = [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]

# "issue 25", "(issue 16)", "issues 16, 18": the project's own tracker, which readers
# cannot see. An issue of another project says whose it is ("librdkafka issue #5456").
_ISSUE = re.compile(r"\bissues?\s+#?\d+", re.IGNORECASE)
_OTHER_TRACKERS = {"librdkafka", "kafka", "apache", "kafka-python", "aiokafka",
                   "confluent-kafka", "kafkajs", "spark", "pyspark", "kio", "tansu",
                   "cpython", "python", "uvloop", "github", "jira"}
# Work history ("the eighth session", "the session of 39fe467"), not pytest's or
# Spark's sessions, nor session timeouts.
_SESSION = re.compile(
    r"\b(?:first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth"
    r"|\d+(?:st|nd|rd|th)|this|that|same|previous|earlier|later)\s+session\b"
    r"|\bsessions?\s+\d|\bsession of [0-9a-f]{7}|\bthe session's\b",
    re.IGNORECASE)
# Places outside the repository: a reader of the docs has only the repository.
_OUTSIDE = re.compile(r"\.\./shared\b|(?<![\w.])/work/")
_LINK = re.compile(r"\]\(([^)\s]+)\)")


def _text_lines(page: Path) -> list[tuple[int, str, bool]]:
    """(line number, line, inside a fenced code block) of a Markdown page."""
    out, fenced = [], False
    for number, line in enumerate(page.read_text().splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        out.append((number, line, fenced))
    return out


def _is_internal_issue(text: str, match: re.Match) -> bool:
    before = text[:match.start()].split()[-1:]
    word = before[0].strip("([`*,").lower() if before else ""
    return not (word in _OTHER_TRACKERS or "/" in word)


def test_docs_name_no_internal_issue_session_or_outside_path():
    found = []
    for page in PAGES:
        text = page.read_text()
        name = page.relative_to(ROOT)
        for match in _ISSUE.finditer(text):
            if _is_internal_issue(text, match):
                line = text.count("\n", 0, match.start()) + 1
                found.append(f"{name}:{line}: internal issue number {match.group(0)!r}")
        for pattern, what in ((_SESSION, "work session"), (_OUTSIDE, "path outside the repository")):
            for match in pattern.finditer(text):
                line = text.count("\n", 0, match.start()) + 1
                found.append(f"{name}:{line}: {what} {match.group(0)!r}")
    assert not found, (
        "docs must state facts without the project's issue numbers, work sessions or "
        "paths outside the repository:\n" + "\n".join(found))


def test_performance_page_stays_short():
    lines = (DOCS / "performance.md").read_text().splitlines()
    assert len(lines) <= 250, (
        f"docs/performance.md has {len(lines)} lines (at most 250): move history, profiles "
        "and per-run notes to docs/internals/performance-history.md")


def _anchors(page: Path) -> set[str]:
    """GitHub's anchors for a page's headings."""
    anchors: set[str] = set()
    seen: dict[str, int] = {}
    for _, line, fenced in _text_lines(page):
        if fenced or not line.startswith("#"):
            continue
        slug = re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def test_docs_links_resolve_inside_the_repository():
    broken = []
    for page in PAGES:
        for number, line, fenced in _text_lines(page):
            if fenced:
                continue
            for target in _LINK.findall(line):
                if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
                    continue
                file, _, anchor = target.partition("#")
                dest = (page.parent / file).resolve() if file else page
                where = f"{page.relative_to(ROOT)}:{number}: {target}"
                if not dest.is_relative_to(ROOT):
                    broken.append(f"{where} (outside the repository)")
                elif not dest.exists():
                    broken.append(f"{where} (no such file)")
                elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                    broken.append(f"{where} (no such heading)")
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_docs_name_only_existing_make_targets():
    makefile = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([A-Za-z0-9_.-]+):", makefile, re.MULTILINE))
    missing = []
    for page in PAGES:
        for match in re.finditer(r"(?:`|^)make ([a-z][a-z0-9-]*)", page.read_text(), re.MULTILINE):
            if match.group(1) not in targets:
                missing.append(f"{page.relative_to(ROOT)}: {match.group(0)}")
    assert not missing, "make targets named in the docs but not in the Makefile:\n" + "\n".join(missing)
